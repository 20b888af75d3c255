"""The training-job schema.

Key names and defaults are Megatron-Core's (``TransformerConfig``, ``ModelParallelConfig``,
``OptimizerConfig``, ``DistributedDataParallelConfig``) and the sections follow the way a
Megatron-Bridge ``ConfigContainer`` dumps to YAML, so users can paste what they already have.
Values that Megatron derives from others (``ffn_hidden_size = 4 * hidden_size`` and so on)
stay ``None`` here; :mod:`memtune.config.derived` resolves them in one place.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, model_validator

from memtune import limits


# Integer fields are strict (``true`` is not 1, ``"8"`` is not 8) and bounded by plausibility
# limits far above any real job (memtune.limits), so a typo cannot make memtune build a
# per-layer table of 10**12 entries. Floats must be finite.
def _bounded(low: int, high: int) -> object:
    return Annotated[int, Strict(), Field(ge=low, le=high)]


PositiveInt = _bounded(1, limits.MAX_COUNT)
NonNegativeInt = _bounded(0, limits.MAX_COUNT)
AnyInt = _bounded(-limits.MAX_COUNT, limits.MAX_COUNT)
LayerCount = _bounded(1, limits.MAX_LAYERS)
LayerNumber = _bounded(-limits.MAX_LAYERS, limits.MAX_LAYERS)
Width = _bounded(1, limits.MAX_WIDTH)
HeadCount = _bounded(1, limits.MAX_HEADS)
VocabSize = _bounded(1, limits.MAX_VOCAB)
SeqLength = _bounded(1, limits.MAX_SEQ_LENGTH)
ParallelSize = _bounded(1, limits.MAX_PARALLEL)
BatchSize = _bounded(1, limits.MAX_BATCH)
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
ShardingStrategy = Literal["no_shard", "optim", "optim_grads", "optim_grads_params"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(Section):
    """Architecture, parallel layout, recompute, offload, precision and implementation flavour."""

    # Architecture
    num_layers: LayerCount
    hidden_size: Width
    num_attention_heads: HeadCount
    ffn_hidden_size: Width | None = None
    num_query_groups: HeadCount | None = None
    kv_channels: Width | None = None
    vocab_size: VocabSize
    make_vocab_size_divisible_by: VocabSize = 128
    seq_length: SeqLength = 1024
    gated_linear_unit: bool = False
    activation_func: ActivationFunc = "gelu"
    normalization: Normalization = "LayerNorm"
    share_embeddings_and_output_weights: bool = True
    qk_layernorm: bool = False
    add_bias_linear: bool = True
    add_qkv_bias: bool = False
    hidden_dropout: float = Field(0.1, ge=0.0, le=1.0)
    attention_dropout: float = Field(0.1, ge=0.0, le=1.0)
    position_embedding_type: Literal["rope", "learned_absolute", "yarn", "none"] = "rope"
    bias_activation_fusion: bool = False

    # Mixture of experts
    num_moe_experts: HeadCount | None = None
    moe_router_topk: HeadCount = 2
    moe_ffn_hidden_size: Width | None = None
    moe_shared_expert_intermediate_size: Width | None = None
    moe_layer_freq: LayerCount | list[AnyInt] = 1
    moe_grouped_gemm: bool = False
    moe_token_dispatcher_type: TokenDispatcher = "allgather"
    moe_router_load_balancing_type: Literal[
        "aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"
    ] = "aux_loss"
    moe_router_force_load_balancing: bool = False
    moe_expert_capacity_factor: FiniteFloat | None = Field(None, gt=0.0)
    moe_pad_expert_input_to_capacity: bool = False
    moe_shared_expert_overlap: bool = False
    moe_router_num_groups: HeadCount | None = None
    moe_router_group_topk: HeadCount | None = None

    # Multi-latent attention (defaults are MLATransformerConfig's)
    multi_latent_attention: bool = False
    q_lora_rank: Width | None = 512
    kv_lora_rank: Width = 512
    qk_head_dim: Width = 128
    qk_pos_emb_head_dim: Width = 64
    v_head_dim: Width = 128

    mtp_num_layers: _bounded(0, limits.MAX_LAYERS) | None = None

    # Parallelism
    tensor_model_parallel_size: ParallelSize = 1
    pipeline_model_parallel_size: ParallelSize = 1
    virtual_pipeline_model_parallel_size: ParallelSize | None = None
    context_parallel_size: ParallelSize = 1
    expert_model_parallel_size: ParallelSize = 1
    expert_tensor_parallel_size: ParallelSize | None = None
    sequence_parallel: bool = False
    num_layers_in_first_pipeline_stage: LayerNumber | None = None
    num_layers_in_last_pipeline_stage: LayerNumber | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    microbatch_group_size_per_vp_stage: ParallelSize | None = None
    pipeline_dtype: Literal["fp32", "fp16", "bf16"] | None = None
    deallocate_pipeline_outputs: bool = False

    # Recompute
    recompute_granularity: RecomputeGranularity | None = None
    recompute_method: RecomputeMethod | None = None
    recompute_num_layers: LayerNumber | None = None
    recompute_modules: list[str] | None = None
    distribute_saved_activations: bool = False

    # Offload
    cpu_offloading: bool = False
    cpu_offloading_num_layers: LayerNumber = 0
    cpu_offloading_activations: bool = True
    cpu_offloading_weights: bool = False

    # Precision
    bf16: bool = False
    fp16: bool = False
    fp8: Literal["e4m3", "hybrid"] | None = None
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise", "mxfp8"] = "delayed"
    fp8_param_gather: bool = False

    # CUDA graphs
    cuda_graph_impl: CudaGraphImpl = "none"
    cuda_graph_scope: list[str] | None = None

    # Implementation flavour
    transformer_impl: TransformerImpl = "transformer_engine"
    attention_backend: AttentionBackend = "auto"

    @model_validator(mode="after")
    def _lists_match_layers(self) -> ModelConfig:
        if isinstance(self.moe_layer_freq, list) and len(self.moe_layer_freq) != self.num_layers:
            raise ValueError(
                f"moe_layer_freq: a list must have num_layers ({self.num_layers}) entries, "
                f"got {len(self.moe_layer_freq)}"
            )
        return self


class TrainConfig(Section):
    micro_batch_size: BatchSize = 1
    global_batch_size: BatchSize | None = None


class OptimizerConfig(Section):
    optimizer: Literal["adam", "sgd"] = "adam"
    use_distributed_optimizer: bool = False
    use_precision_aware_optimizer: bool = False
    main_grads_dtype: StateDtype = "fp32"
    main_params_dtype: StateDtype = "fp32"
    exp_avg_dtype: StateDtype = "fp32"
    exp_avg_sq_dtype: StateDtype = "fp32"
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = Field(1.0, ge=0.0, le=1.0)


class DDPConfig(Section):
    grad_reduce_in_fp32: bool = False
    use_distributed_optimizer: bool = False
    use_megatron_fsdp: bool = False
    data_parallel_sharding_strategy: ShardingStrategy = "no_shard"
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    bucket_size: PositiveInt | None = None
    num_distributed_optimizer_instances: ParallelSize = 1


class LoraConfig(Section):
    dim: Width = 32
    alpha: Width = 32
    dropout: float = Field(0.0, ge=0.0, le=1.0)
    target_modules: list[LoraTarget] = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    sequence_parallel_input_regather: bool = False


class EnvConfig(Section):
    """The process environment that changes memory behaviour, plus the software versions the
    version-dependent rules need."""

    # YAML reads `NCCL_GRAPH_REGISTER: 0` as a number; the environment only has strings.
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    PYTORCH_CUDA_ALLOC_CONF: str | None = None
    PYTORCH_ALLOC_CONF: str | None = None
    NCCL_GRAPH_REGISTER: str | None = None
    CUDA_DEVICE_MAX_CONNECTIONS: str | None = None
    use_nccl_ub: bool = False
    megatron_core_version: str = "0.19.2"
    torch_version: str = "2.11.0"


class ClusterConfig(Section):
    num_gpus: ParallelSize | None = None
    gpu: str = "H100-80GB"  # a catalog name; `memtune gpus` lists them
    gpu_memory_gib: FiniteFloat | None = Field(None, gt=0.0, le=limits.MAX_GPU_MEMORY_GIB)
    gpus_per_node: ParallelSize = 8


class JobConfig(Section):
    """A whole training job: what memtune estimates, checks, measures and plans."""

    model: ModelConfig
    train: TrainConfig = TrainConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    ddp: DDPConfig = DDPConfig()
    peft: LoraConfig | None = None
    env: EnvConfig = EnvConfig()
    cluster: ClusterConfig = ClusterConfig()
