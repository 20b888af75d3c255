"""The estimator's fast path for searching many layouts of one job.

It runs the estimator's own functions (``memtune.estimate.core``) and caches each piece under
the knobs that piece depends on, so candidates that share a tensor-parallel shape share their
activation figures, candidates that share a pipeline layout share their schedules, and so on.
The peak of a pipeline rank is then assembled by ``core.combine``, the same function
``estimate`` uses, so the numbers are identical (``tests/plan/test_fast.py`` compares them on
random candidates).

Only one rank per group of identical stages is assembled: ranks whose chunks are the same (same
layer kinds, no embedding, no output layer) hold the same model state and the same per-microbatch
activations, and Megatron-Core's schedules keep at least as many microbatches in flight on an
earlier rank of the pipeline as on a later one (``memtune/estimate/schedule.py``: warm-up forwards
fall with the rank, and the in-flight set is a prefix of one forward order), so the earliest rank
of each group is its most loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from memtune.config.derived import Chunk, Derived, derive
from memtune.config.schema import JobConfig
from memtune.estimate import activations as act
from memtune.estimate.core import (
    ChunkActivations,
    EstimateOptions,
    RankEstimate,
    chunk_activations,
    combine,
    deferred_wgrad_bytes,
    held_and_transient,
    peak_parts,
    persistent_buffers,
    rank_params,
)
from memtune.estimate.flavour import flavour_of
from memtune.estimate.overhead import non_pytorch_bytes
from memtune.estimate.params import ParamCounts, ParamTensor
from memtune.estimate.peft import AdapterParams
from memtune.estimate.schedule import in_flight
from memtune.estimate.state import ModelState, model_state
from memtune.estimate.verdict import Margin, margin_of, needed_bytes, verdict_of
from memtune.plan.space import Candidate, Recompute

# What a chunk's activations and model state depend on besides the job-wide knobs: its layers'
# kinds (MoE or dense), whether it holds the embedding, the output layer, and its MTP layers.
ChunkSignature = tuple[tuple[bool, ...], bool, bool, int]
StageSignature = tuple[ChunkSignature, ...]  # one per chunk of a pipeline rank

# Cache keys: the candidate's knobs each piece depends on (see FastEstimator.evaluate).
LayoutKey = tuple[int, int, str]  # pp, vpp, split
# tp, cp, mbs, sp, recompute, act_offload, regather, ep, etp, pp > 1
ActivationKey = tuple[int, int, int, bool, Recompute, int, bool, int, int, bool]
ParamsKey = tuple[int, int, int, int, int, str, int]  # tp, ep, etp, pp, vpp, split, pipeline rank
OutsideKey = tuple[int, int, int, int, int, int, int]  # tp, pp, cp, dp, ep, etp, edp
# tp, cp, mbs, sp, recompute, act_offload, regather, ep, etp, layout
RankActivationKey = tuple[int, int, int, bool, Recompute, int, bool, int, int, LayoutKey]
# tp, ep, etp, dp, cp, edp, sharding, offload, layout
StateKey = tuple[int, int, int, int, int, int, str, float, LayoutKey]
FlightKey = tuple[int, LayoutKey]  # microbatches, layout
# tp, sp, cp, mbs, regather, recompute, act_offload, layout
BufferKey = tuple[int, bool, int, int, bool, Recompute, int, LayoutKey]
HeldKey = tuple[RankActivationKey, int]  # activations, microbatches

RankParams = tuple[ParamCounts, AdapterParams, ParamCounts, list[list[ParamTensor]]]  # core.rank_params


class PipelineLayout(NamedTuple):
    chunks: tuple[tuple[Chunk, ...], ...]  # chunks[pp_rank][vp_stage], as Derived.chunks
    signatures: tuple[StageSignature, ...]  # per pipeline rank
    representatives: tuple[int, ...]  # the first pipeline rank of each group of identical stages


class Held(NamedTuple):
    """One rank's in-flight activations (with deferred weight-gradient buffers), the worst
    working set a chunk adds (``core.held_and_transient``), and the deferred buffers alone."""

    activations: float
    worst_transient: float
    deferred: float


class RankPieces(NamedTuple):
    """What ``core.combine`` takes to build one rank's RankEstimate, in its argument order."""

    pp_rank: int
    chunks: tuple[Chunk, ...]
    flight: dict[int, int]
    state: ModelState
    activations: list[ChunkActivations]
    buffers: float
    deferred: float


