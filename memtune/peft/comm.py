"""Tensor-parallel communication as autograd functions, and the re-gather LoRA-A function.

Imported only by ``memtune.peft.lora`` (which checks torch is present first). Sequence-parallel
tensors are split along dimension 0 (``[s/t, b, h]``), as in Megatron-Core.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

Group = Any  # a torch.distributed process group (None: the default group)


def group_size(group: Group) -> int:
    return dist.get_world_size(group) if dist.is_initialized() else 1


def group_rank(group: Group) -> int:
    return dist.get_rank(group) if dist.is_initialized() else 0


def apply(function: type[torch.autograd.Function], *args: Any) -> torch.Tensor:
    """``function.apply(*args)``, typed: torch leaves ``Function.apply`` unannotated."""
    output: torch.Tensor = function.apply(*args)  # type: ignore[no-untyped-call]  # unannotated in torch
    return output


# One reusable gather buffer per (shape, dtype, device) for the re-gather path. On a GPU with
# Megatron-Core's parallel state initialised, Megatron's own global buffer is used instead, so
# the adapter shares the buffer the base linear gathers into (the estimator counts one).
_buffers: dict[tuple[tuple[int, ...], torch.dtype, torch.device], torch.Tensor] = {}


def comm_buffer(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        try:
            from megatron.core import parallel_state

            if parallel_state.model_parallel_is_initialized():
                buffer: torch.Tensor = parallel_state.get_global_memory_buffer().get_tensor(
                    list(shape), dtype, "mpu"
                )
                return buffer
        except ImportError:
            pass
    key = (shape, dtype, device)
    if key not in _buffers:
        _buffers[key] = torch.empty(shape, dtype=dtype, device=device)
    return _buffers[key]


def _gathered_shape(shard: torch.Tensor, world: int) -> tuple[int, ...]:
    return (shard.shape[0] * world, *shard.shape[1:])


class GatherSequence(torch.autograd.Function):
    """Forward: all-gather along the sequence; backward: reduce-scatter back to the shard."""

    @staticmethod
    def forward(ctx: Any, shard: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        world = group_size(group)
        total = torch.empty(_gathered_shape(shard, world), dtype=shard.dtype, device=shard.device)
        dist.all_gather_into_tensor(total, shard.contiguous(), group=group)
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return reduce_scatter_sequence(grad, ctx.group), None


def reduce_scatter_sequence(total: torch.Tensor, group: Group) -> torch.Tensor:
    world = group_size(group)
    shard = torch.empty((total.shape[0] // world, *total.shape[1:]), dtype=total.dtype, device=total.device)
    dist.reduce_scatter_tensor(shard, total.contiguous(), group=group)
    return shard


class ScatterSequence(torch.autograd.Function):
    """Forward: keep this rank's sequence chunk; backward: all-gather the gradient."""

    @staticmethod
    def forward(ctx: Any, total: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        world, rank = group_size(group), group_rank(group)
        return total.chunk(world, dim=0)[rank].contiguous()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        world = group_size(ctx.group)
        total = torch.empty(_gathered_shape(grad, world), dtype=grad.dtype, device=grad.device)
        dist.all_gather_into_tensor(total, grad.contiguous(), group=ctx.group)
        return total, None


class CopyToTensorParallel(torch.autograd.Function):
    """Forward: identity on a TP-replicated tensor; backward: all-reduce the partial gradients."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTensorParallel(torch.autograd.Function):
    """Forward: all-reduce partial sums; backward: identity."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class GatherLastDim(torch.autograd.Function):
    """Forward: concatenate every rank's slice of the last dimension; backward: keep this rank's slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        world = group_size(group)
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        world, rank = group_size(ctx.group), group_rank(ctx.group)
        return grad.chunk(world, dim=-1)[rank].contiguous(), None


class HiddenToSequence(torch.autograd.Function):
    """Forward: ``[s, b, h/t]`` (this rank's hidden slice of the whole sequence) to ``[s/t, b, h]``
    (the whole hidden width of this rank's sequence chunk) by one all-to-all; backward: the
    inverse. Megatron-Bridge's ``all2all_hp2sp`` for a row adapter's output under SP."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        world = group_size(group)
        s, b, h = x.shape
        # chunk j of the sequence goes to rank j; rank i's reply is hidden slice i of our chunk
        sent = x.reshape(world, s // world, b, h).contiguous()
        got = torch.empty_like(sent)
        dist.all_to_all_single(got, sent, group=group)
        return got.permute(1, 2, 0, 3).reshape(s // world, b, world * h)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        world = group_size(ctx.group)
        s, b, h = grad.shape
        sent = grad.reshape(s, b, world, h // world).permute(2, 0, 1, 3).contiguous()
        got = torch.empty_like(sent)
        dist.all_to_all_single(got, sent, group=ctx.group)
        return got.reshape(world * s, b, h // world), None


def _weight_grad(
    weight: torch.Tensor, grad_out: torch.Tensor, total: torch.Tensor, fuse: bool
) -> torch.Tensor | None:
    """The weight gradient of ``total @ weight.T``: accumulated into ``main_grad`` (returning the
    placeholder Megatron's DDP hook expects) when gradient-accumulation fusion is on, else returned."""
    grad = grad_out.reshape(-1, grad_out.shape[-1]).t().matmul(total.reshape(-1, total.shape[-1]))
    main_grad = getattr(weight, "main_grad", None)
    if not fuse or main_grad is None:
        return grad
    main_grad.add_(grad)
    if not hasattr(weight, "grad_added_to_main_grad"):
        return None
    weight.grad_added_to_main_grad = True
    make = torch.zeros if getattr(weight, "zero_out_wgrad", False) else torch.empty
    return make(weight.shape, dtype=weight.dtype, device=weight.device)


class AdapterLinear(torch.autograd.Function):
    """``x @ weight.T`` that keeps its input and accumulates its weight gradient like Megatron's linears."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, fuse: bool) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.weight, ctx.fuse = weight, fuse
        return x.matmul(weight.t())

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        (x,) = ctx.saved_tensors
        weight = ctx.weight
        grad_out = grad_out.to(x.dtype)
        grad_x = grad_out.matmul(weight)
        grad_w = _weight_grad(weight, grad_out, x, ctx.fuse) if weight.requires_grad else None
        return grad_x, grad_w, None


class RegatherLoRAA(torch.autograd.Function):
    """LoRA-A on a sequence-parallel input that keeps only the local shard for backward.

    Forward gathers the shard into a reusable buffer and runs the GEMM on it. Backward starts
    gathering the saved shard again (asynchronously), computes the input gradient meanwhile,
    then the weight gradient on the gathered input, and reduce-scatters the input gradient back
    to the shard. No GEMM runs twice.
    """

    @staticmethod
    def forward(
        ctx: Any, shard: torch.Tensor, weight: torch.Tensor, group: Group, fuse: bool
    ) -> torch.Tensor:
        shard = shard.contiguous()
        total = comm_buffer(_gathered_shape(shard, group_size(group)), shard.dtype, shard.device)
        dist.all_gather_into_tensor(total, shard, group=group)
        out = total.matmul(weight.t())
        ctx.save_for_backward(shard)
        ctx.weight, ctx.group, ctx.fuse = weight, group, fuse
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, None, None]:
        (shard,) = ctx.saved_tensors
        weight, group = ctx.weight, ctx.group
        grad_out = grad_out.to(shard.dtype)
        total = comm_buffer(_gathered_shape(shard, group_size(group)), shard.dtype, shard.device)
        gathering = dist.all_gather_into_tensor(total, shard, group=group, async_op=True)
        grad_total = grad_out.matmul(weight)  # runs while the gather is in flight
        gathering.wait()
        grad_w = _weight_grad(weight, grad_out, total, ctx.fuse)
        return reduce_scatter_sequence(grad_total, group), grad_w, None, None
