"""The training-job schema.

Key names and defaults are Megatron-Core's (``TransformerConfig``, ``ModelParallelConfig``,
``OptimizerConfig``, ``DistributedDataParallelConfig``) and the sections follow the way a
Megatron-Bridge ``ConfigContainer`` dumps to YAML, so users can paste what they already have.
Values that Megatron derives from others (``ffn_hidden_size = 4 * hidden_size`` and so on)
stay ``None`` here; :mod:`memtune.config.derived` resolves them in one place.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
    model_validator,
)

from memtune import limits
from memtune.config.layout import layout_problems, parse_layout

# Integer fields are strict (``true`` is not 1, ``"8"`` is not 8) and bounded by plausibility
# limits far above any real job (memtune.limits), so a typo cannot make memtune build a
# per-layer table of 10**12 entries. Floats must be finite.
PositiveInt = Annotated[int, Strict(), Field(ge=1, le=limits.MAX_COUNT)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0, le=limits.MAX_COUNT)]
AnyInt = Annotated[int, Strict(), Field(ge=-limits.MAX_COUNT, le=limits.MAX_COUNT)]
LayerCount = Annotated[int, Strict(), Field(ge=1, le=limits.MAX_LAYERS)]
LayerCountOrZero = Annotated[int, Strict(), Field(ge=0, le=limits.MAX_LAYERS)]
LayerNumber = Annotated[int, Strict(), Field(ge=-limits.MAX_LAYERS, le=limits.MAX_LAYERS)]
Width = Annotated[int, Strict(), Field(ge=1, le=limits.MAX_WIDTH)]
HeadCount = Annotated[int, Strict(), Field(ge=1, le=limits.MAX_HEADS)]
VocabSize = Annotated[int, Strict(), Field(ge=1, le=limits.MAX_VOCAB)]
SeqLength = Annotated[int, Strict(), Field(ge=1, le=limits.MAX_SEQ_LENGTH)]
ParallelSize = Annotated[int, Strict(), Field(ge=1, le=limits.MAX_PARALLEL)]
BatchSize = Annotated[int, Strict(), Field(ge=1, le=limits.MAX_BATCH)]
FiniteFloat = Annotated[float, AllowInfNan(False)]

AttentionBackend = Literal["auto", "flash", "fused", "unfused", "local"]
TransformerImpl = Literal["transformer_engine", "local"]
Normalization = Literal["LayerNorm", "RMSNorm"]
ActivationFunc = Literal["gelu", "silu", "squared_relu", "quick_gelu", "relu"]
RecomputeGranularity = Literal["full", "selective"]
RecomputeMethod = Literal["uniform", "block"]
StateDtype = Literal["fp32", "fp16", "bf16", "fp8"]
LoraTarget = Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
TokenDispatcher = Literal["allgather", "alltoall", "flex"]
CudaGraphImpl = Literal["none", "local", "transformer_engine", "full_iteration"]
FsdpBufferDtype = Literal["fp32", "bf16", "fp16"]
ShardingStrategy = Literal["no_shard", "optim", "optim_grads", "optim_grads_params"]
CpCommType = Literal["p2p", "all_gather", "a2a", "a2a+p2p"]


class Section(BaseModel):
    # Each field's docstring is its description: docs/config.md is generated from them.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# The GEMMs Transformer Engine's userbuffer overlap configures by name (``initialize_ub``'s
# ``ub_cfgs``; Megatron-Bridge's ``TransformerLayerTPOverlapCfg`` fields), grouped by the collective
# beside them: the input-side all-gathers of the forward and of the output side's data gradient
# run by ring exchange only; the output side's forward reduce-scatter by ring exchange or pipelined
# chunks; the input side's data-gradient GEMM gathers its input (bulk) or, configured otherwise,
# reduce-scatters its output itself; the weight-gradient GEMM hides the bulk reduce-scatter.
UB_RING_ONLY = ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")
UB_REDUCE_SCATTER = ("proj_fprop", "fc2_fprop")
UB_DGRAD = ("qkv_dgrad", "fc1_dgrad")
UB_WGRAD = ("qkv_wgrad", "fc1_wgrad")
UbGemm = Literal[
    "qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad", "proj_fprop", "fc2_fprop",
    "qkv_dgrad", "fc1_dgrad", "qkv_wgrad", "fc1_wgrad",
]  # fmt: skip
UbMethod = Literal["ring_exchange", "pipeline", "bulk"]
UB_METHODS_ALLOWED: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(UB_RING_ONLY, ("ring_exchange",)),
    **dict.fromkeys(UB_REDUCE_SCATTER, ("ring_exchange", "pipeline")),
    **dict.fromkeys(UB_DGRAD, ("bulk", "ring_exchange", "pipeline")),
    **dict.fromkeys(UB_WGRAD, ("bulk",)),
}


class UserbufferGemmConfig(Section):
    """One GEMM's userbuffer overlap, over Transformer Engine's default for it."""

    method: UbMethod | None = None
    """ring_exchange (TP chunks, each beside one step of the ring), pipeline (num_splits chunks) or bulk (the whole collective beside the whole GEMM); unset: Transformer Engine's default for this GEMM."""
    num_sm: Annotated[int, Strict(), Field(ge=0, le=limits.MAX_UB_SMS)] | None = None
    """SMs the communication kernel takes (Transformer Engine's default: 1 for ring exchange, 16 otherwise; fewer than the GPU has)."""
    set_sm_margin: bool | None = None
    """The GEMM leaves num_sm SMs to the communication (default: on except for ring exchange)."""
    num_splits: PositiveInt | None = None
    """Chunks of a pipelined GEMM (default 4); ring exchange always splits in TP chunks."""


