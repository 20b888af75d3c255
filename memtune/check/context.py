"""Everything a rule reads: the job as written, Megatron's derived values, versions and the
allocator environment as torch will see it."""

from __future__ import annotations

from dataclasses import dataclass

from memtune.config.allocator import AllocatorSettings
from memtune.config.derived import Derived, derive
from memtune.config.schema import JobConfig, ModelConfig
from memtune.config.versions import Version


@dataclass(frozen=True)
class MemoryFacts:
    """What the estimate says of a job that passed the gate, for the rules that judge memory
    (the estimate is computed after the gate, so it comes in from above: ``memtune/estimate``,
    ``Estimate.memory_facts``)."""

    verdict: str  # the whole-run verdict: fits, tight or does not fit
    peak_bytes: int  # the judged peak of the rank the verdict is about
    needed_bytes: int  # that peak with the verdict's margins and memory outside PyTorch
    capacity_bytes: int
    fragmentation_margin: float  # the share of the peak the allocator setting in effect costs
    needed_with_expandable_bytes: int | None  # the same need with expandable segments on; None when on

    @property
    def fragmentation_bytes(self) -> int:
        return round(self.peak_bytes * self.fragmentation_margin)


@dataclass(frozen=True)
class Context:
    job: JobConfig
    d: Derived
    mcore: Version
    torch: Version
    memory: MemoryFacts | None = None  # only where the caller estimated the job (memtune check)

    @classmethod
    def of(cls, job: JobConfig, memory: MemoryFacts | None = None) -> Context:
        d = derive(job)
        return cls(job=job, d=d, mcore=d.mcore_version, torch=d.torch_version, memory=memory)

    @property
    def model(self) -> ModelConfig:
        return self.job.model

    # --- allocator environment (read from Derived; see memtune/config/allocator.py) ----------
    @property
    def allocator(self) -> AllocatorSettings:
        return self.d.allocator

    @property
    def read_alloc_confs(self) -> dict[str, dict[str, str]]:
        """The allocator variable torch will actually read, by name (at most one)."""
        a = self.allocator
        return {a.source: a.options} if a.source else {}

    @property
    def alloc_options(self) -> dict[str, str]:
        return self.allocator.options

    @property
    def expandable_in_cuda_alloc_conf(self) -> bool:
        return self.allocator.expandable_in_cuda_alloc_conf

    @property
    def expandable_segments(self) -> bool:
        return self.allocator.expandable_segments

    # --- features ------------------------------------------------------------------------
    @property
    def cuda_graphs(self) -> bool:
        return self.d.cuda_graphs

    @property
    def distributed_optimizer(self) -> bool:
        return self.d.use_distributed_optimizer

    @property
    def megatron_fsdp(self) -> bool:
        return self.job.ddp.use_megatron_fsdp

    @property
    def blackwell_or_newer(self) -> bool:
        return self.d.blackwell_or_newer

    @property
    def all_layers_moe(self) -> bool:
        return self.d.is_moe and all(self.d.moe_layer_pattern)

    @property
    def any_dense_layer(self) -> bool:
        return not all(self.d.moe_layer_pattern)
