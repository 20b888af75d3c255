"""Parameter counts per module, as Megatron-Core builds them.

Every count comes in two views: the global number (what a model card quotes) and the number one
tensor-parallel rank holds. Parameters fall into three buckets that shard differently:

- ``dense``: attention, dense MLP and shared experts, split over TP;
- ``replicated``: norms, routers and the (full-size) biases of row-parallel linears, held whole on
  every TP rank;
- ``expert``: routed experts, split over EP x ETP and sharded by the optimizer over expert-DP.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.config.derived import Chunk, Derived
from memtune.config.schema import JobConfig


@dataclass(frozen=True)
class ParamCounts:
    dense: float = 0.0
    replicated: float = 0.0
    expert: float = 0.0

    def __add__(self, other: ParamCounts) -> ParamCounts:
        return ParamCounts(
            self.dense + other.dense, self.replicated + other.replicated, self.expert + other.expert
        )

    def scaled(self, k: float) -> ParamCounts:
        return ParamCounts(self.dense * k, self.replicated * k, self.expert * k)

    @property
    def total(self) -> float:
        return self.dense + self.replicated + self.expert


def _norm(d: Derived, width: int) -> int:
    return width * (2 if d.model.normalization == "LayerNorm" else 1)


def attention_params(d: Derived) -> ParamCounts:
    """Self-attention of one layer, global (not divided by TP)."""
    m, h = d.model, d.model.hidden_size
    a = m.num_attention_heads
    if m.multi_latent_attention:
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        if m.q_lora_rank is None:
            q_dense, q_repl = h * a * qk, 0
        else:
            q_dense = m.q_lora_rank * a * qk
            q_repl = h * m.q_lora_rank + _norm(d, m.q_lora_rank)
        kv_repl = h * (m.kv_lora_rank + m.qk_pos_emb_head_dim) + _norm(d, m.kv_lora_rank)
        kv_dense = m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim)
        proj = a * m.v_head_dim * h
        bias = h if m.add_bias_linear else 0
        return ParamCounts(dense=q_dense + kv_dense + proj, replicated=q_repl + kv_repl + bias)
    kv = d.kv_channels
    g = d.num_query_groups
    qkv = (a + 2 * g) * kv * h
    qkv_bias = (a + 2 * g) * kv if (m.add_bias_linear or m.add_qkv_bias) else 0
    proj = a * kv * h
    proj_bias = h if m.add_bias_linear else 0
    qk_norm = 2 * _norm(d, kv) if m.qk_layernorm else 0
    return ParamCounts(dense=qkv + qkv_bias + proj, replicated=proj_bias + qk_norm)


def mlp_params(d: Derived, ffn: int) -> ParamCounts:
    """A dense (gated or plain) MLP of width ``ffn``, global."""
    h, bias = d.model.hidden_size, d.model.add_bias_linear
    fc1 = d.fc1_width_factor * ffn * (h + (1 if bias else 0))
    fc2 = ffn * h
    return ParamCounts(dense=fc1 + fc2, replicated=h if bias else 0)


def moe_params(d: Derived) -> ParamCounts:
    """An MoE layer: router, routed experts, shared experts."""
    m, h = d.model, d.model.hidden_size
    experts = mlp_params(d, d.moe_ffn_hidden_size)
    routed = experts.total * d.num_experts
    shared = (
        mlp_params(d, m.moe_shared_expert_intermediate_size)
        if m.moe_shared_expert_intermediate_size
        else ParamCounts()
    )
    router = h * d.num_experts
    return ParamCounts(dense=shared.dense, replicated=shared.replicated + router, expert=routed)


def layer_params(d: Derived, is_moe: bool) -> ParamCounts:
    h = d.model.hidden_size
    norms = ParamCounts(replicated=2 * _norm(d, h))
    ffn = moe_params(d) if is_moe else mlp_params(d, d.ffn_hidden_size)
    return attention_params(d) + ffn + norms


def mtp_layer_params(d: Derived) -> ParamCounts:
    """One multi-token-prediction layer: two norms, the 2h->h projection and a decoder layer."""
    h = d.model.hidden_size
    extra = ParamCounts(dense=2 * h * h, replicated=2 * _norm(d, h) + _norm(d, h))
    return extra + layer_params(d, d.moe_layer_pattern[-1])


def embedding_params(d: Derived, vocab: int) -> int:
    h = d.model.hidden_size
    positions = d.model.seq_length * h if d.model.position_embedding_type == "learned_absolute" else 0
    return vocab * h + positions


def total_parameters(job: JobConfig, pad_vocab: bool = False) -> int:
    """The model's global parameter count (a model card's figure when ``pad_vocab`` is False)."""
    from memtune.config.derived import derive

    d = derive(job)
    vocab = d.padded_vocab_size if pad_vocab else d.model.vocab_size
    layers = sum((layer_params(d, moe) for moe in d.moe_layer_pattern), ParamCounts())
    mtp = mtp_layer_params(d).scaled(d.mtp_num_layers) if d.mtp_num_layers else ParamCounts()
    outputs = 1 if d.model.share_embeddings_and_output_weights else 2
    final_norm = _norm(d, d.model.hidden_size)
    return round(
        layers.total
        + mtp.total
        + final_norm
        + embedding_params(d, vocab)
        + (outputs - 1) * vocab * d.model.hidden_size
    )


def _tp_local(d: Derived, counts: ParamCounts) -> ParamCounts:
    return ParamCounts(
        dense=counts.dense / d.tp,
        replicated=counts.replicated,
        expert=counts.expert / (d.ep * d.etp),
    )


def fp8_linear_weights(d: Derived, is_moe: bool) -> tuple[float, float]:
    """What one TP rank holds of a layer's TP-split and expert linears, the ones Transformer
    Engine runs in FP8 (norms, routers and biases are not quantized): (attention, MLP or MoE)."""
    ffn = moe_params(d) if is_moe else mlp_params(d, d.ffn_hidden_size)
    attention, mlp = _tp_local(d, attention_params(d)), _tp_local(d, ffn)
    return attention.dense, mlp.dense + mlp.expert


def chunk_transformer_layer_params(d: Derived, chunk: Chunk) -> ParamCounts:
    """What one TP rank holds inside the chunk's transformer layers (each MTP layer wraps one):
    Megatron-FSDP's units under ``optim_grads_params``."""
    layers = [layer_params(d, d.moe_layer_pattern[i]) for i in chunk.layers]
    layers += [layer_params(d, d.moe_layer_pattern[-1])] * chunk.mtp_layers
    return _tp_local(d, sum(layers, ParamCounts()))