class ModelConfig(Section):
    """Architecture, parallel layout, recompute, offload, precision and implementation flavour."""

    # Architecture
    num_layers: LayerCount
    """Transformer decoder layers in the whole model (MTP layers not included)."""
    hidden_size: Width
    """Width of the residual stream."""
    num_attention_heads: HeadCount
    """Query heads per layer."""
    ffn_hidden_size: Width | None = None
    """Width of the MLP's intermediate layer; Megatron's default is 4 x hidden_size."""
    num_query_groups: HeadCount | None = None
    """Key/value heads (grouped-query attention); default: one per query head."""
    kv_channels: Width | None = None
    """Width of one attention head; default hidden_size / num_attention_heads."""
    vocab_size: VocabSize
    """Tokenizer vocabulary before Megatron pads it to make_vocab_size_divisible_by x TP."""
    make_vocab_size_divisible_by: VocabSize = 128
    """The padded vocabulary is a multiple of this times TP."""
    seq_length: SeqLength = 1024
    """Tokens per sample."""
    gated_linear_unit: bool = False
    """Gated MLP (SwiGLU with silu): linear_fc1 produces two halves."""
    activation_func: ActivationFunc = "gelu"
    """The MLP's activation."""
    normalization: Normalization = "LayerNorm"
    """LayerNorm or RMSNorm."""
    share_embeddings_and_output_weights: bool = True
    """Tie the output layer to the input embedding (with PP > 1 the last stage keeps a copy)."""
    qk_layernorm: bool = False
    """Normalise queries and keys per head."""
    test_mode: bool = False
    """Megatron-Core's real-time consistency tests: with qk_layernorm, each attention forward
    all-gathers the Q/K norms' parameters over the DP and TP groups and compares them on the host."""
    add_bias_linear: bool = True
    """Biases on the linear layers."""
    add_qkv_bias: bool = False
    """Bias on linear_qkv only (Qwen2-style)."""
    hidden_dropout: float = Field(0.1, ge=0.0, le=1.0)
    """Dropout after attention and MLP; its mask is kept for backward when > 0."""
    attention_dropout: float = Field(0.1, ge=0.0, le=1.0)
    """Dropout on the attention probabilities; its mask is kept for backward when > 0."""
    position_embedding_type: Literal["rope", "learned_absolute", "yarn", "none"] = "rope"
    """rope, learned absolute positions (a trainable table), yarn or none."""
    bias_activation_fusion: bool = False
    """Fused bias + GeLU/SwiGLU kernel: keeps only the fc1 output for backward."""
    activation_func_clamp_value: FiniteFloat | None = Field(None, gt=0.0)
    """Clamp the GLU's halves before the activation: the gate half from above, the linear half to plus or minus this (GPT-OSS: 7); unset: none."""
    masked_softmax_fusion: bool = False
    """Megatron's fused scale-mask-softmax kernel for unfused attention (keeps only the half-precision probabilities where the kernel applies)."""
    attention_softmax_in_fp32: bool = True
    """Unfused attention computes its softmax in fp32 on the torch path."""
    window_size: list[AnyInt] | None = None
    """Sliding-window attention: (left, right) keys a query sees, -1 for no limit (GPT-OSS: [127, 0]); unset: none."""
    window_attn_skip_freq: LayerCount | list[AnyInt] | None = None
    """With a window: every N-th layer attends in full (GPT-OSS: 2), or a 0/1 list per layer (1: windowed); unset: every layer windowed."""
    softmax_type: Literal["vanilla", "off-by-one", "learnable"] = "vanilla"
    """The attention softmax: vanilla, off-by-one, or with a learnable offset per head (GPT-OSS's sinks)."""
    cross_entropy_loss_fusion: bool = False
    """Fused vocabulary-parallel cross entropy."""
    cross_entropy_fusion_impl: Literal["native", "te"] = "native"
    """Which fused cross entropy: Megatron's native one or Transformer Engine's."""
    gradient_accumulation_fusion: bool = False
    """Accumulate weight gradients straight into the fp32 main_grad buffer (fused wgrad kernel)."""
    defer_embedding_wgrad_compute: bool = False
    """Pipeline last stage: defer the output layer's weight-gradient GEMMs to the end of the step (keeps their inputs)."""
    wgrad_deferral_limit: NonNegativeInt = 0
    """With deferred embedding wgrad: microbatches deferred at most (0: all of them)."""
    tp_comm_overlap: bool = False
    """Overlap TP communication with GEMMs through Transformer Engine user buffers (with sequence parallelism; priced GEMM by GEMM, tp_comm_overlap_cfg; the buffers themselves are registered memory outside PyTorch's counters)."""
    tp_comm_overlap_cfg: dict[UbGemm, UserbufferGemmConfig] | None = None
    """Per-GEMM userbuffer overlap over Transformer Engine's defaults (its ub_cfgs: Megatron-LM's --tp-comm-overlap-cfg file, Megatron-Bridge's comm_overlap.tp_comm_overlap_cfg, or a Bridge config's name such as userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192); unset: the defaults."""

    # Mixture of experts
    num_moe_experts: HeadCount | None = None
    """Routed experts per MoE layer; unset for a dense model."""
    moe_router_topk: HeadCount = 2
    """Experts each token is routed to."""
    moe_ffn_hidden_size: Width | None = None
    """Width of one expert's intermediate layer; default ffn_hidden_size."""
    moe_shared_expert_intermediate_size: Width | None = None
    """Width of the shared experts (all of them together); unset for none."""
    moe_layer_freq: LayerCount | list[AnyInt] = 1
    """Which layers are MoE: every N-th layer, or a 0/1 list with one entry per layer."""
    moe_grouped_gemm: bool = False
    """Grouped GEMM experts (TEGroupedMLP) instead of a loop over SequentialMLP experts."""
    moe_token_dispatcher_type: TokenDispatcher = "allgather"
    """How tokens reach their experts: allgather, alltoall or flex (DeepEP/HybridEP)."""
    moe_router_load_balancing_type: Literal[
        "aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"
    ] = "aux_loss"
    """The router's balancing loss."""
    moe_router_force_load_balancing: bool = False
    """Route tokens round-robin (benchmarking); memtune measure always sets it."""
    moe_expert_capacity_factor: FiniteFloat | None = Field(None, gt=0.0)
    """Token capacity per expert as a multiple of the balanced share; unset: no dropping."""
    moe_pad_expert_input_to_capacity: bool = False
    """Pad every expert's input to its capacity."""
    moe_token_drop_policy: Literal["probs", "position"] = "probs"
    """Which tokens an over-full expert drops: lowest router probability or latest position."""
    moe_permute_fusion: bool = False
    """Fused token permutation in the dispatcher (not modeled; --explain says so)."""
    moe_shared_expert_overlap: bool = False
    """Overlap the shared experts with the dispatcher's communication."""
    moe_router_num_groups: HeadCount | None = None
    """Device-limited routing: groups the experts are split into."""
    moe_router_group_topk: HeadCount | None = None
    """Device-limited routing: groups a token may use."""
    moe_flex_dispatcher_backend: Literal["deepep", "hybridep", "ncclep"] = "deepep"
    """The flex dispatcher's kernels: DeepEP, HybridEP or NCCL EP (each sends a token once per rank holding its experts)."""
    overlap_moe_expert_parallel_comm: bool = False
    """Run the expert all-to-alls of one microbatch under another's compute (combined 1F1B; needs CUDA_DEVICE_MAX_CONNECTIONS > 1)."""
    delay_wgrad_compute: bool = False
    """With the above: delay the experts' weight gradients so the backward's all-to-all hides behind them."""

    # Multi-latent attention (defaults are MLATransformerConfig's)
    multi_latent_attention: bool = False
    """DeepSeek's multi-latent attention (low-rank compressed queries and keys/values)."""
    q_lora_rank: Width | None = 512
    """Rank of the query compression; unset: no query compression."""
    kv_lora_rank: Width = 512
    """Rank of the key/value compression."""
    qk_head_dim: Width = 128
    """Query/key head width without the positional part."""
    qk_pos_emb_head_dim: Width = 64
    """The rotary part of the query/key head width."""
    v_head_dim: Width = 128
    """Value head width."""

    mtp_num_layers: LayerCountOrZero | None = None
    """Multi-token-prediction layers on the last stage (DeepSeek-V3-style); unset or 0: none."""

    # Parallelism
    tensor_model_parallel_size: ParallelSize = 1
    """TP: every layer's weights and most activations split over this many GPUs."""
    pipeline_model_parallel_size: ParallelSize = 1
    """PP: the layers split into this many consecutive stages."""
    virtual_pipeline_model_parallel_size: ParallelSize | None = None
    """VPP: model chunks per pipeline rank (interleaved 1F1B); shortens the bubble, not the peak."""
    context_parallel_size: ParallelSize = 1
    """CP: the sequence split over this many GPUs inside attention."""
    cp_comm_type: CpCommType = "p2p"
    """How CP's attention exchanges: p2p (a ring of K/V hidden behind the attention), all_gather (K/V gathered whole), a2a (all-to-all of Q, K, V and the output: heads split, sequence whole) or a2a+p2p (a2a inside the first hierarchical group, the ring across the second)."""
    hierarchical_context_parallel_sizes: list[ParallelSize] | None = None
    """With a2a+p2p: the CP group's sizes, innermost (consecutive CP ranks, the all-to-all) first; their product is CP."""
    expert_model_parallel_size: ParallelSize = 1
    """EP: the experts split over this many GPUs."""
    expert_tensor_parallel_size: ParallelSize | None = None
    """ETP: each expert's weights split over this many GPUs; default TP."""
    sequence_parallel: bool = False
    """SP: with TP > 1, norms and dropout run on a sequence shard and activations outside the TP region are split."""
    num_layers_in_first_pipeline_stage: LayerNumber | None = None
    """Uneven pipeline: layers of the first stage."""
    num_layers_in_last_pipeline_stage: LayerNumber | None = None
    """Uneven pipeline: layers of the last stage."""
    account_for_embedding_in_pipeline_split: bool = False
    """Count the embedding as one layer when splitting the pipeline."""
    account_for_loss_in_pipeline_split: bool = False
    """Count the output layer and loss as one layer when splitting the pipeline."""
    pipeline_model_parallel_layout: str | list[list[str]] | None = None
    """Megatron's layer-by-layer stage layout (its string shorthand or a list of stages), read by memtune/config/layout.py."""
    microbatch_group_size_per_vp_stage: ParallelSize | None = None
    """Interleaved schedule: microbatches run per virtual stage before switching; default PP."""
    pipeline_dtype: Literal["fp32", "fp16", "bf16"] | None = None
    """Dtype of tensors sent between stages; Megatron-Core requires it with PP > 1 (Megatron-LM and Bridge fill it in)."""
    deallocate_pipeline_outputs: bool = False
    """Free each sent stage output's data once it is sent (keeps only its shape)."""

    # Recompute
    recompute_granularity: RecomputeGranularity | None = None
    """selective (chosen modules) or full (whole layers); unset: no recompute."""
    recompute_method: RecomputeMethod | None = None
    """Full recompute: uniform (every N layers one checkpoint) or block (the first N layers of each stage)."""
    recompute_num_layers: LayerNumber | None = None
    """Full recompute: layers per checkpoint (uniform) or checkpointed layers per stage (block)."""
    recompute_modules: list[str] | None = None
    """Selective recompute: modules to recompute; default core_attn."""
    distribute_saved_activations: bool = False
    """Full recompute with TP: split each checkpoint's input over the TP ranks."""

    # Offload
    cpu_offloading: bool = False
    """Megatron-Core's layer-wise activation (and weight) offload to the host; PP 1 only, no recompute."""
    cpu_offloading_num_layers: LayerNumber = 0
    """Layers whose activations are offloaded."""
    cpu_offloading_activations: bool = True
    """Offload activations (with cpu_offloading)."""
    cpu_offloading_weights: bool = False
    """Offload weights (with cpu_offloading)."""
    # Fine-grained activation offloading (Megatron-Core's TransformerConfig names and defaults)
    fine_grained_activation_offloading: bool = False
    """Fine-grained activation offloading: move what the chosen modules save for backward to the host."""
    offload_modules: list[str] | None = None
    """Fine-grained offloading: the modules whose activations move to the host."""
    min_offloaded_tensor_size: NonNegativeInt = 1024 * 1024
    """Fine-grained offloading: tensors smaller than this stay on the device."""
    activation_offload_fraction: float = Field(1.0, ge=0.0, le=1.0)
    """Fine-grained offloading: share of the eligible activations moved to the host."""

    # Precision
    bf16: bool = False
    """Train in bf16 (weights, activations); fp32 main weights in the optimizer."""
    fp16: bool = False
    """Train in fp16 with loss scaling."""
    fp8: Literal["e4m3", "hybrid"] | None = None
    """FP8 GEMMs through Transformer Engine: e4m3 or hybrid."""
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise", "mxfp8"] = "delayed"
    """FP8 scaling recipe."""
    fp8_param_gather: bool = False
    """Keep FP8 weight copies and gather them in FP8 (needs the distributed optimizer)."""
    disable_parameter_transpose_cache: bool = False
    """Transformer Engine quantizes the FP8 weights afresh every microbatch instead of caching them for the step (Megatron-Core's TransformerConfig field, set by Megatron-Bridge's Llama 3 perf recipes; Megatron-LM has no flag)."""
    fp8_dot_product_attention: bool = False
    """Run the core attention in FP8 too (Transformer Engine's cuDNN FP8 fused attention; Megatron-Bridge's mixed_precision.fp8_dot_product_attention, MLPerf's FP8_DPA=1)."""

    # CUDA graphs
    cuda_graph_impl: CudaGraphImpl = "none"
    """CUDA graphs: none, local (Megatron's), transformer_engine, or full_iteration."""
    cuda_graph_scope: list[str] | None = None
    """Which parts of a layer are captured."""

    # Implementation flavour
    transformer_impl: TransformerImpl = "transformer_engine"
    """Layer spec: Transformer Engine modules or plain local PyTorch modules."""
    attention_backend: AttentionBackend = "auto"
    """Core attention: flash/fused kernels keep no s x s scores; unfused keeps them; auto picks a fused kernel with Transformer Engine."""

    @field_validator("moe_layer_freq", mode="before")
    @classmethod
    def _megatron_list_syntax(cls, value: object) -> object:
        """Megatron-LM's own form, ``([0]*3+[1]*58)``, as a launch script or override writes it."""
        if not isinstance(value, str):
            return value
        from memtune.config.loaders._shell import evaluate  # the loaders import this module

        evaluated = evaluate(value)
        return value if evaluated is None else evaluated

    @field_validator("cp_comm_type", mode="before")
    @classmethod
    def _one_cp_comm_type(cls, value: object, info: ValidationInfo) -> object:
        """Megatron takes one type or one per layer (Megatron-LM passes a one-word
        ``--cp-comm-type`` as that word); a per-layer list that repeats one type is that type,
        and memtune prices no mix."""
        if not isinstance(value, list) or len(value) == 1:
            return value[0] if isinstance(value, list) else value
        if info.data.get("context_parallel_size", 1) == 1:
            return value[0] if value else "p2p"  # Megatron reads it only with CP > 1
        layers = info.data.get("num_layers")
        if layers is not None and len(value) != layers:
            raise ValueError(
                f"Length of cp_comm_type ({len(value)}) should equal to the total number of "
                f"transformer layers ({layers})!"
            )
        if any(v != value[0] for v in value):
            kinds = ", ".join(dict.fromkeys(str(v) for v in value))
            raise ValueError(f"a per-layer list must repeat one type (got {kinds}): memtune prices no mix")
        return value[0]

    @field_validator("tp_comm_overlap_cfg", mode="before")
    @classmethod
    def _named_overlap_cfg(cls, value: object) -> object:
        """A Megatron-Bridge configuration's name stands for its per-GEMM settings."""
        if isinstance(value, str):
            from memtune.catalog.tp_overlap import named_overlap_cfg  # the catalog imports the schema

            return named_overlap_cfg(value)
        return value

    @field_validator("tp_comm_overlap_cfg")
    @classmethod
    def _overlap_methods(
        cls, value: dict[str, UserbufferGemmConfig] | None
    ) -> dict[str, UserbufferGemmConfig] | None:
        """The methods Transformer Engine runs for each GEMM's collective (``initialize_ub``)."""
        for gemm, cfg in (value or {}).items():
            allowed = UB_METHODS_ALLOWED[gemm]
            if cfg.method is not None and cfg.method not in allowed:
                raise ValueError(
                    f"{gemm}.method: {cfg.method} is not an overlap Transformer Engine runs for "
                    f"{gemm}; allowed: {', '.join(allowed)}"
                )
        return value

    @model_validator(mode="after")
    def _lists_match_layers(self) -> ModelConfig:
        if isinstance(self.moe_layer_freq, list) and len(self.moe_layer_freq) != self.num_layers:
            raise ValueError(
                f"moe_layer_freq: a list must have num_layers ({self.num_layers}) entries, "
                f"got {len(self.moe_layer_freq)}"
            )
        if (
            isinstance(self.window_attn_skip_freq, list)
            and len(self.window_attn_skip_freq) != self.num_layers
        ):
            raise ValueError(
                f"window_attn_skip_freq: a list must have num_layers ({self.num_layers}) entries, "
                f"got {len(self.window_attn_skip_freq)}"
            )
        if self.window_size is not None and len(self.window_size) != 2:
            raise ValueError(f"window_size: two numbers (left, right), got {self.window_size}")
        if self.pipeline_model_parallel_layout is not None:
            self._check_layout(self.pipeline_model_parallel_layout)
        return self

    def _check_layout(self, layout: str | list[list[str]]) -> None:
        """What Megatron-Core's TransformerConfig refuses about a layout."""
        pp = self.pipeline_model_parallel_size
        problems = layout_problems(layout, pp, self.num_layers, self.mtp_num_layers or 0)
        if (
            self.num_layers_in_first_pipeline_stage is not None
            or self.num_layers_in_last_pipeline_stage is not None
            or self.account_for_embedding_in_pipeline_split
            or self.account_for_loss_in_pipeline_split
        ):
            problems.append(
                "pipeline_model_parallel_layout cannot be set with num_layers_in_first/last_pipeline_stage "
                "or account_for_embedding/loss_in_pipeline_split"
            )
        vpp = self.virtual_pipeline_model_parallel_size
        if not problems and vpp is not None and vpp != len(parse_layout(layout)) // pp:
            problems.append(
                f"virtual_pipeline_model_parallel_size={vpp} conflicts with pipeline_model_parallel_layout "
                f"({len(parse_layout(layout)) // pp} virtual stages per pipeline rank)"
            )
        if problems:
            raise ValueError("; ".join(problems))


