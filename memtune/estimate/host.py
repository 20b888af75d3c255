"""Host memory (RAM) of one node: every path of a training process that takes host memory, per
rank, against the node's RAM (``Derived.host_memory_bytes_per_node``; docs/save.md, "Host memory").

A rank's processes hold on the host:

- ``process``: the training process itself: torch, Megatron-Core, the CUDA context's host side
  and NCCL's, measured as the peak resident set of ``memtune measure`` processes (117 training
  runs of benchmarks/measured/h200-mcore0.19.2.jsonl without any offload: 1.33 to 1.64 GiB,
  ``host_rss_before_build_bytes`` + ``host_rss_growth_bytes``; the largest is taken).
- ``dataloader workers``: Megatron-LM and Megatron-Bridge build a train and a validation data
  loader, each with 2 persistent worker processes (``--num-workers`` 2,
  megatron/training/datasets/data_samplers.py; Bridge's ``DataloaderConfig.num_workers`` 2,
  src/megatron/bridge/data/base.py); each is a fork of the training process and owns the pages it
  writes: measured as a worker's unique set size (``DATALOADER_WORKER``).
- ``optimizer offload``: the host optimizer's state (``state.py``, ``optimizer_cpu_offload``).
- ``activation offload``: pinned copies of offloaded activations, layer-wise or fine-grained.
- ``checkpoint staging``: the pinned copies of what a save writes, kept by PyTorch's caching host
  allocator after the first save (``save.py``).
- ``checkpoint save``: what the save holds on the host only while it runs (gathered optimizer
  state, clones, serialization copies).
- ``checkpoint worker``: the persistent worker process of async saves, another Python process
  with torch imported (counted as ``process``).

A node holds ``gpus_per_node`` ranks; the most-loaded pipeline rank's figure is taken for each
(ranks of one stage are consecutive, so a node holds ranks of one stage).
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.config.derived import Derived
from memtune.estimate.core import RankEstimate
from memtune.estimate.save import SaveEstimate
from memtune.units import GiB

PROCESS = round(1.64 * GiB)
# A data loader worker's unique set size (the pages only it holds), the larger of the two
# workers measured by benchmarks/gpu/host_baseline.py on the H100 machine (torch 2.11):
# benchmarks/measured/resume/host-baseline-h100.json (7.5 and 7.7 MiB; the rest of a worker's
# resident set is shared with the training process, which counts it already).
DATALOADER_WORKER = 8_085_504
DATALOADER_WORKERS = 4  # train and validation loaders, 2 persistent workers each


@dataclass(frozen=True)
class HostMemory:
    """One rank's host memory by part, and the node's against its RAM."""

    parts: dict[str, float]
    ranks_per_node: int
    capacity_bytes: int | None  # the node's RAM; None where no reference system gives it

    @property
    def rank_bytes(self) -> int:
        return round(sum(self.parts.values()))

    @property
    def per_node_bytes(self) -> int:
        return self.rank_bytes * self.ranks_per_node

    @property
    def fits(self) -> bool:
        """Whether a node's ranks fit in its RAM (unknown RAM: assumed to)."""
        return self.capacity_bytes is None or self.per_node_bytes <= self.capacity_bytes


def host_memory(d: Derived, rank: RankEstimate, save: SaveEstimate | None) -> HostMemory:
    """The host memory of ``rank``'s processes (with ``save``, its save phase) and of a node."""
    return host_memory_of(d, rank.state.host, rank.activation_host_pinned, save)


def host_memory_of(
    d: Derived, optimizer_host: float, activation_host: float, save: SaveEstimate | None
) -> HostMemory:
    """:func:`host_memory` from its pieces (``memtune.plan``'s fast path has them apart): the
    host optimizer's state, the pinned activations of one rank's microbatches in flight."""
    parts = {
        "process": float(PROCESS),
        "dataloader workers": float(DATALOADER_WORKERS * DATALOADER_WORKER),
        "optimizer offload": optimizer_host,
        "activation offload": activation_host,
    }
    if save is not None:
        parts["checkpoint staging"] = float(save.host_staged_bytes)
        parts["checkpoint save"] = float(save.host_transient_bytes)
        if d.async_save:
            parts["checkpoint worker"] = float(PROCESS)
    return HostMemory(
        parts={name: nbytes for name, nbytes in parts.items() if nbytes},
        ranks_per_node=min(d.job.cluster.gpus_per_node, d.world_size),
        capacity_bytes=d.host_memory_bytes_per_node,
    )
