"""Per-rank peak memory of a Megatron-Core training job: ``estimate(checked) -> Estimate``.

The estimate is a pure function of the configuration: parameters (``params``), model state
(``state``), saved activations per module (``activations``), the pipeline schedule
(``schedule``), transients and memory outside PyTorch (``overhead``) combine per pipeline rank
in ``core``. It takes a :class:`~memtune.check.CheckedJob`, so an invalid configuration is
refused with ``memtune check``'s messages before it can be estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.catalog.gpus import GPU, capacity_bytes, get_gpu
from memtune.check import CheckedJob
from memtune.config.derived import Derived
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate.core import EstimateOptions, RankEstimate, rank_estimate
from memtune.estimate.flavour import Flavour, flavour_of
from memtune.estimate.overhead import OutsidePyTorch, outside_pytorch
from memtune.estimate.resume import ResumeEstimate, resume_estimate
from memtune.estimate.verdict import Margin, margin_of, needed_bytes, verdict_of

__all__ = ["Estimate", "EstimateOptions", "RankEstimate", "ResumeEstimate", "estimate"]

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

    @property
    def non_pytorch_bytes(self) -> int:
        return self.outside.total_bytes

    @property
    def worst(self) -> RankEstimate:
        return max(self.ranks, key=lambda r: r.peak_bytes)

    @property
    def host_bytes_per_node(self) -> int:
        """Host memory the ranks of one node take beside the device: ``gpus_per_node`` ranks of
        the worst pipeline rank (ranks of a stage are consecutive, so a node holds one stage's)."""
        per_node = min(self.job.cluster.gpus_per_node, self.derived.world_size)
        return max(r.host_bytes for r in self.ranks) * per_node

    @property
    def verdict_margin(self) -> Margin:
        """The margin the verdict adds to the peak: fragmentation and the job's feature families'
        worst observed under-estimate (``memtune/estimate/verdict.py``)."""
        return margin_of(self.derived)

    def resume(self, rank: RankEstimate) -> ResumeEstimate | None:
        """The rank's resume phase (checkpoint load and first iteration); None without a resume."""
        return resume_estimate(self.derived, rank)

    def verdict_peak_bytes(self, rank: RankEstimate) -> int:
        """The peak the verdict judges: the larger of training and, when the job resumes, the resume phase."""
        resume = self.resume(rank)
        return max(rank.peak_bytes, resume.peak_bytes) if resume else rank.peak_bytes

    def needed_bytes(self, rank: RankEstimate) -> int:
        """Device memory the rank needs: the peak the verdict judges (:meth:`verdict_peak_bytes`),
        the verdict's margin and memory outside PyTorch."""
        return needed_bytes(self.verdict_peak_bytes(rank), self.non_pytorch_bytes, self.verdict_margin)

    def fits(self, rank: RankEstimate) -> bool:
        """Whether the rank fits with the verdict's margin (its verdict is ``fits``)."""
        return self.needed_bytes(rank) <= self.capacity_bytes

    def verdict(self, rank: RankEstimate | None = None) -> str:
        """``fits``, ``tight`` (fits only if fragmentation and the estimate's error stay under
        the margin) or ``does not fit``; of the rank whose judged peak is highest by default."""
        rank = rank or max(self.ranks, key=self.verdict_peak_bytes)
        return self.verdict_of_peak(self.verdict_peak_bytes(rank))

    def verdict_of_peak(self, peak_bytes: int) -> str:
        """:meth:`verdict` for a peak of this job that was measured rather than estimated."""
        return verdict_of(peak_bytes, self.non_pytorch_bytes, self.capacity_bytes, self.verdict_margin)

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


import sys as _sys  # noqa: E402

from memtune.entry import EntryModule as _EntryModule  # noqa: E402

_sys.modules[__name__].__class__ = _EntryModule  # memtune.estimate(config): memtune/api.py
