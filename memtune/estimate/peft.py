"""LoRA adapters: their parameters and what they keep for backward.

Under TP + SP the column-parallel adapters (on ``linear_qkv`` and ``linear_fc1``) receive the
norm output gathered to the full sequence by default and LoRA-A keeps that whole ``[s, b, h]``
tensor until backward. With ``sequence_parallel_input_regather`` an eligible adapter keeps only
its local shard (the one the base linear keeps anyway) and gathers again in backward.
"""

from __future__ import annotations

from memtune.config.derived import Derived
from memtune.estimate.activations import BF16, Dims

COLUMN_TARGETS = ("linear_qkv", "linear_fc1")


def regather_blockers(d: Derived, target: str) -> list[str]:
    """Why re-gather cannot engage for an adapter on ``target`` (empty when it engages)."""
    m = d.model
    reasons = []
    if target not in COLUMN_TARGETS:
        reasons.append("the adapter is row-parallel")
    if d.tp == 1:
        reasons.append("tensor parallel size is one")
    elif not d.sequence_parallel:
        reasons.append("sequence-parallel communication is disabled")
    if m.cpu_offloading and m.cpu_offloading_activations:
        reasons.append("CPU activation offload is enabled")
    if m.cuda_graph_impl != "none":
        reasons.append("CUDA graphs are enabled")
    if m.recompute_granularity == "full":
        reasons.append("full-layer activation recompute already covers the adapter")
    if target == "linear_fc1" and "mlp" in d.recompute_modules:
        reasons.append("selective MLP recompute already covers linear_fc1")
    return reasons


def _target_shapes(d: Derived, is_moe: bool) -> dict[str, tuple[int, int, int]]:
    """(input width, output width, copies) of each LoRA-able linear in one layer."""
    m, h = d.model, d.model.hidden_size
    heads, kv = m.num_attention_heads, d.kv_channels
    shapes = {
        "linear_qkv": (h, (heads + 2 * d.num_query_groups) * kv, 1),
        "linear_proj": (heads * kv, h, 1),
    }
    gate = 2 if m.gated_linear_unit else 1
    if is_moe:
        local_experts = d.num_experts // d.ep
        shapes["linear_fc1"] = (h, gate * d.moe_ffn_hidden_size, local_experts)
        shapes["linear_fc2"] = (d.moe_ffn_hidden_size, h, local_experts)
    else:
        shapes["linear_fc1"] = (h, gate * d.ffn_hidden_size, 1)
        shapes["linear_fc2"] = (d.ffn_hidden_size, h, 1)
    return shapes


def adapter_params(d: Derived, layers: tuple[int, ...]) -> float:
    """LoRA parameters one TP rank holds for ``layers``: A is (dim x in), B is (out x dim)."""
    if d.job.peft is None:
        return 0.0
    dim = d.job.peft.dim
    total = 0.0
    for i in layers:
        is_moe = d.moe_layer_pattern[i]
        split = d.etp if is_moe else d.tp
        for target, (fan_in, fan_out, copies) in _target_shapes(d, is_moe).items():
            if target in d.job.peft.target_modules:
                width_split = split if target in ("linear_fc1", "linear_fc2") and is_moe else d.tp
                total += copies * dim * (fan_in + fan_out) / width_split
    return total


def adapter_activations(d: Derived, x: Dims, is_moe: bool) -> dict[str, float]:
    """Bytes the adapters of one layer keep per microbatch, beyond what the base layer keeps."""
    peft = d.job.peft
    if peft is None:
        return {}
    kept: dict[str, float] = {}
    for target in _target_shapes(d, is_moe):
        if target not in peft.target_modules or (is_moe and target in ("linear_fc1", "linear_fc2")):
            continue
        # LoRA-A's output and LoRA-B's input are small (rank-wide); the base output is not kept.
        kept[f"lora.{target}.rank_tensors"] = 2 * BF16 * x.tokens * peft.dim
        regathers = peft.sequence_parallel_input_regather and not regather_blockers(d, target)
        if target in COLUMN_TARGETS and d.sequence_parallel and not regathers:
            kept[f"lora.{target}.gathered_input"] = BF16 * x.tokens * x.hidden
    return kept
