"""Minimal stand-ins for Megatron-Core's tensor-parallel linears, runnable on a CPU (Gloo).

Megatron's own ``ColumnParallelLinear`` cannot run sequence parallelism without CUDA (its gather
buffer lives on the GPU), so these mimic its interface: ``weight``, ``sequence_parallel``,
``tp_group``, ``config``, ``input_size``/``output_size``, and ``forward`` returning
``(output, bias)``. Under SP the column linear gathers its ``[s/t, b, h]`` input with
``all_gather_into_tensor`` and keeps only that shard for its weight gradient; the row linear
reduce-scatters its output back to the sequence shard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class StandInConfig:
    gradient_accumulation_fusion: bool = False
    recompute_granularity: str | None = None
    recompute_modules: list[str] = field(default_factory=list)
    cuda_graph_impl: str = "none"
    cpu_offloading: bool = False
    cpu_offloading_activations: bool = True
    moe_shared_expert_overlap: bool = False


class _ColumnSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, shard: torch.Tensor, weight: torch.Tensor, group: Any) -> torch.Tensor:
        world = dist.get_world_size(group)
        total = torch.empty((shard.shape[0] * world, *shard.shape[1:]), dtype=shard.dtype)
        dist.all_gather_into_tensor(total, shard.contiguous(), group=group)
        ctx.save_for_backward(shard, weight)
        ctx.group = group
        return total.matmul(weight.t())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        shard, weight = ctx.saved_tensors
        grad_total = grad.matmul(weight)
        out = torch.empty_like(shard)
        dist.reduce_scatter_tensor(out, grad_total.contiguous(), group=ctx.group)
        return out, None, None


class _RowSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, group: Any) -> torch.Tensor:
        world = dist.get_world_size(group)
        partial = x.matmul(weight.t()).contiguous()
        out = torch.empty((partial.shape[0] // world, *partial.shape[1:]), dtype=partial.dtype)
        dist.reduce_scatter_tensor(out, partial, group=group)
        ctx.save_for_backward(weight)
        ctx.group = group
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (weight,) = ctx.saved_tensors
        world = dist.get_world_size(ctx.group)
        total = torch.empty((grad.shape[0] * world, *grad.shape[1:]), dtype=grad.dtype)
        dist.all_gather_into_tensor(total, grad.contiguous(), group=ctx.group)
        return total.matmul(weight), None, None


class ColumnParallelStandIn(nn.Module):
    def __init__(
        self,
        input_size: int,
        output_size: int,
        group: Any,
        sequence_parallel: bool,
        config: Any,
        dtype: torch.dtype,
    ) -> None:
        super().__init__()
        world = dist.get_world_size(group)
        self.input_size, self.output_size = input_size, output_size
        self.tp_group, self.sequence_parallel, self.config = group, sequence_parallel, config
        self.weight = nn.Parameter(
            torch.randn(output_size // world, input_size, dtype=dtype) / input_size**0.5
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        if self.sequence_parallel:
            return _ColumnSP.apply(x, self.weight, self.tp_group), None
        return x.matmul(self.weight.t()), None


class RowParallelStandIn(nn.Module):
    def __init__(
        self,
        input_size: int,
        output_size: int,
        group: Any,
        sequence_parallel: bool,
        config: Any,
        dtype: torch.dtype,
    ) -> None:
        super().__init__()
        world = dist.get_world_size(group)
        self.input_size, self.output_size = input_size, output_size
        self.tp_group, self.sequence_parallel, self.config = group, sequence_parallel, config
        self.weight = nn.Parameter(
            torch.randn(output_size, input_size // world, dtype=dtype) / input_size**0.5
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _RowSP.apply(x, self.weight, self.tp_group), None


class Block(nn.Module):
    """``x + proj(qkv(x))`` then ``x + fc2(gelu(fc1(x)))``: Megatron's linear names and layout."""

    def __init__(self, h: int, f: int, group: Any, sp: bool, config: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.self_attention = nn.Module()
        self.self_attention.linear_qkv = ColumnParallelStandIn(h, 2 * h, group, sp, config, dtype)
        self.self_attention.linear_proj = RowParallelStandIn(2 * h, h, group, sp, config, dtype)
        self.mlp = nn.Module()
        self.mlp.linear_fc1 = ColumnParallelStandIn(h, f, group, sp, config, dtype)
        self.mlp.linear_fc2 = RowParallelStandIn(f, h, group, sp, config, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, _ = self.self_attention.linear_qkv(x)
        x = x + self.self_attention.linear_proj(a)[0]
        m, _ = self.mlp.linear_fc1(x)
        return x + self.mlp.linear_fc2(torch.nn.functional.gelu(m))[0]


class Stack(nn.Module):
    def __init__(
        self, layers: int, h: int, f: int, group: Any, sp: bool, config: Any, dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(Block(h, f, group, sp, config, dtype) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.decoder.layers:
            x = layer(x)
        return x