class TrainConfig(Section):
    micro_batch_size: BatchSize = 1
    """Samples per microbatch on one data-parallel rank."""
    global_batch_size: BatchSize | None = None
    """Samples per optimizer step over all data-parallel ranks; default micro_batch_size x DP."""
    manual_gc: bool = False
    """Megatron-LM's --manual-gc: one full Python garbage collection before training, then none
    automatic. It frees what reference cycles still hold, such as the device copies of the
    optimizer that optimizer_cpu_offload builds first and replaces."""


class OptimizerConfig(Section):
    # Megatron-LM's --optimizer choices; memtune estimates adam and sgd (estimate refuses the rest).
    optimizer: Literal["adam", "sgd", "muon", "dist_muon", "adaptive_muon", "lion", "soap"] = "adam"
    """The optimizer: adam (two fp32 moments per parameter) or sgd; Megatron-LM's others are refused by estimate."""
    use_distributed_optimizer: bool = False
    """Shard the optimizer state and main weights over data parallelism (either section turns it on)."""
    use_precision_aware_optimizer: bool = False
    """Keep main weights and moments in the dtypes below (Transformer Engine's FusedAdam)."""
    main_grads_dtype: StateDtype = "fp32"
    """Precision-aware optimizer: dtype of the main gradients."""
    main_params_dtype: StateDtype = "fp32"
    """Precision-aware optimizer: dtype of the main weights."""
    exp_avg_dtype: StateDtype = "fp32"
    """Precision-aware optimizer: dtype of Adam's first moment."""
    exp_avg_sq_dtype: StateDtype = "fp32"
    """Precision-aware optimizer: dtype of Adam's second moment."""
    initial_loss_scale: float = Field(2.0**32, gt=0.0)
    """fp16: the dynamic loss scaler's first scale; a step that overflows is skipped and halves it
    (after ``hysteresis`` 2 overflows), so from 2**32 the first steps of a run update nothing."""
    optimizer_cpu_offload: bool = False
    """Run part of the optimizer on the host (HybridDeviceOptimizer)."""
    optimizer_offload_fraction: float = Field(1.0, ge=0.0, le=1.0)
    """Share of the optimizer state kept on the host with optimizer_cpu_offload."""
    overlap_cpu_optimizer_d2h_h2d: bool = False
    """Overlap the host optimizer's device-to-host and host-to-device copies."""


