"""LoRA on a Megatron-Core GPT model, with sequence-parallel input re-gather (docs/peft.md).

Torch is imported lazily: ``memtune.peft`` imports this module on first use of ``LoRA``, and a
machine without torch gets one ``MissingDependencyError`` line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memtune import apicheck
from memtune.errors import ArgumentError, ArgumentTypeError, InputError, MissingDependencyError
from memtune.limits import MAX_WIDTH
from memtune.numbers import echo
from memtune.peft.model import (
    COLUMN_TARGETS,
    ROW_TARGETS,
    AdapterKind,
)

if TYPE_CHECKING:
    import torch

log = logging.getLogger("memtune.peft")

DEFAULT_TARGETS = COLUMN_TARGETS[:1] + ROW_TARGETS[:1] + COLUMN_TARGETS[1:] + ROW_TARGETS[1:]
_ROUTED_EXPERT = re.compile(r".*mlp\..*experts.*\.linear_fc[12]$")


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise MissingDependencyError("memtune.peft's LoRA needs PyTorch: pip install torch") from e
    return torch


def adapter_kind(path: str) -> AdapterKind:
    """Routed-expert linears sit under ``mlp.experts`` (shared experts do not count)."""
    if ".shared_experts." in path:
        return "shared_expert"
    return "routed_expert" if _ROUTED_EXPERT.match(path) else "dense"


@dataclass(frozen=True)
class AdapterReport:
    """One adapter of a model: where it is and whether it re-gathers (``reason`` says why not)."""

    path: str
    target: str
    parallel: str
    regathers: bool
    reason: str | None


SCALE_POSITIONS = ("bottleneck", "output")


@dataclass(frozen=True)
class LoRA:
    """LoRA adapters for the ``target_modules`` linears of a Megatron-Core GPT model.

    ``apply(model)`` freezes every base parameter and wraps each matching linear; the adapters
    are placed and sharded as Megatron-Bridge's LoRA places them (memtune/peft/model.py).
    """

    dim: int = 32
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = DEFAULT_TARGETS
    sequence_parallel_input_regather: bool = False
    # Under SP, a row adapter's output reaches its sequence shard by one all-to-all from its
    # hidden shard, not a full-width gather (Megatron-Bridge's ``a2a_experimental``).
    a2a_experimental: bool = False
    # Where alpha/dim multiplies: "bottleneck", the rank-wide tensor before the bias-free output
    # projection (W(s·x) = s·W(x); Megatron-Bridge's dense adapters since its PR #5906), or
    # "output", the full-width result, which keeps a second full-width tensor alive while the
    # multiply runs (Bridge before #5906, and its grouped-expert adapters until PR #5913).
    scale_position: str = "bottleneck"

    def __post_init__(self) -> None:
        apicheck.integer("LoRA dim", self.dim, 1, MAX_WIDTH)
        apicheck.integer("LoRA alpha", self.alpha, 1, MAX_WIDTH)
        apicheck.number("LoRA dropout", self.dropout, 0.0, 1.0)
        if self.dropout == 1.0:
            raise ArgumentError(f"LoRA dropout: must be in [0, 1), got {self.dropout}")
        apicheck.flag("LoRA sequence_parallel_input_regather", self.sequence_parallel_input_regather)
        apicheck.flag("LoRA a2a_experimental", self.a2a_experimental)
        targets = self.target_modules
        if isinstance(targets, str) or not isinstance(targets, tuple | list):
            raise ArgumentTypeError(
                f"LoRA target_modules: must be a tuple of module names, got {echo(targets)}"
            )
        unknown = [t for t in targets if t not in DEFAULT_TARGETS]
        if unknown:
            raise ArgumentError(
                f"LoRA target_modules: unknown {echo(unknown)}; allowed: {', '.join(DEFAULT_TARGETS)}"
            )
        if self.scale_position not in SCALE_POSITIONS:
            raise ArgumentError(
                f"LoRA scale_position: must be one of {', '.join(SCALE_POSITIONS)}, got {echo(self.scale_position)}"
            )

    def apply(self, model: Any, tp_group: Any = None) -> Any:
        """Freeze ``model``'s parameters and wrap its target linears in place; returns ``model``.

        ``tp_group`` is the tensor-parallel group when the linears do not carry one
        (Megatron-Core's carry ``tp_group``; without either, Megatron's parallel state is asked).
        """
        apicheck.has_methods("model", model, "a torch.nn.Module", "parameters", "named_modules")
        _torch()
        apicheck.process_group("tp_group", tp_group)
        from memtune.peft.modules import LoRALinear, make_adapter

        for p in model.parameters():
            p.requires_grad_(False)
        for path, module in list(model.named_modules()):
            target = path.rsplit(".", 1)[-1]
            if target not in self.target_modules or isinstance(module, LoRALinear):
                continue
            group = getattr(module, "tp_group", None) or tp_group or _megatron_tp_group(adapter_kind(path))
            adapter = make_adapter(self, module, path, target, adapter_kind(path), group)
            _replace(model, path, LoRALinear(module, adapter))
        return model

    def report(self, model: Any) -> list[AdapterReport]:
        """Every adapter of ``model`` with its path and, if it does not re-gather, why."""
        apicheck.has_methods("model", model, "a torch.nn.Module", "named_modules")
        from memtune.peft.modules import LoRALinear

        out = []
        for path, module in model.named_modules():
            if isinstance(module, LoRALinear):
                reason = module.adapter.regather_reason(training=True)
                out.append(
                    AdapterReport(
                        path, module.adapter.target, module.adapter.parallel, reason is None, reason
                    )
                )
        return out

    def adapter_state_dict(self, model: Any) -> dict[str, torch.Tensor]:
        """This rank's adapter weights under Megatron-Bridge's names (``<linear>.adapter.linear_in.weight``,
        ``<linear>.adapter.linear_out.weight``), without base weights."""
        apicheck.has_methods("model", model, "a torch.nn.Module", "state_dict")
        return {k: v for k, v in _strip(model.state_dict()).items() if ".adapter." in k}

    def load_adapter_state_dict(self, model: Any, state: Mapping[str, torch.Tensor]) -> None:
        """Load adapter weights saved by ``adapter_state_dict`` (this rank's shards) or whole,
        unsharded tensors (sliced to this rank's shard). Every adapter must be present."""
        torch = _torch()
        apicheck.has_methods("model", model, "a torch.nn.Module", "state_dict", "named_modules")
        if not isinstance(state, Mapping):
            raise ArgumentTypeError(f"state: must be a mapping of names to tensors, got {echo(state)}")
        own = {k: v for k, v in _strip(model.state_dict(keep_vars=True)).items() if ".adapter." in k}
        missing = sorted(set(own) - set(state))
        extra = sorted(set(state) - set(own))
        if missing or extra:
            raise InputError(
                f"LoRA adapter weights do not match the model: missing {missing[:3]}, unexpected {extra[:3]}"
            )
        shards = _shard_specs(model)
        with torch.no_grad():
            for name, param in own.items():
                value = state[name]
                if not isinstance(value, torch.Tensor):
                    raise ArgumentTypeError(f"state[{name!r}]: must be a tensor, got {echo(value)}")
                if tuple(value.shape) != tuple(param.shape):
                    value = _local_shard(name, value, param, shards[name])
                param.copy_(value)


def _strip(state: Mapping[str, Any]) -> dict[str, Any]:
    """Megatron wraps models in DDP and Float16Module (``module.`` prefixes); Bridge's names have none."""
    return {re.sub(r"^(module\.)+", "", k): v for k, v in state.items()}


def _shard_specs(model: Any) -> dict[str, tuple[int, int, int]]:
    """For each adapter weight name: (split axis, TP size, TP rank)."""
    from memtune.peft.comm import group_rank, group_size
    from memtune.peft.modules import LoRALinear

    specs = {}
    for path, module in model.named_modules():
        if isinstance(module, LoRALinear):
            a = module.adapter
            name = re.sub(r"^(module\.)+", "", path)
            size, rank = group_size(a.group), group_rank(a.group)
            specs[f"{name}.adapter.linear_in.weight"] = (0 if a.parallel == "column" else 1, size, rank)
            specs[f"{name}.adapter.linear_out.weight"] = (0, size, rank)
    return specs


def _local_shard(name: str, value: Any, param: Any, spec: tuple[int, int, int]) -> Any:
    axis, size, rank = spec
    expected = list(param.shape)
    expected[axis] *= size
    if list(value.shape) != expected:
        raise InputError(
            f"LoRA adapter weight {name}: shape {list(value.shape)}, expected {list(param.shape)} or {expected}"
        )
    return value.chunk(size, dim=axis)[rank]


def _replace(model: Any, path: str, new: Any) -> None:
    parent_path, _, child = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, child, new)


def _megatron_tp_group(kind: AdapterKind) -> Any:
    try:
        from megatron.core import parallel_state
    except ImportError as e:
        raise MissingDependencyError(
            "memtune.peft: the linear carries no tp_group and megatron-core is not installed to ask for one"
        ) from e
    if kind == "routed_expert":
        return parallel_state.get_expert_tensor_parallel_group()
    return parallel_state.get_tensor_model_parallel_group()
