"""LoRA for Megatron-Core with sequence-parallel input re-gather (docs/peft.md).

``memtune.peft.model`` is the torch-free LoRA model the checker and the estimator read;
``LoRA`` (torch and Megatron-Core, imported lazily) applies it to a real model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memtune.peft.lora import LoRA

__all__ = ["LoRA"]


def __getattr__(name: str) -> Any:
    # The torch implementation loads on first use so that importing memtune.peft stays torch-free.
    if name == "LoRA":
        from memtune.peft.lora import LoRA

        return LoRA
    raise AttributeError(f"module 'memtune.peft' has no attribute {name!r}")