class DDPConfig(Section):
    grad_reduce_in_fp32: bool = False
    """Keep the gradient buffer in fp32 (else in the weights' dtype)."""
    use_distributed_optimizer: bool = False
    """Shard the optimizer state and main weights over data parallelism (either section turns it on)."""
    use_megatron_fsdp: bool = False
    """Wrap with Megatron-FSDP instead of Megatron's DDP."""
    data_parallel_sharding_strategy: ShardingStrategy = "no_shard"
    """Megatron-FSDP: shard the optimizer state (optim), also gradients (optim_grads), also weights (optim_grads_params)."""
    overlap_grad_reduce: bool = False
    """Overlap the gradient reduce-scatter with backward."""
    overlap_param_gather: bool = False
    """Overlap the parameter all-gather with forward (distributed optimizer)."""
    bucket_size: PositiveInt | None = None
    """Gradient bucket size in parameters; default max(40M, 1M x DP)."""
    overlap_by_data_parallel_size: bool = False
    """Megatron-Bridge's comm_overlap section decides the three DP overlaps at setup instead of these keys (with the distributed optimizer): on, with 128 Mi-parameter buckets, where DP > 1, off where DP = 1."""
    num_distributed_optimizer_instances: ParallelSize = 1
    """Distributed-optimizer instances (each shards over DP / instances)."""
    # Megatron-FSDP's buffers (None: Megatron-LM's "auto", the model weights' dtype)
    megatron_fsdp_main_params_dtype: FsdpBufferDtype | None = "fp32"
    """Megatron-FSDP: dtype of the main-weight buffer."""
    megatron_fsdp_main_grads_dtype: FsdpBufferDtype | None = None
    """Megatron-FSDP: dtype of the main-gradient buffer (grad_reduce_in_fp32 does not apply under Megatron-FSDP)."""


