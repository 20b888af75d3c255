"""What each module keeps alive for backward, for one microbatch on one rank.

Each function returns a :class:`Saved`: the tensors autograd holds until backward (by name, in
bytes) and the extra working memory the module needs at its worst moment in forward and in
backward, on top of what it saves. The figures follow Megatron-Core's modules tensor by tensor,
each under a name ``memtune estimate --explain`` shows.

Shapes: ``T`` tokens per microbatch on this context-parallel rank (``seq / cp * mbs``), hidden
``h``, TP size ``t``. Under sequence parallelism the tensors outside the TP regions (norms,
residuals) are split along the sequence, so they carry ``T / t`` tokens. Activations are
``Dims.activation_bytes`` wide (``Derived.activation_dtype``: 2 bytes in bf16 and fp16 jobs, 4
in fp32 jobs); norm statistics, the softmax's log-sum-exp, the loss's softmax and the router's
probabilities are fp32 whatever the job trains in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.estimate.flavour import Flavour
from memtune.estimate.params import fp8_linear_weights
from memtune.estimate.te import FP8_WEIGHT_COPY_BYTES

BF16 = 2
FP32 = 4
BOOL = 1
INT64 = 8


@dataclass
class Saved:
    """Tensors kept for backward (name -> bytes) and the working set beyond them."""

    tensors: dict[str, float] = field(default_factory=dict)
    fwd_transient: float = 0.0
    bwd_transient: float = 0.0

    @property
    def total(self) -> float:
        return sum(self.tensors.values())

    def add(self, name: str, nbytes: float) -> None:
        if nbytes:
            self.tensors[name] = self.tensors.get(name, 0.0) + nbytes

    def merge(self, other: Saved, prefix: str = "", times: int = 1) -> None:
        """Add ``other``'s tensors (``times`` copies of them) under ``prefix``; keep the larger transients."""
        tensors = self.tensors
        for name, nbytes in other.tensors.items():
            if nbytes:
                key = prefix + name
                tensors[key] = tensors.get(key, 0.0) + times * nbytes
        self.fwd_transient = max(self.fwd_transient, other.fwd_transient)
        self.bwd_transient = max(self.bwd_transient, other.bwd_transient)


@dataclass(frozen=True)
class Dims:
    """Sizes of one microbatch on one rank."""

    seq: int  # sequence length on this CP rank
    mbs: int
    hidden: int
    tp: int
    sp: bool
    activation_bytes: int  # bytes per element of the activations (Derived.activation_dtype)

    @property
    def tokens(self) -> int:
        return self.seq * self.mbs

    @property
    def residual_tokens(self) -> float:
        """Tokens in tensors outside TP regions: split over TP under sequence parallelism."""
        return self.tokens / self.tp if self.sp else self.tokens


def dims_of(d: Derived) -> Dims:
    return Dims(
        seq=d.model.seq_length // d.cp,
        mbs=d.micro_batch_size,
        hidden=d.model.hidden_size,
        tp=d.tp,
        sp=d.sequence_parallel,
        activation_bytes=DTYPE_BYTES[d.activation_dtype],
    )


def norm(d: Derived, x: Dims, name: str) -> Saved:
    """A norm saves its input plus fp32 statistics per row (mean and rstd for LayerNorm)."""
    stats = 2 if d.model.normalization == "LayerNorm" else 1
    s = Saved()
    s.add(f"{name}.input", x.activation_bytes * x.residual_tokens * x.hidden)
    s.add(f"{name}.stats", FP32 * stats * x.residual_tokens)
    return s


def dropout_mask(p: float, numel: float) -> float:
    """torch's dropout returns its input untouched at p == 0; otherwise it keeps a bool mask."""
    return BOOL * numel if p > 0 else 0.0


