"""Everything a rule reads: the job as written, Megatron's derived values, versions and the
allocator environment as torch will see it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from memtune.check.versions import Version, parse_version
from memtune.config.derived import Derived, derive
from memtune.config.schema import JobConfig, ModelConfig

# torch reads the new name PYTORCH_ALLOC_CONF for the CUDA allocator reliably from 2.11 on
# (2.9.1 ignores it, pytorch#183387; older releases predate the name).
TORCH_READS_PYTORCH_ALLOC_CONF = (2, 11, 0)


@dataclass(frozen=True)
class Context:
    job: JobConfig
    d: Derived
    mcore: Version
    torch: Version

    @classmethod
    def of(cls, job: JobConfig) -> Context:
        return cls(
            job=job,
            d=derive(job),
            mcore=parse_version(job.env.megatron_core_version, "env.megatron_core_version"),
            torch=parse_version(job.env.torch_version, "env.torch_version"),
        )

    @property
    def model(self) -> ModelConfig:
        return self.job.model

    # --- allocator environment -----------------------------------------------------------
    @cached_property
    def cuda_alloc_conf(self) -> dict[str, str]:
        """``PYTORCH_CUDA_ALLOC_CONF``, the name Megatron's own guards read."""
        return parse_alloc_conf(self.job.env.PYTORCH_CUDA_ALLOC_CONF)

    @cached_property
    def new_alloc_conf(self) -> dict[str, str]:
        """``PYTORCH_ALLOC_CONF``, the newer name, invisible to Megatron's guards."""
        return parse_alloc_conf(self.job.env.PYTORCH_ALLOC_CONF)

    @cached_property
    def torch_reads_new_alloc_conf(self) -> bool:
        return self.torch >= TORCH_READS_PYTORCH_ALLOC_CONF

    @cached_property
    def read_alloc_confs(self) -> dict[str, dict[str, str]]:
        """The allocator variables torch will actually read, by name."""
        confs = {}
        if self.job.env.PYTORCH_CUDA_ALLOC_CONF:
            confs["PYTORCH_CUDA_ALLOC_CONF"] = self.cuda_alloc_conf
        if self.job.env.PYTORCH_ALLOC_CONF and self.torch_reads_new_alloc_conf:
            confs["PYTORCH_ALLOC_CONF"] = self.new_alloc_conf
        return confs

    @cached_property
    def alloc_options(self) -> dict[str, str]:
        """The allocator options in effect (the newer name taken last, as the primary one)."""
        merged: dict[str, str] = {}
        for conf in self.read_alloc_confs.values():
            merged.update(conf)
        return merged

    @cached_property
    def expandable_in_cuda_alloc_conf(self) -> bool:
        return self.cuda_alloc_conf.get("expandable_segments") == "True"

    @cached_property
    def expandable_segments(self) -> bool:
        """Whether torch's CUDA allocator will actually run with expandable segments."""
        return self.alloc_options.get("expandable_segments") == "True"

    # --- features ------------------------------------------------------------------------
    @property
    def cuda_graphs(self) -> bool:
        return self.model.cuda_graph_impl != "none"

    @property
    def distributed_optimizer(self) -> bool:
        """Megatron-Bridge turns both flags on when either is on."""
        return self.job.ddp.use_distributed_optimizer or self.job.optimizer.use_distributed_optimizer

    @property
    def megatron_fsdp(self) -> bool:
        return self.job.ddp.use_megatron_fsdp

    @property
    def blackwell_or_newer(self) -> bool:
        """B100/B200/B300 and GB200/GB300 (compute capability 10 and up)."""
        return self.job.cluster.gpu.upper().startswith(("B", "GB"))

    @property
    def all_layers_moe(self) -> bool:
        return self.d.is_moe and all(self.d.moe_layer_pattern)

    @property
    def any_dense_layer(self) -> bool:
        return not all(self.d.moe_layer_pattern)


def parse_alloc_conf(text: str | None) -> dict[str, str]:
    """``"expandable_segments:True,roundup_power2_divisions:[256:1,>:8]"`` -> key -> value.

    Commas inside brackets belong to the value, as in torch's own parser.
    """
    if not text:
        return {}
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    conf = {}
    for item in items:
        key, _, value = item.strip().partition(":")
        if key:
            conf[key.strip()] = value.strip()
    return conf