class LoraConfig(Section):
    dim: Width = 32
    """LoRA rank."""
    alpha: Width = 32
    """LoRA scaling numerator (the scale is alpha / dim)."""
    dropout: float = Field(0.0, ge=0.0, le=1.0)
    """Dropout on the adapter's input."""
    target_modules: list[LoraTarget] = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    """The linear layers that get adapters."""
    sequence_parallel_input_regather: bool = False
    """Under SP, re-gather an adapter's input in backward instead of keeping the gathered copy."""
    a2a_experimental: bool = False
    """Under SP, a row-parallel adapter's output goes from hidden- to sequence-sharded by one
    all-to-all (1/TP of the bytes) instead of a full-width all-gather; column adapters then do not
    re-gather (Megatron-Bridge's ``LoRA.a2a_experimental``, NeMo's ``LORA_A2A``)."""
    scale_position: Literal["bottleneck", "output"] = "bottleneck"
    """Where alpha/dim multiplies: the rank-sized bottleneck (Megatron-Bridge's dense adapters
    since its PR #5906) or the full-width output (Bridge before it, and its grouped-expert
    adapters), which keeps one more full-width tensor alive while the multiply runs."""


class EnvConfig(Section):
    """The process environment that changes memory behaviour, plus the software versions the
    version-dependent rules need."""

    # YAML reads `NCCL_GRAPH_REGISTER: 0` as a number; the environment only has strings.
    model_config = ConfigDict(
        extra="forbid", frozen=True, coerce_numbers_to_str=True, use_attribute_docstrings=True
    )

    PYTORCH_CUDA_ALLOC_CONF: str | None = None
    """Allocator settings; read first by torch, and the only name Megatron's guards read."""
    PYTORCH_ALLOC_CONF: str | None = None
    """Allocator settings under the newer name; used when PYTORCH_CUDA_ALLOC_CONF is unset, from torch 2.11."""
    NCCL_GRAPH_REGISTER: str | None = None
    """0 turns NCCL's registration of CUDA-graph buffers off (needed with expandable segments)."""
    CUDA_DEVICE_MAX_CONNECTIONS: str | None = None
    """Hardware work queues; Megatron wants 1 for TP/SP communication overlap ordering."""
    use_nccl_ub: bool = False
    """NCCL user-buffer registration (a MemPool with NCCL's allocator)."""
    megatron_core_version: str = "0.19.2"
    """The megatron-core release the job runs, for version-dependent rules."""
    torch_version: str = "2.11.0"
    """The torch release the job runs, for version-dependent rules."""
    transformer_engine_version: str = "2.18.0"
    """The Transformer Engine release the job runs (Megatron-Bridge 067f987 locks 2.18), for version-dependent rules."""
    NVTE_CPU_OFFLOAD_V1: str | None = None
    """1 keeps Transformer Engine 2.10+'s CPU offload from offloading weights; Megatron-Bridge requires it for fine-grained activation offloading."""
    NVTE_DPA_FP8_RECIPE: (
        Literal["F16", "DelayedScaling", "Float8CurrentScaling", "MXFP8BlockScaling"] | None
    ) = None
    """Transformer Engine's FP8 recipe for the attention alone, over the linears' (TE 2.8+): F16 keeps it in bf16; unset: the linears' recipe."""