def attention(d: Derived, x: Dims, fl: Flavour, recompute_core: bool) -> Saved:
    """Self-attention from the QKV projection to the output projection's input."""
    m = d.model
    if m.multi_latent_attention:
        return mla_attention(d, x, fl, recompute_core)
    s = Saved()
    t, T = x.tp, x.tokens
    heads = m.num_attention_heads / t
    groups = d.query_groups_per_tp_rank
    kv = d.kv_channels
    qkv_width = (heads + 2 * groups) * kv
    # The QKV projection keeps its input: the local shard under SP (it re-gathers in backward).
    s.add("linear_qkv.input", _linear_input_bytes(x, fl) * x.residual_tokens * x.hidden)
    if m.qk_layernorm:
        # The query is reshaped (copied) out of the QKV output before its norm; the key norm
        # reads a view of that output, which v keeps alive anyway.
        s.add("q_layernorm.input", x.activation_bytes * T * heads * kv)
    q = x.activation_bytes * T * heads * kv
    if fl.flash_attention:
        if recompute_core:
            # The checkpoint keeps its inputs: q, k (after RoPE) and v, a view of the QKV output.
            s.add("core_attention.checkpoint.q", q)
            s.add("core_attention.checkpoint.k", x.activation_bytes * T * groups * kv)
            s.add("core_attention.checkpoint.qkv", x.activation_bytes * T * qkv_width)
        else:
            # q and k are fresh tensors after RoPE; v is still a view of the QKV projection's
            # output, so where the kernel keeps v as given (PyTorch's SDPA) all of that output
            # stays alive. TE's fused attention makes its inputs contiguous and keeps a compact v.
            if fl.transformer_engine:
                # FP8 attention keeps FP8 copies of q, k and v (Derived.attention_saved_input_bytes)
                width = d.attention_saved_input_bytes
                s.add("core_attention.q", width * T * heads * kv)
                s.add("core_attention.k", width * T * groups * kv)
                s.add("core_attention.v", width * T * groups * kv)
                # the output, where linear_proj keeps a copy of its own (FP8) or none in FP8
                s.add("core_attention.output", d.attention_saved_output_bytes * T * heads * kv)
            else:
                s.add("core_attention.q", q)
                s.add("core_attention.k", x.activation_bytes * T * groups * kv)
                s.add("core_attention.qkv", x.activation_bytes * T * qkv_width)
            s.add("core_attention.softmax_lse", FP32 * T * heads)
            if not fl.transformer_engine and x.mbs > 1:
                # Flash kernels write their output as [b, s, heads, dim]. With one sequence per
                # microbatch that already is linear_proj's [s, b, heads * dim] input and it keeps
                # a view; with more, the reshape copies. TE always hands over a view.
                s.add("core_attention.output", x.activation_bytes * T * heads * kv)
    else:
        scores = x.mbs * heads * x.seq * x.seq
        path = unfused_softmax(d)
        if recompute_core:
            s.add("core_attention.checkpoint.q", q)
            s.add("core_attention.checkpoint.k", x.activation_bytes * T * groups * kv)
            s.add("core_attention.checkpoint.qkv", x.activation_bytes * T * qkv_width)
            # The replay rebuilds the scores with grad (what the unfused path keeps) and then
            # runs their backward, so the working set is the kept set plus its backward buffers.
            s.fwd_transient = (sum(path.kept.values()) + path.fwd_extra) * scores
            s.bwd_transient = (sum(path.kept.values()) + path.bwd_extra) * scores
        else:
            expanded = heads / groups > 1
            # Megatron's DotProductAttention repeats K and V up to the query heads for GQA; for
            # MHA V stays a view of the QKV output and keeps all of it alive.
            s.add("core_attention.q", q)
            s.add("core_attention.k", q)
            s.add(
                "core_attention.v" if expanded else "core_attention.qkv",
                q if expanded else x.activation_bytes * T * qkv_width,
            )
            for name, per_score in path.kept.items():
                s.add(f"core_attention.{name}", per_score * scores)
            if path.builds_causal_mask:
                s.add("core_attention.causal_mask", BOOL * x.seq * x.seq)
            s.fwd_transient = path.fwd_extra * scores
            s.bwd_transient = path.bwd_extra * scores
    s.add("linear_proj.input", _linear_input_bytes(x, fl) * T * heads * kv)
    return s


@dataclass(frozen=True)
class SoftmaxPath:
    """Bytes per attention-score element of the unfused attention's softmax: what it keeps for
    backward (by name) and the working set beyond that in forward and in backward."""

    kept: dict[str, int]
    fwd_extra: int
    bwd_extra: int
    builds_causal_mask: bool


