"""LoRA adapters in the estimate, priced from the LoRA model (memtune/peft/model.py, which also
decides which adapters re-gather their input).

Megatron-Core runs a frozen base linear through ``linear_with_frozen_weight``, which keeps no
input for backward (it computes no weight gradient). With LoRA the base linears' inputs are
therefore kept only where something else keeps the same tensor: the adapter on that linear
(LoRA-A needs its input), or, for ``linear_proj``, a flash attention kernel that keeps its
output (a view of that input with one sequence per microbatch).
"""

from __future__ import annotations

from memtune.config.derived import Derived
from memtune.estimate.activations import BF16, Dims, Saved
from memtune.estimate.flavour import Flavour
from memtune.peft.model import AdapterParams, adapters_in_layer, kept_input_bytes
from memtune.peft.model import adapter_params as adapter_params

__all__ = ["AdapterParams", "adapter_params", "apply_lora"]


def apply_lora(d: Derived, x: Dims, fl: Flavour, saved: Saved, is_moe: bool) -> None:
    """Adjust one layer's kept tensors (``transformer_layer``'s names) for a LoRA job: frozen
    base linears drop their inputs; adapters add what they keep."""
    if d.job.peft is None:
        return
    dense = {a.target: a for a in adapters_in_layer(d, is_moe) if a.kind == "dense"}
    t = saved.tensors
    mlp_replayed = "mlp" in d.recompute_modules  # the checkpoint keeps fc1's input itself
    t.pop("self_attention.linear_qkv.input", None)
    proj_kept_by_attention = fl.flash_attention and (fl.transformer_engine or x.mbs == 1)
    if "linear_proj" not in dense and not proj_kept_by_attention:
        t.pop("self_attention.linear_proj.input", None)
    if not is_moe and not mlp_replayed:
        t.pop("mlp.linear_fc1.input", None)
        if "linear_fc2" not in dense:
            t.pop("mlp.linear_fc2.input", None)
    for a in adapters_in_layer(d, is_moe):
        if a.kind == "routed_expert":
            continue  # their inputs are the dispatched tokens the expert linears keep anyway
        name = f"lora.{a.target}" if a.kind == "dense" else f"lora.shared_experts.{a.target}"
        # LoRA-A's output and LoRA-B's input are small (rank-wide); the adapter's output is not kept.
        saved.add(f"{name}.rank_tensors", 2 * BF16 * x.tokens * d.job.peft.dim)
        saved.add(f"{name}.input", kept_input_bytes(d, a))