class NetworkConfig(Section):
    """The fabric the job's collectives run over. Megatron has no such keys: memtune's own, for
    the throughput model. Unset keys take the defaults of ``system`` (``memtune/catalog/data/networks.yaml``)."""

    system: str | None = None
    """Reference system whose fabric fills unset keys (dgx-a100, dgx-h100, dgx-h200, dgx-b200, gb200-nvl72); default: the one of `cluster.gpu`."""
    gpus_per_nvlink_domain: ParallelSize | None = None
    """GPUs that reach each other over NVLink (8 in a DGX, 72 in a GB200 NVL72 rack)."""
    nvlink_gb_per_s: FiniteFloat | None = Field(
        None, ge=limits.MIN_LINK_GB_PER_S, le=limits.MAX_LINK_GB_PER_S
    )
    """NVLink bandwidth of one GPU in GB/s, one direction, all links together."""
    nics_per_node: ParallelSize | None = None
    """Network adapters for GPU traffic (the compute fabric) per node."""
    nic_gbit_per_s: FiniteFloat | None = Field(None, ge=limits.MIN_LINK_GB_PER_S, le=limits.MAX_LINK_GB_PER_S)
    """Line rate of one of those adapters in Gb/s (400 for ConnectX-7 NDR)."""
    rail_optimized: bool | None = None
    """Whether adapter i of every node sits on the same leaf switch (NVIDIA's SuperPOD rails)."""
    host_link_gb_per_s: FiniteFloat | None = Field(
        None, ge=limits.MIN_LINK_GB_PER_S, le=limits.MAX_LINK_GB_PER_S
    )
    """Line rate of one GPU's link to host memory in GB/s, one direction (PCIe, or its share of NVLink-C2C on Grace systems); what activation and optimizer offload copy over."""


