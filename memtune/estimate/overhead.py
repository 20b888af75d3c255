"""Device memory a training process uses outside PyTorch's caching allocator.

Figures measured on an H200 (CUDA 13.0, driver 580, torch 2.11; docs/allocator.md, O1 to O4):
the CUDA context takes about 518 MiB plus about 100 MiB of lazily loaded kernels and
cuBLAS handles; each NCCL communicator about 488 MiB before data buffers. Megatron creates a
communicator for every process group that has more than one member and is used in training.
Instantiated CUDA graphs hold executable memory outside the allocator too; vLLM reports 1 to 3
GiB per GPU, and memtune counts the low end (their static pools inside PyTorch are not modeled).
An async checkpoint save's persistent worker process opens a CUDA context of its own on the
rank's GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.config.derived import Derived
from memtune.units import MiB

CUDA_CONTEXT = 518 * MiB
KERNELS_AND_HANDLES = 100 * MiB
NCCL_COMMUNICATOR = 488 * MiB
CUDA_GRAPH_EXEC = 1024 * MiB


def communicators(d: Derived) -> dict[str, int]:
    """Process groups with more than one member that a training step communicates over."""
    groups = {
        "tensor": d.tp,
        "pipeline": d.pp,
        "context": d.cp,
        "data x context": d.dp * d.cp,
        "expert": d.ep if d.is_moe else 1,
        "expert-tensor": d.etp if d.is_moe and d.etp != d.tp else 1,
        "expert-data": d.edp if d.is_moe else 1,
        "embedding": 2 if d.pp > 1 and d.model.share_embeddings_and_output_weights else 1,
    }
    return {name: size for name, size in groups.items() if size > 1}


@dataclass(frozen=True)
class OutsidePyTorch:
    """Device memory a rank uses outside PyTorch's allocator, by where it goes."""

    context_bytes: int  # the CUDA context, lazily loaded kernels and cuBLAS handles
    per_communicator_bytes: int
    communicators: tuple[str, ...]  # the process groups that get an NCCL communicator
    cuda_graph_bytes: int  # instantiated CUDA graphs; 0 without them
    checkpoint_worker_bytes: int = 0  # the async save's persistent worker's CUDA context; 0 without

    @property
    def total_bytes(self) -> int:
        return (
            self.context_bytes
            + self.per_communicator_bytes * len(self.communicators)
            + self.cuda_graph_bytes
            + self.checkpoint_worker_bytes
        )


def outside_pytorch(d: Derived) -> OutsidePyTorch:
    return OutsidePyTorch(
        context_bytes=CUDA_CONTEXT + KERNELS_AND_HANDLES,
        per_communicator_bytes=NCCL_COMMUNICATOR,
        communicators=tuple(communicators(d)),
        cuda_graph_bytes=CUDA_GRAPH_EXEC if d.cuda_graphs else 0,
        # The persistent worker of async saves (megatron/core/dist_checkpointing/strategies/
        # async_utils.py, PersistentAsyncCaller.async_loop) calls torch.cuda.set_device on the
        # rank's GPU: a CUDA context there from the first save on, for the rest of the run.
        checkpoint_worker_bytes=CUDA_CONTEXT if d.async_save else 0,
    )


def non_pytorch_bytes(d: Derived) -> int:
    return outside_pytorch(d).total_bytes
