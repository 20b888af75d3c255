"""Megatron-LM's theoretical memory formula, for side-by-side comparison in ``bench accuracy``.

A re-statement of ``megatron/training/theoretical_memory_usage.py`` (Megatron-LM HEAD, 2026)
from its documented formulas: weights and optimizer of the "most-loaded shard" at 18 bytes per
parameter (6 + 12/DP with the distributed optimizer), plus Korthikanti et al.'s activation
formula for the first pipeline stage. It is Megatron-LM's estimate, not memtune's: its known
gaps (last-stage logits, in-flight microbatches per rank, unfused attention scores, bf16
gradients, full recompute) are exactly what the comparison shows.
"""

from __future__ import annotations

from memtune.config.derived import Derived
from memtune.estimate.params import ParamCounts, layer_params, mtp_layer_params


def _bytes_per_param(distributed: bool, shard: int) -> float:
    return 6 + 12 / shard if distributed else 18


def weight_and_optimizer_bytes(d: Derived) -> float:
    m, h = d.model, d.model.hidden_size
    blocks = sum((layer_params(d, moe) for moe in d.moe_layer_pattern), ParamCounts())
    mtp = mtp_layer_params(d).scaled(d.mtp_num_layers) if d.mtp_num_layers else ParamCounts()
    final_norm = h * (2 if m.normalization == "LayerNorm" else 1)
    embedding = h * d.padded_vocab_size
    tp_sharded = (blocks.dense / d.pp + mtp.dense + embedding) / d.tp
    if not m.share_embeddings_and_output_weights and d.pp == 1:
        tp_sharded += embedding / d.tp
    replicated = (blocks.replicated + final_norm) / d.pp + mtp.replicated
    experts = (blocks.expert / d.pp + mtp.expert) / (d.etp * d.ep)
    distributed = d.use_distributed_optimizer
    return (tp_sharded + replicated) * _bytes_per_param(distributed, d.dp) + experts * _bytes_per_param(
        distributed, d.edp
    )


def activation_bytes(d: Derived) -> float:
    m = d.model
    s, b, h, p, t = m.seq_length, d.micro_batch_size, m.hidden_size, d.pp, d.tp
    layers = m.num_layers + d.mtp_num_layers
    v = d.padded_vocab_size
    sp_selective = d.sequence_parallel and m.recompute_granularity == "selective"
    if sp_selective:
        act = s * b * h * (18 + 4 * d.ffn_hidden_size / h) * layers
    else:
        act = s * b * h * (10 + 24 / t) * layers
    act += 8 * s * b * p + s * b * h * p
    if d.vpp > 1:
        act *= 1 + (p - 1) / (p * d.vpp)
    elif p > 1:
        act *= min(1.0, d.num_microbatches / p)
    if sp_selective:
        if p == 1:
            act += 4 * s * b * h * (1 + v / h)
        return act / t
    if p == 1:
        act += 2 * (s * b * v / t + s * b * h)
    return act * 1.05


def megatron_lm_estimate(d: Derived) -> float:
    """Megatron-LM's total (weights + optimizer + activations), in bytes."""
    return weight_and_optimizer_bytes(d) + activation_bytes(d)