def unfused_softmax(d: Derived) -> SoftmaxPath:
    """The three ways Megatron's ``FusedScaleMaskSoftmax`` runs (``Derived.fused_softmax_kernel``,
    ``Derived.softmax_dtype``), each followed by attention dropout when it is on.

    - Fused kernel: one half-precision output, kept (its backward works in place on the incoming
      gradient). Forward holds the bf16 scores beside it; backward the probabilities' gradient.
    - Torch softmax in fp32 on half-precision scores: the fp32 copy of the scores, the masked
      copy, the fp32 softmax (kept) and its bf16 cast (kept as the probabilities). Allocator
      traces of Megatron's DotProductAttention (H200, torch 2.11) show the backward peak in the
      softmax backward: three fp32 score-sized buffers beside the kept fp32 softmax.
    - Torch softmax in the scores' own dtype: the masked copy and the softmax output (kept), no
      cast (``forward_torch_softmax`` casts only half-precision input with ``softmax_in_fp32``,
      megatron-core 0.19.2 ``fusions/fused_softmax.py``). That is half precision with
      ``attention_softmax_in_fp32`` off, and every fp32 job, where the same buffers are 4 bytes
      wide. Its working sets are fitted in half precision on the tune runs
      ``def-l8w-tp4-msf-s8k-softmax-bf16`` and ``def-gpt-tp2-softmax-bf16``
      (benchmarks/measured/) and scale with the element size.
    """
    dropout = d.model.attention_dropout > 0
    width = DTYPE_BYTES[d.activation_dtype]
    if d.fused_softmax_kernel:
        kept, (fwd, bwd) = {"softmax_output": BF16}, ((1, 1) if dropout else (2, 2))
    elif d.softmax_dtype != d.activation_dtype:
        kept, (fwd, bwd) = {"softmax_fp32": FP32, "probs_bf16": BF16}, ((5, 9) if dropout else (6, 10))
    else:
        half_units = (3, 3) if dropout else (4, 6)  # in units of a 2-byte element
        kept = {"softmax_output": width}
        fwd, bwd = (units * width // BF16 for units in half_units)
    if dropout:
        # Dropout keeps its mask and output; the bf16 probabilities of the fp32 path are then
        # only its input and are freed once the output exists.
        kept.pop("probs_bf16", None)
        kept.update({"dropout_mask": BOOL, "dropout_output": width})
    return SoftmaxPath(kept, fwd, bwd, builds_causal_mask=not d.fused_softmax_kernel)


def _linear_input_bytes(x: Dims, fl: Flavour) -> int:
    """TE's FP8 GEMMs keep their inputs in FP8 for the weight gradient."""
    return 1 if fl.fp8_activations else x.activation_bytes


def mla_attention(d: Derived, x: Dims, fl: Flavour, recompute_core: bool) -> Saved:
    """Multi-latent attention: down projections (replicated), norms, up projections, core."""
    m = d.model
    s = Saved()
    t, T = x.tp, x.tokens
    heads = m.num_attention_heads / t
    qk = m.qk_head_dim + m.qk_pos_emb_head_dim
    s.add("linear_q_down_proj.input", x.activation_bytes * x.residual_tokens * x.hidden)
    if m.q_lora_rank is not None:
        s.add("q_layernorm.input", x.activation_bytes * T * m.q_lora_rank)
        s.add("linear_q_up_proj.input", x.activation_bytes * T * m.q_lora_rank)
    s.add("kv_layernorm.input", x.activation_bytes * T * m.kv_lora_rank)
    s.add("linear_kv_up_proj.input", x.activation_bytes * T * m.kv_lora_rank)
    up_outputs = x.activation_bytes * T * heads * qk + x.activation_bytes * T * heads * (
        m.qk_head_dim + m.v_head_dim
    )
    core = x.activation_bytes * T * heads * (2 * qk + m.v_head_dim)
    recompute_up = "mla_up_proj" in d.recompute_modules
    if not recompute_up:
        s.add("q_up.output", x.activation_bytes * T * heads * qk)
        s.add("kv_up.output", x.activation_bytes * T * heads * (m.qk_head_dim + m.v_head_dim))
    if recompute_core:
        s.add("core_attention.checkpoint.qkv", core)
    elif fl.flash_attention:
        s.add("core_attention.qkv", core)
        s.add("core_attention.output", x.activation_bytes * T * heads * m.v_head_dim)
        s.add("core_attention.softmax_lse", FP32 * T * heads)
    else:
        scores = x.mbs * heads * x.seq * x.seq
        path = unfused_softmax(d)
        s.add("core_attention.qkv", core)
        for name, per_score in path.kept.items():
            s.add(f"core_attention.{name}", per_score * scores)
        s.fwd_transient = path.fwd_extra * scores
        s.bwd_transient = path.bwd_extra * scores
    if recompute_up:
        _discard_recomputed_up_projection(s, core + up_outputs)
    s.add("linear_proj.input", x.activation_bytes * T * heads * m.v_head_dim)
    return s


def _discard_recomputed_up_projection(s: Saved, rematerialized: float) -> None:
    """Selective ``mla_up_proj`` recompute (megatron-core 0.19.2,
    ``transformer/multi_latent_attention.py``): the up projections and RoPE run inside a
    ``CheckpointWithoutOutput`` under ``no_grad``, which keeps only their inputs (the compressed
    q and kv, kept as the up projections' inputs anyway). Once the core attention has run,
    ``discard_output_and_register_recompute`` frees the storage of its outputs, the query, key
    and value, which the core attention (or its own checkpoint) holds for backward. A hook on
    the core attention's output gradient recomputes them, with grad this time, so in the
    attention's backward q, k, v and the up projections' outputs exist again."""
    for name in ("core_attention.qkv", "core_attention.checkpoint.qkv"):
        s.tensors.pop(name, None)
    s.bwd_transient += rematerialized


def mlp(
    d: Derived, x: Dims, fl: Flavour, ffn: int, tokens: float, width_split: int, name: str, gathers_sp: bool
) -> Saved:
    """A dense MLP applied to ``tokens`` rows whose width is split ``width_split`` ways.

    The input is counted by the caller (it is the norm's output, shared with other readers).
    Local GLU keeps the fc1 output (whole, through the view its gate half holds), the activated
    gate, the linear half plus its offset and the product that fc2 keeps; the fused bias-GLU
    kernels keep only the fc1 output and fc2's input.
    """
    s = Saved()
    name = f"{name}." if name else ""
    f = ffn / width_split
    gated = d.model.gated_linear_unit
    fc1_out = x.activation_bytes * tokens * f * (2 if gated else 1)
    s.add(f"{name}fc1_output", fc1_out)
    if gated and not fl.fused_activation:
        s.add(f"{name}activation_gate", x.activation_bytes * tokens * f)
        s.add(f"{name}activation_linear", x.activation_bytes * tokens * f)
    elif not gated and d.model.activation_func == "squared_relu":
        s.add(f"{name}relu_output", x.activation_bytes * tokens * f)
    s.add(f"{name}linear_fc2.input", _linear_input_bytes(x, fl) * tokens * f)
    # Backward peaks in fc2's backward, before it frees anything: the gradient of fc2's input,
    # fc2's weight gradient and, under SP, the output gradient gathered to the full sequence.
    # Gradient-accumulation fusion writes the weight gradient straight into the main gradient,
    # yet the runs ``def-*-gaf*`` peak exactly as their unfused twins, so it changes nothing here.
    gathered = x.activation_bytes * x.tokens * x.hidden if gathers_sp else 0.0
    s.bwd_transient = x.activation_bytes * tokens * f + x.activation_bytes * x.hidden * f + gathered
    return s


def replayed(module: Saved, kept: Saved) -> Saved:
    """A checkpointed module: it keeps only ``kept`` (its input); backward replays it, so for a
    moment its whole kept set and its backward working set exist again."""
    kept.fwd_transient = max(module.fwd_transient, 0.0)
    kept.bwd_transient = module.total - kept.total + module.bwd_transient
    return kept


def dense_mlp(d: Derived, x: Dims, fl: Flavour) -> Saved:
    s = Saved()
    s.add("linear_fc1.input", _linear_input_bytes(x, fl) * x.residual_tokens * x.hidden)
    full = Saved()
    full.merge(s)
    full.merge(mlp(d, x, fl, d.ffn_hidden_size, x.tokens, x.tp, "", gathers_sp=x.sp))
    if "mlp" in d.recompute_modules:
        return replayed(full, s)
    return full


def moe(d: Derived, x: Dims, fl: Flavour, imbalance: float) -> Saved:
    """Router, all-to-all dispatch, routed experts (SequentialMLP) and shared experts."""
    kept = Saved()
    kept.add("router.input", x.activation_bytes * x.residual_tokens * x.hidden)
    full = Saved()
    full.merge(kept)
    _add_moe_body(d, x, fl, imbalance, full)
    return replayed(full, kept) if "moe" in d.recompute_modules else full


def _add_moe_body(d: Derived, x: Dims, fl: Flavour, imbalance: float, s: Saved) -> None:
    m = d.model
    local = x.residual_tokens
    experts = d.num_experts
    k = m.moe_router_topk
    # Router: gating logits, fp32 scores, the dense probability map and the routing map.
    s.add("router.scores", local * experts * (x.activation_bytes + FP32 + FP32 + BOOL))
    # Tokens reach this rank's experts from every EP peer and, with ETP > 1, every expert-TP peer.
    # A capacity factor drops tokens beyond that multiple of the balanced share, and with
    # padding every expert gets exactly that many (Megatron's router token dropping).
    share = imbalance
    if m.moe_expert_capacity_factor is not None:
        capacity = m.moe_expert_capacity_factor
        share = capacity if m.moe_pad_expert_input_to_capacity else min(imbalance, capacity)
    routed = local * k * d.etp * share
    s.add("dispatcher.indices", INT64 * 2 * local * k)
    s.add("experts.input", x.activation_bytes * routed * x.hidden)
    expert = mlp(d, x, fl, d.moe_ffn_hidden_size, routed, d.etp, "experts", gathers_sp=False)
    # Router probabilities scale the activation in fp32 before fc2: the unscaled product stays.
    expert.add("experts.probs_scaled_input", x.activation_bytes * routed * d.moe_ffn_hidden_size / d.etp)
    # The scaled product is computed in fp32 before fc2's bf16 copy exists.
    expert.fwd_transient = x.activation_bytes * routed * d.moe_ffn_hidden_size / d.etp
    clamped = (
        x.activation_bytes * routed * 2 * d.moe_ffn_hidden_size / d.etp if d.experts_clamp_eagerly else 0.0
    )
    if "moe_act" in d.recompute_modules:
        # Output-discarding recompute: the activation's output (fc2's input) is dropped after
        # fc2 runs and rebuilt from the kept fc1 output in backward (the clamped copy with it).
        for name in ("experts.linear_fc2.input", "experts.probs_scaled_input"):
            expert.tensors.pop(name, None)
        expert.bwd_transient += clamped
    elif clamped:
        # GPT-OSS's eager clamps keep the fc1 output and the fused kernel their clamped copy
        expert.add("experts.clamped_fc1_output", clamped)
    s.merge(expert)
    if m.moe_shared_expert_intermediate_size:
        shared = mlp(
            d, x, fl, m.moe_shared_expert_intermediate_size, x.tokens, x.tp, "shared_experts", gathers_sp=x.sp
        )
        s.merge(replayed(shared, Saved()) if "shared_experts" in d.recompute_modules else shared)
    # Permutation, all-to-all and sort each produce a fresh copy of the routed tokens.
    s.fwd_transient = max(s.fwd_transient, 2 * x.activation_bytes * routed * x.hidden)
    s.bwd_transient = max(s.bwd_transient, 2 * x.activation_bytes * routed * x.hidden)


def transformer_layer(d: Derived, x: Dims, fl: Flavour, is_moe: bool, imbalance: float) -> Saved:
    """One decoder layer, everything it keeps, with selective recompute applied."""
    m = d.model
    s = Saved()
    recompute_ln = "layernorm" in d.recompute_modules
    s.merge(norm(d, x, "input_layernorm"))
    att = attention(d, x, fl, recompute_core="core_attn" in d.recompute_modules)
    if recompute_ln:
        att.tensors.pop("linear_qkv.input", None)
    s.merge(att, "self_attention.")
    s.add("self_attention.bda.dropout_mask", dropout_mask(m.hidden_dropout, x.residual_tokens * x.hidden))
    s.merge(norm(d, x, "pre_mlp_layernorm"))
    ffn = moe(d, x, fl, imbalance) if is_moe else dense_mlp(d, x, fl)
    if recompute_ln:
        ffn.tensors.pop("linear_fc1.input", None)
        ffn.tensors.pop("router.input", None)
    # The attention's working set exists while the MLP's kept tensors do not: not yet in
    # forward, no longer in backward.
    s.fwd_transient = max(0.0, s.fwd_transient - ffn.total)
    s.bwd_transient = max(0.0, s.bwd_transient - ffn.total)
    s.merge(ffn, "mlp.")
    s.add("mlp.bda.dropout_mask", dropout_mask(m.hidden_dropout, x.residual_tokens * x.hidden))
    if d.fp8_weight_copies == "per_microbatch":
        add_fp8_weight_copies(d, s, is_moe)
    return s


def add_fp8_weight_copies(d: Derived, s: Saved, is_moe: bool) -> None:
    """The FP8 weight copies a layer's forward saves for its backward when Transformer Engine
    quantizes the weights afresh every microbatch (``Derived.fp8_weight_copies``): the row-wise
    data and the column-wise copy, as the run-long cache holds them otherwise. A recomputed MLP
    runs its forward without autograd and saves none; the attention's up-projections under
    ``mla_up_proj`` recompute are still counted (theirs are made again in the backward), as are
    shared experts under ``shared_experts`` recompute, and
    layer-wise activation offload counts them among what it moves, though Transformer Engine
    keeps them on the device (``mark_not_offload``)."""
    attention, mlp = fp8_linear_weights(d, is_moe)
    s.add("self_attention.fp8_weight_copies", FP8_WEIGHT_COPY_BYTES * attention)
    if ("moe" if is_moe else "mlp") not in d.recompute_modules:
        s.add("mlp.fp8_weight_copies", FP8_WEIGHT_COPY_BYTES * mlp)


def layer_input(x: Dims) -> float:
    """A layer's input: what full recompute keeps per checkpointed layer or chunk."""
    return x.activation_bytes * x.residual_tokens * x.hidden


def embedding(d: Derived, x: Dims) -> Saved:
    """Word embedding lookup on the first stage: token ids, masks and the dropout mask."""
    s = Saved()
    s.add("embedding.token_ids", INT64 * x.tokens * (2 if d.tp > 1 else 1))
    s.add("embedding.dropout_mask", dropout_mask(d.model.hidden_dropout, x.residual_tokens * x.hidden))
    # The lookup output and its [s, b, h] transpose exist together before the TP reduction.
    s.fwd_transient = 2 * x.activation_bytes * x.tokens * x.hidden
    return s


def output_and_loss(d: Derived, x: Dims) -> Saved:
    """Final norm, output projection and vocab-parallel cross entropy on the last stage.

    ``Derived.cross_entropy`` picks the implementation:

    - ``unfused``: turns the bf16 logits into one fp32 tensor (the logits themselves in an fp32
      job), works on it in place and keeps it (as the softmax) for backward. In forward the
      bf16 logits coexist with it; in backward the bf16 gradient of the logits, the output
      weight's gradient and the input's gradient do.
    - ``native``: the same steps compiled by ``torch.compile``, which turns the in-place updates
      of its inputs into fresh outputs, so forward holds one more fp32 copy of the logits
      (measured: 4 bytes per logit more than ``unfused`` on four tune runs ``def-*-ce*``).
    - ``te``: Transformer Engine's kernel computes the loss and writes the gradient into the
      bf16 logits in forward, and keeps only them (from its source; not measurable here).
    """
    s = Saved()
    vocab = d.padded_vocab_size / d.tp
    logits = x.tokens * vocab
    s.merge(norm(d, x, "final_layernorm"))
    s.add("output_layer.input", x.activation_bytes * x.residual_tokens * x.hidden)
    weight_grad = x.activation_bytes * vocab * x.hidden
    input_grad = x.activation_bytes * x.tokens * x.hidden
    if d.cross_entropy == "te":
        s.add("loss.logits_grad_bf16", x.activation_bytes * logits)
        s.bwd_transient = weight_grad + input_grad
        return s
    s.add("loss.softmax_fp32", FP32 * logits)
    # In an fp32 job ``.float()`` returns the logits themselves: no second copy exists, and the
    # gradient computed in place needs no cast back (megatron-core 0.19.2,
    # ``tensor_parallel/cross_entropy.py``).
    half_logits = x.activation_bytes * logits if x.activation_bytes != FP32 else 0.0
    s.fwd_transient = half_logits + (FP32 * logits if d.cross_entropy == "native" else 0.0)
    # Backward turns the kept softmax into the gradient in place, casts it to bf16 (both exist
    # for a moment), then frees the fp32 one before the output layer's weight gradient appears.
    logits_grad = half_logits or FP32 * logits
    output_layer = logits_grad + weight_grad + input_grad - FP32 * logits
    s.bwd_transient = max(half_logits, output_layer)
    return s


def mtp_extra(d: Derived, x: Dims) -> Saved:
    """What one multi-token-prediction layer keeps beyond its decoder layer.

    It embeds the tokens shifted by one (its own lookup, on the last stage too), normalises that
    embedding and the incoming hidden states, projects their concatenation (2h) back to h, and
    ends in its own final norm, a second pass through the shared output layer and a second fp32
    cross entropy over the whole vocabulary shard, kept for backward like the main loss.
    """
    s = Saved()
    s.merge(embedding(d, x), "mtp.")
    s.merge(norm(d, x, "mtp.enorm"))
    s.merge(norm(d, x, "mtp.hnorm"))
    s.add("mtp.eh_proj.input", 2 * x.activation_bytes * x.residual_tokens * x.hidden)
    s.merge(output_and_loss(d, x), "mtp.")
    return s