class ClusterConfig(Section):
    num_gpus: ParallelSize | None = None
    """GPUs in the job; default: the smallest count the layout allows (DP 1)."""
    gpu: str = "H100-80GB"  # a catalog name; `memtune gpus` lists them
    """GPU model, a name from `memtune gpus`."""
    gpu_memory_gib: FiniteFloat | None = Field(None, gt=0.0, le=limits.MAX_GPU_MEMORY_GIB)
    """Usable device memory in GiB, overriding the GPU's catalog capacity."""
    gpus_per_node: ParallelSize = 8
    """GPUs per node (intra-node links, host memory per node)."""
    network: NetworkConfig = NetworkConfig()
    """The fabric: NVLink domain, adapters per node and their speed (memtune's own keys)."""
    host_memory_gib: FiniteFloat | None = Field(None, gt=0.0, le=limits.MAX_HOST_MEMORY_GIB)
    """Host memory (RAM) of one node in GiB; default: the reference system's (`memtune/catalog/data/networks.yaml`) for the node's GPUs."""


Stack = Literal["megatron-core", "megatron-lm", "megatron-bridge"]


class CheckSettings(Section):
    """Which ``memtune check`` rules report for this job, as ruff's ``select``/``ignore``: codes,
    code prefixes (``ENV``, ``ENV00``) or rule names. Errors Megatron raises at start-up are always
    reported and always refuse."""

    select: list[str] | None = None
    """Rules whose warnings and infos are reported: codes, code prefixes or names; default all."""
    ignore: list[str] = []
    """Rules whose warnings and infos are not reported (errors always are): codes, prefixes or names."""


