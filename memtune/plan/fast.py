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
from memtune.config.knobs import Knobs, KnobSubset
from memtune.config.schema import JobConfig
from memtune.estimate import activations as act
from memtune.estimate.core import (
    BUFFER_KNOBS,
    CHUNK_ACTIVATION_KNOBS,
    CHUNK_PARAMS_KNOBS,
    DEFERRED_WGRAD_KNOBS,
    LAYER_KNOBS,
    RANK_PARAMS_KNOBS,
    ChunkActivations,
    ChunkAssembly,
    ChunkParams,
    EstimateOptions,
    RankEstimate,
    assemble_chunk,
    chunk_activations,
    chunk_param_counts,
    combine,
    deferred_wgrad_bytes,
    held_and_transient,
    peak_parts,
    persistent_buffers,
    rank_params,
)
from memtune.estimate.flavour import flavour_of
from memtune.estimate.host import host_memory_of
from memtune.estimate.overhead import non_pytorch_bytes
from memtune.estimate.params import ParamCounts, ParamTensor
from memtune.estimate.peft import AdapterParams
from memtune.estimate.resume import resume_estimate
from memtune.estimate.save import SaveEstimate, save_estimate
from memtune.estimate.schedule import IN_FLIGHT_KNOBS, in_flight
from memtune.estimate.state import MODEL_STATE_KNOBS, ModelState, model_state
from memtune.estimate.verdict import HOST_VERDICT, MARGIN_KNOBS, Margin, margin_of, needed_bytes, verdict_of

# What a chunk's activations and model state depend on besides the knobs: its layers' kinds (MoE
# or dense), whether it holds the embedding, the output layer, and its MTP layers.
ChunkSignature = tuple[tuple[bool, ...], bool, bool, int]
StageSignature = tuple[ChunkSignature, ...]  # one per chunk of a pipeline rank

