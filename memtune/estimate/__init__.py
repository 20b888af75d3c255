"""Per-rank peak memory of a Megatron-Core training job: ``estimate(job) -> Estimate``.

The estimate is a pure function of the configuration: parameters (``params``), model state
(``state``), saved activations per module (``activations``), the pipeline schedule
(``schedule``), transients and memory outside PyTorch (``overhead``) combine per pipeline rank
in ``core``. Checks run first: an invalid configuration is refused with ``memtune check``'s
messages, never estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.catalog.gpus import GPU, capacity_bytes, get_gpu
from memtune.config.derived import Derived, derive
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate.core import EstimateOptions, RankEstimate, rank_estimate
from memtune.estimate.overhead import non_pytorch_bytes

GiB = 2**30

__all__ = ["Estimate", "EstimateOptions", "RankEstimate", "estimate"]


def fragmentation_margin(job: JobConfig) -> float:
    """Share of the peak kept free for the caching allocator's fragmentation.

    Without expandable segments, blocks cached for one size cannot serve another and reserved
    memory runs several percent above the allocated peak; with them, little is lost.
    """
    conf = (job.env.PYTORCH_CUDA_ALLOC_CONF or "") + "," + (job.env.PYTORCH_ALLOC_CONF or "")
    return 0.02 if "expandable_segments:true" in conf.replace(" ", "").lower() else 0.08


@dataclass
class Estimate:
    job: JobConfig
    derived: Derived
    gpu: GPU
    capacity_bytes: int
    ranks: list[RankEstimate]
    non_pytorch_bytes: int
    margin: float
    options: EstimateOptions

    @property
    def worst(self) -> RankEstimate:
        return max(self.ranks, key=lambda r: r.peak_bytes)

    def needed_bytes(self, rank: RankEstimate) -> int:
        """Device memory the rank needs: its allocator peak, the margin and memory outside PyTorch."""
        return round(rank.peak_bytes * (1 + self.margin) + self.non_pytorch_bytes)

    def fits(self, rank: RankEstimate) -> bool:
        return rank.peak_bytes + self.non_pytorch_bytes <= self.capacity_bytes

    def verdict(self, rank: RankEstimate | None = None) -> str:
        """``fits``, ``tight`` (fits only if fragmentation stays under the margin) or ``does not fit``."""
        rank = rank or self.worst
        if self.needed_bytes(rank) <= self.capacity_bytes:
            return "fits"
        return "tight" if self.fits(rank) else "does not fit"

    def pp_rank_of(self, global_rank: int) -> int:
        """Pipeline rank of a global rank in Megatron-Core's default order tp-cp-ep-dp-pp."""
        d = self.derived
        if not 0 <= global_rank < d.world_size:
            raise InputError(
                f"--rank: must be between 0 and {d.world_size - 1} (world size {d.world_size}), got {global_rank}"
            )
        return global_rank // (d.world_size // d.pp)

    def rank(self, global_rank: int) -> RankEstimate:
        return self.ranks[self.pp_rank_of(global_rank)]


def estimate(job: JobConfig, options: EstimateOptions | None = None, *, checked: bool = False) -> Estimate:
    """Estimate every pipeline rank of ``job``; refuse it first if ``memtune check`` finds errors."""
    if not checked:
        from memtune.check import require_valid

        require_valid(job)
    options = options or EstimateOptions()
    d = derive(job)
    gpu, capacity = get_gpu(job.cluster.gpu), capacity_bytes(job.cluster)
    ranks = [rank_estimate(d, r, options) for r in range(d.pp)]
    return Estimate(
        job=job,
        derived=d,
        gpu=gpu,
        capacity_bytes=capacity,
        ranks=ranks,
        non_pytorch_bytes=non_pytorch_bytes(d),
        margin=fragmentation_margin(job),
        options=options,
    )