class CheckpointConfig(Section):
    """Megatron-LM's and Megatron-Bridge's ``checkpoint`` keys that change memory when a job
    resumes (docs/resume.md) or saves (docs/save.md)."""

    load: str | None = None
    """Directory the job resumes from when it holds a checkpoint (Megatron-LM's --load); unset: no resume phase."""
    load_optim: bool = True
    """Load the optimizer state with the weights (--no-load-optim turns it off; finetune skips it too)."""
    ckpt_format: Literal["torch", "torch_dist", "torch_dcp", "fsdp_dtensor"] = "torch_dist"
    """Checkpoint format: torch_dist (Megatron-Core's distributed checkpoint), fsdp_dtensor
    (Megatron-FSDP), torch (legacy, one file per rank) or torch_dcp (torch FSDP2; not modeled)."""
    fully_parallel_load: bool = False
    """Megatron-LM's --ckpt-fully-parallel-load: each data-parallel rank reads a share of the
    replicated tensors and broadcasts it to the others."""
    finetune: bool = False
    """Load the weights only (Megatron-LM's --finetune, Bridge's checkpoint.finetune): neither the
    optimizer state nor the RNG state is loaded."""
    pretrained_checkpoint: str | None = None
    """Checkpoint a job fine-tunes from when `load` holds none (Megatron-LM's --pretrained-checkpoint):
    loaded as with `finetune`, without the optimizer state."""
    load_rng: bool = True
    """Load the RNG state (--no-load-rng turns it off); a few kilobytes, no memory effect."""
    save: str | None = None
    """Directory the job saves checkpoints to (Megatron-LM's --save); unset: no save phase."""
    save_optim: bool = True
    """Save the optimizer state with the weights (--no-save-optim turns it off)."""
    save_rng: bool = True
    """Save the RNG state (--no-save-rng turns it off); a few kilobytes, no memory effect."""
    fully_parallel_save: bool = True
    """Spread the writing of tensors every data-parallel rank holds over those ranks (Megatron-LM's
    default; --no-ckpt-fully-parallel-save turns it off and data-parallel rank 0 writes them)."""
    async_save: bool = False
    """Write the checkpoint in the background (torch_dist, fsdp_dtensor): every tensor the rank
    writes is staged in pinned host memory first."""
    use_persistent_ckpt_worker: bool = False
    """Run async saves in one persistent worker process per rank; Megatron-LM runs --async-save
    only with it (else it saves synchronously), Megatron-Bridge requires it and defaults it on."""
    ckpt_assume_constant_structure: bool = False
    """Cache the save plan across saves (torch_dist); changes no memory memtune models."""
    dist_ckpt_optim_fully_reshardable: bool = False
    """Save the distributed optimizer's state in the model's layout (torch_dist): it is gathered
    over the data-parallel ranks while saving (docs/save.md)."""
    distrib_optim_fully_reshardable_mem_efficient: bool = False
    """With fully_reshardable: gather over Gloo on the host to data-parallel rank 0 only, instead of
    NCCL on the device to every rank."""


class JobConfig(Section):
    """A whole training job: what memtune estimates, checks, measures and plans."""

    defaults: Stack = "megatron-bridge"  # whose defaults fill unset keys; see memtune/config/stacks.py
    """The stack whose defaults fill keys the job leaves out: megatron-core, megatron-lm or megatron-bridge."""
    model: ModelConfig
    """Architecture, parallel layout, recompute, offload, precision and implementation."""
    train: TrainConfig = TrainConfig()
    """Batch sizes and Python garbage collection."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """Optimizer: kind, sharding, precision, offload."""
    ddp: DDPConfig = DDPConfig()
    """Data-parallel wrapper: gradient buffers, FSDP, overlap."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpoints: resuming from one and saving them, in which format, with or without the optimizer."""
    peft: LoraConfig | None = None
    """LoRA fine-tuning; unset for full training."""
    env: EnvConfig = EnvConfig()
    """Process environment and software versions."""
    cluster: ClusterConfig = ClusterConfig()
    """GPUs: count, model, capacity."""
    check: CheckSettings = CheckSettings()
    """Which memtune check rules report warnings and infos (errors always refuse)."""
