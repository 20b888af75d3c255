"""The torch modules of ``memtune.peft``: the adapter and the wrapper around a base linear."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from memtune.peft import comm
from memtune.peft.model import COLUMN_TARGETS, NO_GRAD, AdapterKind, regather_facts, runtime_blocker

if TYPE_CHECKING:
    from memtune.peft.lora import LoRA

log = logging.getLogger("memtune.peft")


class LoRAAdapter(nn.Module):
    """``B(scale · A(dropout(x)))`` sharded over the base linear's TP group (or
    ``scale · B(A(dropout(x)))`` with ``LoRA.scale_position="output"``).

    Column-parallel base (input replicated or sequence-sharded, output split): A ``[dim/t, in]``
    with its output gathered, B ``[out/t, dim]``. Row-parallel base (input split, output
    reduced): A ``[dim, in/t]`` with its output all-reduced, B ``[out/t, dim]`` with its output
    gathered (and scattered to the sequence shard under SP; with ``a2a_experimental`` sent from
    its hidden shard to its sequence shard by one all-to-all). Megatron-Bridge's layout.

    Under explicit (dispatcher-owned) communication the adapter communicates only inside
    itself: its input gradient stays a partial sum, and a row adapter returns its output slice
    in place within a zero tensor of full width, a partial sum like the base linear's output.
    """

    def __init__(
        self,
        lora: LoRA,
        path: str,
        target: str,
        kind: AdapterKind,
        in_features: int,
        out_features: int,
        group: Any,
        sequence_parallel: bool,
        explicit_comm: bool,
        config: Any,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.path, self.target, self.kind, self.group = path, target, kind, group
        self.parallel = "column" if target in COLUMN_TARGETS else "row"
        # Megatron's routed-expert linears leave TP communication to the token dispatcher: their
        # input arrives whole, input gradients and row outputs leave as partial sums.
        self.explicit_comm = explicit_comm
        self.sequence_parallel = sequence_parallel and not explicit_comm
        self.requested = lora.sequence_parallel_input_regather
        self.fuse = bool(getattr(config, "gradient_accumulation_fusion", False))
        self.scale = lora.alpha / lora.dim
        self.scale_bottleneck = lora.scale_position == "bottleneck"
        self.tp = comm.group_size(group)
        self.a2a = lora.a2a_experimental
        self.facts = regather_facts(target, kind, self.tp, sequence_parallel, config, self.a2a)
        self.activation: nn.Module = nn.Identity()
        self.dropout: nn.Module = nn.Dropout(lora.dropout) if lora.dropout > 0 else nn.Identity()
        if lora.dim % self.tp and self.parallel == "column":
            raise ValueError(f"LoRA dim {lora.dim} must be divisible by the TP size {self.tp}")
        a_rows, a_cols = (
            (lora.dim // self.tp, in_features)
            if self.parallel == "column"
            else (lora.dim, in_features // self.tp)
        )
        self.linear_in = nn.Linear(a_cols, a_rows, bias=False, dtype=dtype, device=device)
        self.linear_out = nn.Linear(lora.dim, out_features // self.tp, bias=False, dtype=dtype, device=device)
        with torch.no_grad():
            # LoRA-A: Xavier-normal over the whole (unsharded) matrix; LoRA-B starts at zero.
            std = math.sqrt(2.0 / (lora.dim + in_features))
            self.linear_in.weight.normal_(0.0, std)
            self.linear_out.weight.zero_()
        self._logged = False

    def regather_reason(self, training: bool | None = None) -> str | None:
        """Why this adapter does not re-gather now (None: it does); ``training`` overrides the
        module's mode and grad mode (``report`` asks about training)."""
        grad_mode = (self.training and torch.is_grad_enabled()) if training is None else training
        if not self.requested:
            return "sequence_parallel_input_regather is off"
        return runtime_blocker(
            self.facts,
            a_trainable=self.linear_in.weight.requires_grad,
            identity=isinstance(self.activation, nn.Identity),
            grad_mode=grad_mode,
        )

    def _regathers(self) -> bool:
        if not self.requested or self.parallel != "column":
            return False
        reason = self.regather_reason()
        if reason is not None and reason != NO_GRAD and not self._logged:
            log.info("LoRA re-gather requested for %s but not used: %s", self.path, reason)
            self._logged = True
        return reason is None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(x)
        if self.parallel == "column":
            a = self._column_a(x)
            a = comm.apply(comm.GatherLastDim, a, self.group) if self.tp > 1 else a
            a = self._scaled(self.activation(a))
            a = comm.apply(comm.CopyToTensorParallel, a, self.group) if self.tp > 1 else a
            out = comm.apply(comm.AdapterLinear, a, self.linear_out.weight, self.fuse)
        else:
            a = comm.apply(comm.AdapterLinear, x, self.linear_in.weight, self.fuse)
            a = comm.apply(comm.ReduceFromTensorParallel, a, self.group) if self.tp > 1 else a
            a = self._scaled(self.activation(a))
            a = comm.apply(comm.CopyToTensorParallel, a, self.group) if self.tp > 1 else a
            out = comm.apply(comm.AdapterLinear, a, self.linear_out.weight, self.fuse)
            if self.explicit_comm and self.tp > 1:
                width, rank = out.shape[-1], comm.group_rank(self.group)
                padded = torch.nn.functional.pad(out, (rank * width, (self.tp - 1 - rank) * width))
                return padded if self.scale_bottleneck else padded * self.scale
            if self.a2a and self.sequence_parallel and self.tp > 1:
                out = comm.apply(comm.HiddenToSequence, out, self.group)
            else:
                out = comm.apply(comm.GatherLastDim, out, self.group) if self.tp > 1 else out
                if self.sequence_parallel and self.tp > 1:
                    out = comm.apply(comm.ScatterSequence, out, self.group)
        return out if self.scale_bottleneck else out * self.scale

    def _scaled(self, a: torch.Tensor) -> torch.Tensor:
        """The rank-wide bottleneck, scaled when the scale sits there: the output projection has
        no bias, so B(s·a) = s·B(a), and no full-width copy is made."""
        return a * self.scale if self.scale_bottleneck else a

    def _column_a(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.linear_in.weight
        if self._regathers():
            return comm.apply(comm.RegatherLoRAA, x, weight, self.group, self.fuse)
        if self.sequence_parallel and self.tp > 1:
            # The default path: the gathered input is what LoRA-A keeps for its weight gradient.
            x = comm.apply(comm.GatherSequence, x, self.group)
        elif self.tp > 1 and not self.explicit_comm:
            x = comm.apply(comm.CopyToTensorParallel, x, self.group)
        return comm.apply(comm.AdapterLinear, x, weight, self.fuse)


class LoRALinear(nn.Module):
    """A frozen base linear plus its adapter; forwards like the base: ``(output, bias)``."""

    def __init__(self, to_wrap: nn.Module, adapter: LoRAAdapter) -> None:
        super().__init__()
        self.to_wrap = to_wrap
        self.adapter = adapter

    def __getattr__(self, name: str) -> Any:
        # Megatron's modules read attributes of their linears (``weight``, ``config``...): the base's.
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in ("to_wrap", "adapter"):
                raise
            return getattr(self.to_wrap, name)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        out, bias = self.to_wrap(x, *args, **kwargs)
        return out + self.adapter(x).to(out.dtype), bias

    def state_dict(
        self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False
    ) -> Any:
        """Base weights under the base linear's own names, the adapter under ``adapter.``
        (Megatron-Bridge's names)."""
        if destination is None:
            destination = {}
        self.to_wrap.state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        self.adapter.state_dict(destination=destination, prefix=f"{prefix}adapter.", keep_vars=keep_vars)
        return destination


def _global_features(module: nn.Module, weight: torch.Tensor, parallel: str, tp: int) -> tuple[int, int]:
    """(in, out) of the whole base linear; Megatron's linears carry ``input_size``/``output_size``."""
    sizes = getattr(module, "input_size", None), getattr(module, "output_size", None)
    if sizes[0] is not None and sizes[1] is not None:
        return int(sizes[0]), int(sizes[1])
    out_local, in_local = weight.shape
    return (in_local, out_local * tp) if parallel == "column" else (in_local * tp, out_local)


def make_adapter(
    lora: LoRA, module: nn.Module, path: str, target: str, kind: AdapterKind, group: Any
) -> LoRAAdapter:
    weight = module.weight
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"memtune.peft: {path} has no weight tensor to adapt")
    parallel = "column" if target in COLUMN_TARGETS else "row"
    tp = comm.group_size(group)
    fan_in, fan_out = _global_features(module, weight, parallel, tp)
    adapter = LoRAAdapter(
        lora,
        path,
        target,
        kind,
        fan_in,
        fan_out,
        group,
        sequence_parallel=bool(getattr(module, "sequence_parallel", False)),
        explicit_comm=bool(getattr(module, "explicit_expert_comm", False)),
        config=getattr(module, "config", None),
        dtype=weight.dtype,
        device=weight.device,
    )
    _mark_like_megatron(adapter, kind)
    return adapter


def _mark_like_megatron(adapter: LoRAAdapter, kind: AdapterKind) -> None:
    """The attributes Megatron's DDP and optimizer read from a parameter: which TP dimension
    it is split on, and (``allreduce=False``) that routed-expert parameters live in the expert
    buffers and are sharded over expert data parallelism."""
    split = adapter.tp > 1
    a_dim = 0 if adapter.parallel == "column" else 1
    for weight, dim in ((adapter.linear_in.weight, a_dim), (adapter.linear_out.weight, 0)):
        weight.tensor_model_parallel = split  # type: ignore[attr-defined]
        weight.partition_dim = dim  # type: ignore[attr-defined]
        weight.partition_stride = 1  # type: ignore[attr-defined]
        if kind == "routed_expert":
            weight.allreduce = False  # type: ignore[attr-defined]