# The cache of each piece of a rank, keyed by the knobs that piece declares (estimate/core.py)
# and the knobs of the pipeline layout it is assembled over (``Derived.CHUNK_KNOBS``).
CHUNKS = Derived.CHUNK_KNOBS
RANK_ACTIVATIONS = CHUNK_ACTIVATION_KNOBS | CHUNKS
RANK_PARAMS = RANK_PARAMS_KNOBS | CHUNKS
RANK_STATES = MODEL_STATE_KNOBS | CHUNKS
RANK_FLIGHTS = IN_FLIGHT_KNOBS | CHUNKS
RANK_BUFFERS = BUFFER_KNOBS | CHUNKS
RANK_DEFERRED = DEFERRED_WGRAD_KNOBS | CHUNKS
RANK_HELD = RANK_ACTIVATIONS | RANK_FLIGHTS | RANK_DEFERRED
# Memory outside PyTorch (estimate/overhead.py): one communicator per process group, whose sizes
# TP, PP, CP, EP and ETP set.
OUTSIDE = KnobSubset("tp", "pp", "cp", "ep", "etp")
Key = tuple[Any, ...]

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
        self.base_derived = derive(base)
        self.capacity = capacity_bytes
        self.options = options or EstimateOptions()
        self._derived: dict[Knobs, Derived] = {}
        self._layouts: dict[Key, PipelineLayout] = {}
        self._acts: dict[tuple[Key, ChunkSignature, tuple[bool, bool] | None], ChunkActivations] = {}
        self._kinds: dict[Key, dict[bool, act.Saved]] = {}
        # The last chunks assembled: a candidate under Megatron-FSDP follows its siblings without.
        self._assemblies: dict[tuple[Key, ChunkSignature], ChunkAssembly] = {}
        self._chunk_params: dict[tuple[Key, ChunkSignature], ChunkParams] = {}
        self._params: dict[tuple[Key, int], RankParams] = {}
        # Per representative rank: a list under each piece's key, or, for the pieces built only
        # when ``evaluate`` reaches the rank, one entry under (key, index of the representative).
        self._rank_acts: dict[tuple[Key, int], list[ChunkActivations]] = {}
        self._rank_states: dict[Key, list[ModelState]] = {}
        self._rank_flights: dict[Key, list[dict[int, int]]] = {}
        self._rank_buffers: dict[tuple[Key, int], float] = {}
        self._rank_deferred: dict[Key, list[float]] = {}
        self._rank_held: dict[tuple[Key, int], Held] = {}
        self._outside: dict[Key, int] = {}
        self._margins: dict[Key, Margin] = {}

    def derived(self, k: Knobs) -> Derived:
        """``Derived.with_knobs`` of the base job, kept for the candidates evaluated last."""
        d = self._derived.get(k)
        if d is None:
            if len(self._derived) > 4096:
                self._derived.clear()
            d = self._derived[k] = self.base_derived.with_knobs(k)
        return d

    def layout(self, k: Knobs) -> PipelineLayout:
        """Chunks of every rank, and the first rank of each group of identical stages."""
        key = CHUNKS.key(k)
        hit = self._layouts.get(key)
        if hit is None:
            d = self.derived(k)
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

    def _activations(self, k: Knobs, i: int) -> list[ChunkActivations]:
        """The chunks' activations (one microbatch each) of representative rank ``i``."""
        act_key = CHUNK_ACTIVATION_KNOBS.key(k)
        layer_key = LAYER_KNOBS.key(k)
        chunks_all, signatures, reps = self.layout(k)
        r = reps[i]
        fsdp = None
        if k.fsdp_gradient_sharding is not None:
            fsdp = self.derived(k).fsdp_sharded_groups
        per_chunk: list[ChunkActivations] = []
        for chunk, sig in zip(chunks_all[r], signatures[r]):
            key = (act_key, sig, fsdp)
            acts = self._acts.get(key)
            if acts is None:
                d = self.derived(k)
                params = None
                if k.fsdp_gradient_sharding is not None:
                    pk = (CHUNK_PARAMS_KNOBS.key(k), sig)
                    params = self._chunk_params.get(pk)
                    if params is None:
                        params = self._chunk_params[pk] = chunk_param_counts(d, chunk)
                assembly = self._assemblies.get((layer_key, sig))
                if assembly is None:
                    if len(self._assemblies) > 512:
                        self._assemblies.clear()
                    assembly = assemble_chunk(d, chunk, self.options, self._kinds.setdefault(layer_key, {}))
                    self._assemblies[(layer_key, sig)] = assembly
                acts = self._acts[key] = chunk_activations(d, chunk, self.options, None, params, assembly)
            per_chunk.append(acts)
        return per_chunk

    def _states(self, k: Knobs) -> list[ModelState]:
        chunks_all, _, reps = self.layout(k)
        d = self.derived(k)
        params_key = RANK_PARAMS.key(k)
        out: list[ModelState] = []
        for r in reps:
            params = self._params.get((params_key, r))
            if params is None:
                params = self._params[(params_key, r)] = rank_params(d, chunks_all[r])
            out.append(model_state(d, *params))
        return out

    def _outside_and_margin(self, k: Knobs) -> tuple[int, Margin]:
        ok = OUTSIDE.key(k)
        outside = self._outside.get(ok)
        if outside is None:
            outside = self._outside[ok] = non_pytorch_bytes(self.derived(k))
        mk = MARGIN_KNOBS.key(k)
        margin = self._margins.get(mk)
        if margin is None:
            margin = self._margins[mk] = margin_of(self.derived(k))
        return outside, margin

    def _rank_states_of(self, k: Knobs) -> list[ModelState]:
        sk = RANK_STATES.key(k)
        states = self._rank_states.get(sk)
        if states is None:
            states = self._rank_states[sk] = self._states(k)
        return states

    def state_exceeds(self, k: Knobs) -> bool:
        """Whether the model state alone of some rank, with the margin and memory outside
        PyTorch, is beyond the GPU: a rank's peak is its state plus activations, transients and
        buffers, none negative (``core.peak_parts``), so ``evaluate`` would not find it fits.
        The state is a small cached piece; the activations it spares are not."""
        outside, margin = self._outside_and_margin(k)
        return any(
            needed_bytes(round(s.total), outside, margin) > self.capacity for s in self._rank_states_of(k)
        )

    def _rank_flights_of(self, k: Knobs) -> list[dict[int, int]]:
        """The microbatches in flight per model chunk of each representative rank."""
        fk = RANK_FLIGHTS.key(k)
        flights = self._rank_flights.get(fk)
        if flights is None:
            d = self.derived(k)
            flights = self._rank_flights[fk] = [in_flight(d, r) for r in self.layout(k).representatives]
        return flights

    def _rank_deferred_of(self, k: Knobs) -> list[float]:
        """The deferred weight-gradient buffers of each representative rank."""
        dk = RANK_DEFERRED.key(k)
        deferred = self._rank_deferred.get(dk)
        if deferred is None:
            d = self.derived(k)
            chunks_all, _, reps = self.layout(k)
            deferred = self._rank_deferred[dk] = [deferred_wgrad_bytes(d, chunks_all[r]) for r in reps]
        return deferred

    def _rank_activations_at(self, k: Knobs, ak: Key, i: int) -> list[ChunkActivations]:
        """Representative rank ``i``'s chunk activations, cached under ``ak`` (RANK_ACTIVATIONS')."""
        activations = self._rank_acts.get((ak, i))
        if activations is None:
            activations = self._rank_acts[(ak, i)] = self._activations(k, i)
        return activations

    def _rank_buffers_at(self, k: Knobs, bk: Key, i: int) -> float:
        """Representative rank ``i``'s run-long buffers, cached under ``bk`` (RANK_BUFFERS')."""
        buffers = self._rank_buffers.get((bk, i))
        if buffers is None:
            d = self.derived(k)
            chunks_all, _, reps = self.layout(k)
            buffers = self._rank_buffers[(bk, i)] = persistent_buffers(d, flavour_of(d), chunks_all[reps[i]])
        return buffers

    def evaluate(self, k: Knobs, stop_when_over: bool = False) -> FastResult:
        """The most-loaded rank of ``k`` and its verdict, as ``estimate`` gives them.

        With ``stop_when_over`` the walk over ranks stops at the first rank that does not fit
        with the margin; the result then names that rank (the layout does not fit either way).
        """
        chunks_all, _, reps = self.layout(k)
        outside, margin = self._outside_and_margin(k)
        states = self._rank_states_of(k)
        flights = self._rank_flights_of(k)
        ak, bk, hk = RANK_ACTIVATIONS.key(k), RANK_BUFFERS.key(k), RANK_HELD.key(k)

        # A rank's activations, buffers and held bytes are built when the walk below reaches
        # it: most layouts that do not fit stop at the first rank.
        def held_of(i: int) -> Held:
            held = self._rank_held.get((hk, i))
            if held is None:
                deferred = self._rank_deferred_of(k)[i]
                chunks, acts = chunks_all[reps[i]], self._rank_activations_at(k, ak, i)
                held = self._rank_held[(hk, i)] = Held(
                    *held_and_transient(chunks, flights[i], acts, deferred), deferred
                )
            return held

        def pieces_of(i: int) -> RankPieces:
            r = reps[i]
            acts, buffers = self._rank_activations_at(k, ak, i), self._rank_buffers_at(k, bk, i)
            return RankPieces(r, chunks_all[r], flights[i], states[i], acts, buffers, held_of(i).deferred)

        # As ``Estimate``: the worst rank by its training peak; the verdict judges each rank's
        # largest phase (``Estimate.verdict_peak_bytes``: training, resume, save) and every
        # node's host memory (``Estimate.host_fits``).
        d = self.base_derived
        saves = d.saves
        params_key = RANK_PARAMS.key(k)
        worst_index, worst_peak, worst_judged, judged_max = -1, -1, -1, -1
        host_fits = True
        for i in range(len(reps)):
            held = held_of(i)
            buffers = self._rank_buffers_at(k, bk, i)
            activ, transient, _ = peak_parts(states[i], held.activations, held.worst_transient, buffers)
            peak = judged = round(states[i].total + activ + transient)  # RankEstimate.peak_bytes
            save = None
            if d.resumes or saves:
                rank = combine(*pieces_of(i), by_module=False)
                resume = resume_estimate(self.derived(k), rank) if d.resumes else None
                save = save_estimate(self.derived(k), rank, self._params[(params_key, reps[i])][3])
                judged = max(peak, resume.peak_bytes if resume else 0, save.peak_bytes if save else 0)
            judged_max = max(judged_max, judged)
            over = stop_when_over and needed_bytes(judged, outside, margin) > self.capacity
            if peak > worst_peak or over:
                worst_index, worst_peak, worst_judged = i, peak, judged
            if over:
                break
            host_fits = host_fits and self._host_fits(
                k, i, states[i], self._rank_activations_at(k, ak, i), flights[i], save
            )
        verdict = verdict_of(judged_max, outside, self.capacity, margin) if host_fits else HOST_VERDICT
        return FastResult(
            worst_peak, needed_bytes(worst_judged, outside, margin), verdict, pieces_of(worst_index)
        )

    def _host_fits(
        self,
        k: Knobs,
        i: int,
        state: ModelState,
        activations: list[ChunkActivations],
        flight: dict[int, int],
        save: SaveEstimate | None,
    ) -> bool:
        """Whether the nodes holding representative rank ``i`` fit in their RAM
        (``Estimate.host``; the pinned activations summed as ``core.combine`` sums them)."""
        chunks = self.layout(k).chunks[self.layout(k).representatives[i]]
        pinned = sum(flight.get(c.vp_stage, 0) * a.host_pinned for c, a in zip(chunks, activations))
        return host_memory_of(self.derived(k), state.host, pinned, save).fits