def chunk_params(d: Derived, chunk: Chunk) -> ParamCounts:
    """What one TP rank of one model chunk holds, by bucket."""
    h = d.model.hidden_size
    counts = sum((layer_params(d, d.moe_layer_pattern[i]) for i in chunk.layers), ParamCounts())
    if chunk.mtp_layers:
        counts = counts + mtp_layer_params(d).scaled(chunk.mtp_layers)
    local = _tp_local(d, counts)
    vocab_rows = d.padded_vocab_size * h / d.tp
    # Multi-token prediction embeds the shifted tokens on the last stage, so a stage that runs
    # it builds its own embedding copy even without pre_process (tied or not).
    if chunk.has_embedding or chunk.mtp_layers:
        positions = embedding_params(d, 0)
        local = local + ParamCounts(dense=vocab_rows, replicated=positions)
    if chunk.has_output:
        local = local + ParamCounts(replicated=_norm(d, h))
        # With PP > 1 a tied output layer still needs its own copy of the embedding on the last stage.
        if not d.model.share_embeddings_and_output_weights or not chunk.has_embedding:
            local = local + ParamCounts(dense=vocab_rows)
    return local


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor one TP rank holds: what the optimizer walks tensor by tensor."""

    numel: float
    decayed: bool  # in the weight-decay group (matrices); norms and biases are not
    expert: bool  # a routed expert's, kept by the expert optimizer


def _dense(numel: float, decayed: bool = True) -> ParamTensor:
    return ParamTensor(numel, decayed, False)


def _attention_tensors(d: Derived) -> list[ParamTensor]:
    """Self-attention's tensors in registration order: the output projection before the
    input projections (``Attention`` builds ``linear_proj`` first), then the q/k norms."""
    m, h, t = d.model, d.model.hidden_size, d.tp
    a = m.num_attention_heads
    bias = m.add_bias_linear
    if m.multi_latent_attention:
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        tensors = [_dense(a * m.v_head_dim * h / t)] + ([_dense(h, False)] if bias else [])
        if m.q_lora_rank is None:
            tensors.append(_dense(h * a * qk / t))
        else:
            tensors += [
                _dense(h * m.q_lora_rank),
                _dense(m.q_lora_rank * a * qk / t),
                _dense(_norm(d, m.q_lora_rank), False),
            ]
        tensors += [
            _dense(h * (m.kv_lora_rank + m.qk_pos_emb_head_dim)),
            _dense(m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim) / t),
            _dense(_norm(d, m.kv_lora_rank), False),
        ]
        return tensors
    kv, g = d.kv_channels, d.num_query_groups
    tensors = [_dense(a * kv * h / t)] + ([_dense(h, False)] if bias else [])
    tensors.append(_dense((a + 2 * g) * kv * h / t))
    if bias or m.add_qkv_bias:
        tensors.append(_dense((a + 2 * g) * kv / t, False))
    if m.qk_layernorm:
        tensors += [_dense(_norm(d, kv), False), _dense(_norm(d, kv), False)]
    return tensors


def _mlp_tensors(d: Derived, ffn: int, divisor: int, expert: bool) -> list[ParamTensor]:
    h, bias = d.model.hidden_size, d.model.add_bias_linear
    fc1 = d.fc1_width_factor * ffn
    tensors = [ParamTensor(fc1 * h / divisor, True, expert)]
    if bias:
        tensors.append(ParamTensor(fc1 / divisor, False, expert))
    tensors.append(ParamTensor(ffn * h / divisor, True, expert))
    if bias:
        tensors.append(ParamTensor(h, False, expert))
    return tensors


def _layer_tensors(d: Derived, is_moe: bool) -> list[ParamTensor]:
    h = d.model.hidden_size
    tensors = [_dense(_norm(d, h), False), *_attention_tensors(d), _dense(_norm(d, h), False)]
    if not is_moe:
        return tensors + _mlp_tensors(d, d.ffn_hidden_size, d.tp, False)
    tensors.append(_dense(h * d.num_experts))  # the router
    local_experts = d.local_experts
    expert = _mlp_tensors(d, d.moe_ffn_hidden_size, d.etp, True)
    if d.model.moe_grouped_gemm:
        tensors += [ParamTensor(t.numel * local_experts, t.decayed, True) for t in expert]
    else:
        tensors += expert * local_experts
    shared = d.model.moe_shared_expert_intermediate_size
    if shared:
        tensors += _mlp_tensors(d, shared, d.tp, False)
    return tensors


def chunk_param_tensors(d: Derived, chunk: Chunk) -> list[ParamTensor]:
    """The tensors of :func:`chunk_params` one by one, in the order ``named_parameters`` gives
    them (GPTModel registers the embedding, the decoder layers, the final norm, the MTP block
    and then the output layer). The HybridDeviceOptimizer offloads whole tensors in this order."""
    h = d.model.hidden_size
    vocab_rows = d.padded_vocab_size * h / d.tp
    tensors: list[ParamTensor] = []
    if chunk.has_embedding:
        tensors.append(_dense(vocab_rows))
        if embedding_params(d, 0):
            tensors.append(_dense(embedding_params(d, 0)))
    for i in chunk.layers:
        tensors += _layer_tensors(d, d.moe_layer_pattern[i])
    if chunk.has_output:
        tensors.append(_dense(_norm(d, h), False))
    if chunk.mtp_layers and not chunk.has_embedding:
        # Multi-token prediction's own embedding (see chunk_params).
        tensors.append(_dense(vocab_rows))
        if embedding_params(d, 0):
            tensors.append(_dense(embedding_params(d, 0)))
    for _ in range(chunk.mtp_layers):
        tensors += [_dense(_norm(d, h), False), _dense(_norm(d, h), False), _dense(2 * h * h / d.tp)]
        tensors += _layer_tensors(d, d.moe_layer_pattern[-1])
        tensors.append(_dense(_norm(d, h), False))
    if chunk.has_output and (not d.model.share_embeddings_and_output_weights or not chunk.has_embedding):
        tensors.append(_dense(vocab_rows))
    return tensors
