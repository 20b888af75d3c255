"""LoRA adapters in the estimate: what they keep for backward, priced from the LoRA model
(memtune/peft/model.py, which also decides which adapters re-gather their input)."""

from __future__ import annotations

from memtune.config.derived import Derived
from memtune.estimate.activations import BF16, Dims
from memtune.peft.model import AdapterParams, adapters_in_layer, kept_gathered_input
from memtune.peft.model import adapter_params as adapter_params

__all__ = ["AdapterParams", "adapter_activations", "adapter_params"]


def adapter_activations(d: Derived, x: Dims, is_moe: bool) -> dict[str, float]:
    """Bytes the adapters of one layer keep per microbatch, beyond what the base layer keeps."""
    peft = d.job.peft
    if peft is None:
        return {}
    kept: dict[str, float] = {}
    for a in adapters_in_layer(d, is_moe):
        if a.kind == "routed_expert":
            continue  # their inputs are the dispatched tokens the expert linears keep anyway
        name = f"lora.{a.target}" if a.kind == "dense" else f"lora.shared_experts.{a.target}"
        # LoRA-A's output and LoRA-B's input are small (rank-wide); the base output is not kept.
        kept[f"{name}.rank_tensors"] = 2 * BF16 * x.tokens * peft.dim
        gathered = kept_gathered_input(d, a)
        if gathered:
            kept[f"{name}.gathered_input"] = gathered
    return kept
