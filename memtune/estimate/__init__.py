"""Per-rank peak memory of a Megatron-Core training job: ``estimate(checked) -> Estimate``.

The estimate is a pure function of the configuration: parameters (``params``), model state
(``state``), saved activations per module (``activations``), the pipeline schedule
(``schedule``), transients and memory outside PyTorch (``overhead``) combine per pipeline rank
in ``core``. It takes a :class:`~memtune.check.CheckedJob`, so an invalid configuration is
refused with ``memtune check``'s messages before it can be estimated.

The verdict judges the whole run: each rank's largest device peak over its phases (training,
the checkpoint load and the first iteration after it, ``resume``; the checkpoint save,
``save``) and a node's host memory (``host``). :meth:`Estimate.verdict`, :meth:`Estimate.fits`
and :meth:`Estimate.needed_bytes` are that one judgement, and :meth:`Estimate.judged_phase`
names what sets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtune.catalog.gpus import GPU, capacity_bytes, get_gpu
from memtune.check import ERROR, CheckedJob, Finding, gate, run_checks
from memtune.check.context import MemoryFacts
from memtune.config.changes import expandable_segments_changes, with_changes
from memtune.config.derived import Derived, derive
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate.core import EstimateOptions, RankEstimate, rank_estimate
from memtune.estimate.flavour import Flavour, flavour_of
from memtune.estimate.host import HostMemory, host_memory
from memtune.estimate.overhead import OutsidePyTorch, outside_pytorch
from memtune.estimate.params import chunk_param_tensors
from memtune.estimate.resume import ResumeEstimate, resume_estimate
from memtune.estimate.save import SaveEstimate, save_estimate
from memtune.estimate.verdict import HOST_VERDICT, PHASES, Margin, margin_of, needed_bytes, verdict_of

__all__ = [
    "HOST_VERDICT",
    "PHASES",
    "Estimate",
    "EstimateOptions",
    "HostMemory",
    "RankEstimate",
    "ResumeEstimate",
    "SaveEstimate",
    "check_with_estimate",
    "estimate",
]

# Megatron-LM also offers muon (plain and distributed), adaptive_muon, lion and soap, whose state
# and step temporaries (Muon's Newton-Schulz iterations on whole matrices) are not modeled.
MODELED_OPTIMIZERS = ("adam", "sgd")


@dataclass
class Estimate:
    job: JobConfig
    derived: Derived
    gpu: GPU
    capacity_bytes: int
    ranks: list[RankEstimate]
    outside: OutsidePyTorch  # the same on every rank
    margin: float  # fragmentation margin, a share of the allocator peak
    expandable_segments: bool  # the allocator setting the margin follows
    flavour: Flavour  # the implementation path the layers were modeled on
    options: EstimateOptions
    uncertainty: dict[str, float]  # Derived.fit_uncertainty: TE paths not pinned down, share of the peak
    # Each rank's save phase once computed (the verdict, the render and the host figure read it).
    _saves: dict[int, tuple[RankEstimate, SaveEstimate | None]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def non_pytorch_bytes(self) -> int:
        return self.outside.total_bytes

    @property
    def worst(self) -> RankEstimate:
        return max(self.ranks, key=lambda r: r.peak_bytes)

    @property
    def host_bytes_per_node(self) -> int:
        """Host memory a node's ranks take (:meth:`host`): ``gpus_per_node`` ranks of the rank
        whose host memory is largest (ranks of a stage are consecutive, so a node holds one
        stage's)."""
        return max(self.host(rank).per_node_bytes for rank in self.ranks)

    @property
    def host_fits(self) -> bool:
        """Whether every node's ranks fit in its RAM (``cluster.host_memory_gib``)."""
        return all(self.host(rank).fits for rank in self.ranks)

    @property
    def verdict_margin(self) -> Margin:
        """The margin the verdict adds to the peak: fragmentation and the job's feature families'
        worst observed under-estimate (``memtune/estimate/verdict.py``)."""
        return margin_of(self.derived)

    def resume(self, rank: RankEstimate) -> ResumeEstimate | None:
        """The rank's resume phase (checkpoint load and first iteration); None without a resume."""
        return resume_estimate(self.derived, rank)

    def save(self, rank: RankEstimate) -> SaveEstimate | None:
        """The rank's save phase (``save_checkpoint``); None when the job does not save."""
        if not self.derived.saves:
            return None
        cached = self._saves.get(id(rank))
        if cached is None or cached[0] is not rank:
            tensors = [chunk_param_tensors(self.derived, c) for c in self.derived.chunks[rank.pp_rank]]
            cached = self._saves[id(rank)] = (rank, save_estimate(self.derived, rank, tensors))
        return cached[1]

    def host(self, rank: RankEstimate) -> HostMemory:
        """Host memory of the rank's processes, by part, and of its node."""
        return host_memory(self.derived, rank, self.save(rank))

    def phase_peaks(self, rank: RankEstimate) -> dict[str, int]:
        """The rank's device peak in each phase of the run it goes through, by the names of
        :data:`~memtune.estimate.verdict.PHASES`."""
        peaks = {"training": rank.peak_bytes}
        resume = self.resume(rank)
        if resume is not None:
            peaks["checkpoint load"] = resume.load_bytes
            peaks["first iteration"] = resume.first_step_bytes
        save = self.save(rank)
        if save is not None:
            peaks["checkpoint save"] = save.peak_bytes
        return peaks

    def verdict_peak_bytes(self, rank: RankEstimate) -> int:
        """The peak the verdict judges: the largest of the rank's phases (:meth:`phase_peaks`)."""
        return max(self.phase_peaks(rank).values())

    def judged_phase(self, rank: RankEstimate | None = None) -> str:
        """What sets the verdict of ``rank`` (by default the job's, as :meth:`verdict`):
        ``host memory`` when a node's RAM is exceeded, else the phase whose device peak is
        judged, one of ``training``, ``checkpoint load``, ``first iteration``, ``checkpoint
        save`` (training wins a tie)."""
        if not (self.host(rank).fits if rank else self.host_fits):
            return "host memory"
        rank = rank or self.verdict_rank
        peaks = self.phase_peaks(rank)
        return max(peaks, key=lambda phase: (peaks[phase], phase == "training"))

    @property
    def verdict_rank(self) -> RankEstimate:
        """The rank the job's verdict is of: the one whose judged peak is highest."""
        return max(self.ranks, key=self.verdict_peak_bytes)

    def needed_bytes(self, rank: RankEstimate) -> int:
        """Device memory the rank needs: the peak the verdict judges (:meth:`verdict_peak_bytes`),
        the verdict's margin and memory outside PyTorch."""
        return needed_bytes(self.verdict_peak_bytes(rank), self.non_pytorch_bytes, self.verdict_margin)

    def fits(self, rank: RankEstimate) -> bool:
        """Whether the rank fits with the verdict's margin (its verdict is ``fits``): on the device
        in every phase, and its node in host memory."""
        return self.needed_bytes(rank) <= self.capacity_bytes and self.host(rank).fits

    def verdict(self, rank: RankEstimate | None = None) -> str:
        """``fits``, ``tight`` (fits only if fragmentation and the estimate's error stay under
        the margin), ``does not fit`` (the device, in the phase :meth:`judged_phase` names) or
        ``does not fit (host)`` (a node's RAM). Of ``rank``, or by default of the job: host
        memory on every node, and the rank whose judged peak is highest."""
        if not (self.host(rank).fits if rank else self.host_fits):
            return HOST_VERDICT
        return self.verdict_of_peak(self.verdict_peak_bytes(rank or self.verdict_rank))

    def verdict_of_peak(self, peak_bytes: int) -> str:
        """:meth:`verdict` for a peak of this job that was measured rather than estimated."""
        return verdict_of(peak_bytes, self.non_pytorch_bytes, self.capacity_bytes, self.verdict_margin)

    def memory_facts(self) -> MemoryFacts:
        """What the rules that judge memory read (``memtune.check``): the verdict of the rank
        whose judged peak is highest, and what it would need with expandable segments on."""
        rank = max(self.ranks, key=self.verdict_peak_bytes)
        peak = self.verdict_peak_bytes(rank)
        changes = expandable_segments_changes(self.derived)
        with_expandable = None
        if changes:
            margin = margin_of(derive(with_changes(self.job, changes)))
            with_expandable = needed_bytes(peak, self.non_pytorch_bytes, margin)
        return MemoryFacts(
            verdict=self.verdict(rank),
            peak_bytes=peak,
            needed_bytes=self.needed_bytes(rank),
            capacity_bytes=self.capacity_bytes,
            fragmentation_margin=self.margin,
            needed_with_expandable_bytes=with_expandable,
        )

    def pp_rank_of(self, global_rank: int) -> int:
        """Pipeline rank of a global rank in Megatron-Core's default order tp-cp-ep-dp-pp."""
        d = self.derived
        if not 0 <= global_rank < d.world_size:
            raise InputError(
                f"--rank: must be between 0 and {d.world_size - 1} (world size {d.world_size}), got {global_rank}"
            )
        return d.pp_rank_of(global_rank)

    def rank(self, global_rank: int) -> RankEstimate:
        """The estimate of one global rank: its pipeline rank's, or where the optimizer CPU
        offload splits each data-parallel rank's shard differently, that rank's own."""
        pp_rank = self.pp_rank_of(global_rank)
        d = self.derived
        if d.job.optimizer.optimizer_cpu_offload and 0.0 < d.job.optimizer.optimizer_offload_fraction < 1.0:
            dp_ranks = (d.dp_cp_rank_of(global_rank), d.expert_dp_rank_of(global_rank))
            return rank_estimate(d, pp_rank, self.options, dp_ranks)
        return self.ranks[pp_rank]


def estimate(checked: CheckedJob, options: EstimateOptions | None = None) -> Estimate:
    """Estimate every pipeline rank of a job that passed :func:`memtune.check.gate`."""
    options = options or EstimateOptions()
    d = checked.derived
    job = checked.job
    if job.optimizer.optimizer not in MODELED_OPTIMIZERS:
        raise InputError(
            f"optimizer.optimizer {job.optimizer.optimizer!r}: memtune models the state of "
            f"{' and '.join(MODELED_OPTIMIZERS)} only; {job.optimizer.optimizer} is not modeled"
        )
    gpu, capacity = get_gpu(job.cluster.gpu), capacity_bytes(job.cluster.gpu, job.cluster.gpu_memory_gib)
    ranks = [rank_estimate(d, r, options) for r in range(d.pp)]
    return Estimate(
        job=job,
        derived=d,
        gpu=gpu,
        capacity_bytes=capacity,
        ranks=ranks,
        outside=outside_pytorch(d),
        margin=d.fragmentation_margin,
        expandable_segments=d.allocator.expandable_segments,
        flavour=flavour_of(d),
        options=options,
        uncertainty=d.fit_uncertainty,
    )


def check_with_estimate(
    job: JobConfig, select: list[str] | None = None, ignore: list[str] | tuple[str, ...] = ()
) -> list[Finding]:
    """Every finding ``memtune check`` reports: the rules on the job as written, and, for a job
    Megatron would start, the rules that judge its estimated memory as well."""
    findings = run_checks(job, select, ignore)
    if any(f.severity == ERROR for f in findings):
        return findings
    try:
        facts = estimate(gate(job)).memory_facts()
    except InputError:
        return findings  # what the estimator cannot model (an optimizer), estimate itself says
    return run_checks(job, select, ignore, memory=facts)


import sys as _sys  # noqa: E402

from memtune.entry import EntryModule as _EntryModule  # noqa: E402

_sys.modules[__name__].__class__ = _EntryModule  # memtune.estimate(config): memtune/api.py