def job_of(base: JobConfig, c: Candidate) -> JobConfig:
    """``base`` with the candidate's keys set, without re-validating (the search builds one job per
    cache miss; the layouts it shows go through ``with_changes`` and ``gate``, and
    ``tests/plan/test_fast.py`` checks that both give equal jobs)."""
    sections: dict[str, dict[str, Any]] = {}
    for change in c.changes(base):
        section, key = change.key.split(".", 1)
        sections.setdefault(section, {})[key] = change.value
    update = {name: getattr(base, name).model_copy(update=values) for name, values in sections.items()}
    return base.model_copy(update=update)


@dataclass
class FastResult:
    peak_bytes: int  # of the most-loaded rank (of the first over-full rank when the walk stopped)
    needed_bytes: int
    verdict: str
    _pieces: RankPieces  # what core.combine builds that rank's RankEstimate from

    @property
    def worst(self) -> RankEstimate:
        return combine(*self._pieces, by_module=False)


class FastEstimator:
    def __init__(self, base: JobConfig, capacity_bytes: int, options: EstimateOptions | None = None) -> None:
        self.base = base
        self.capacity = capacity_bytes
        self.options = options or EstimateOptions()
        self.world = derive(base).world_size
        self.gbs = derive(base).global_batch_size
        self._derived: dict[Candidate, Derived] = {}
        self._layouts: dict[LayoutKey, PipelineLayout] = {}
        self._acts: dict[tuple[ActivationKey, ChunkSignature], ChunkActivations] = {}
        self._kinds: dict[ActivationKey, dict[bool, act.Saved]] = {}
        self._params: dict[ParamsKey, RankParams] = {}
        # Per representative rank, under each piece's key.
        self._rank_acts: dict[RankActivationKey, list[list[ChunkActivations]]] = {}
        self._rank_states: dict[StateKey, list[ModelState]] = {}
        self._rank_flights: dict[FlightKey, list[dict[int, int]]] = {}
        self._rank_buffers: dict[BufferKey, list[float]] = {}
        self._rank_held: dict[HeldKey, list[Held]] = {}
        self._outside: dict[OutsideKey, int] = {}
        # The candidate's fields the verdict's feature families read (estimate/verdict.py families_of).
        self._margins: dict[tuple[int, str, float, int], Margin] = {}

    def _d(self, c: Candidate) -> Derived:
        d = self._derived.get(c)
        if d is None:
            if len(self._derived) > 4096:
                self._derived.clear()
            d = self._derived[c] = derive(job_of(self.base, c))
        return d

    def layout(self, c: Candidate) -> PipelineLayout:
        """Chunks of every rank, and the first rank of each group of identical stages."""
        key: LayoutKey = (c.pp, c.vpp, c.split)
        hit = self._layouts.get(key)
        if hit is None:
            d = self._d(c)
            signatures: list[StageSignature] = []
            for chunks in d.chunks:
                signatures.append(
                    tuple(
                        (
                            tuple(d.moe_layer_pattern[i] for i in ch.layers),
                            ch.has_embedding,
                            ch.has_output,
                            ch.mtp_layers,
                        )
                        for ch in chunks
                    )
                )
            seen: set[StageSignature] = set()
            reps: list[int] = []
            for r, sig in enumerate(signatures):
                if sig not in seen:
                    seen.add(sig)
                    reps.append(r)
            hit = self._layouts[key] = PipelineLayout(d.chunks, tuple(signatures), tuple(reps))
        return hit

    def _activations(self, c: Candidate, layout_key: LayoutKey) -> list[list[ChunkActivations]]:
        """Per representative rank, its chunks' activations (one microbatch each)."""
        act_key: ActivationKey = (
            c.tp,
            c.cp,
            c.mbs,
            c.sp,
            c.recompute,
            c.act_offload,
            c.regather,
            c.ep,
            c.etp,
            c.pp > 1,
        )
        chunks_all, signatures, reps = self.layout(c)
        kinds = self._kinds.setdefault(act_key, {})
        out: list[list[ChunkActivations]] = []
        for r in reps:
            per_chunk: list[ChunkActivations] = []
            for chunk, sig in zip(chunks_all[r], signatures[r]):
                k = (act_key, sig)
                acts = self._acts.get(k)
                if acts is None:
                    acts = self._acts[k] = chunk_activations(self._d(c), chunk, self.options, kinds)
                per_chunk.append(acts)
            out.append(per_chunk)
        return out

    def _states(self, c: Candidate, dp: int, edp: int) -> list[ModelState]:
        chunks_all, _, reps = self.layout(c)
        d = self._d(c)
        out: list[ModelState] = []
        for r in reps:
            chunks = chunks_all[r]
            pk: ParamsKey = (c.tp, c.ep, c.etp, c.pp, c.vpp, c.split, r)
            params = self._params.get(pk)
            if params is None:
                params = self._params[pk] = rank_params(d, chunks)
            out.append(model_state(d, *params))
        return out

    def evaluate(self, c: Candidate, stop_when_over: bool = False) -> FastResult:
        """The most-loaded rank of ``c`` and its verdict, as ``estimate`` gives them.

        With ``stop_when_over`` the walk over ranks stops at the first rank that does not fit
        with the margin; the result then names that rank (the layout does not fit either way).
        """
        chunks_all, _, reps = self.layout(c)
        layout_key: LayoutKey = (c.pp, c.vpp, c.split)
        dp = self.world // (c.tp * c.pp * c.cp)
        edp = self.world // (c.etp * c.ep * c.pp)
        microbatches = max(1, self.gbs // (c.mbs * dp))
        ok: OutsideKey = (c.tp, c.pp, c.cp, dp, c.ep, c.etp, edp)
        outside = self._outside.get(ok)
        if outside is None:
            outside = self._outside[ok] = non_pytorch_bytes(self._d(c))
        mk = (c.tp, c.sharding, c.offload, c.act_offload)
        margin = self._margins.get(mk)
        if margin is None:
            margin = self._margins[mk] = margin_of(self._d(c))
        ak: RankActivationKey = (
            c.tp,
            c.cp,
            c.mbs,
            c.sp,
            c.recompute,
            c.act_offload,
            c.regather,
            c.ep,
            c.etp,
            layout_key,
        )
        activations = self._rank_acts.get(ak)
        if activations is None:
            activations = self._rank_acts[ak] = self._activations(c, layout_key)
        sk: StateKey = (c.tp, c.ep, c.etp, dp, c.cp, edp, c.sharding, c.offload, layout_key)
        states = self._rank_states.get(sk)
        if states is None:
            states = self._rank_states[sk] = self._states(c, dp, edp)
        fk: FlightKey = (microbatches, layout_key)
        flights = self._rank_flights.get(fk)
        if flights is None:
            d = self._d(c)
            flights = self._rank_flights[fk] = [in_flight(d, r) for r in reps]
        bk: BufferKey = (c.tp, c.sp, c.cp, c.mbs, c.regather, c.recompute, c.act_offload, layout_key)
        buffers = self._rank_buffers.get(bk)
        if buffers is None:
            d = self._d(c)
            fl = flavour_of(d)
            buffers = self._rank_buffers[bk] = [persistent_buffers(d, fl, chunks_all[r]) for r in reps]
        hk: HeldKey = (ak, microbatches)
        held = self._rank_held.get(hk)
        if held is None:
            d = self._d(c)
            held = self._rank_held[hk] = []
            for i, r in enumerate(reps):
                deferred = deferred_wgrad_bytes(d, chunks_all[r])
                held.append(
                    Held(*held_and_transient(chunks_all[r], flights[i], activations[i], deferred), deferred)
                )
        worst_index, worst_peak = -1, -1
        for i in range(len(reps)):
            activ, transient, _ = peak_parts(
                states[i], held[i].activations, held[i].worst_transient, buffers[i]
            )
            peak = round(states[i].total + activ + transient)  # RankEstimate.peak_bytes
            if peak > worst_peak:
                worst_index, worst_peak = i, peak
                if stop_when_over and needed_bytes(peak, outside, margin) > self.capacity:
                    break
        i, r = worst_index, reps[worst_index]
        pieces = RankPieces(
            r, chunks_all[r], flights[i], states[i], activations[i], buffers[i], held[i].deferred
        )
        return FastResult(
            worst_peak,
            needed_bytes(worst_peak, outside, margin),
            verdict_of(worst_peak, outside, self.capacity, margin),
            pieces,
        )
