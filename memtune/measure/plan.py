"""Translate a memtune job into what the measurement subprocess builds: a plain-data plan.

Everything here is pure Python (no torch): the plan is JSON, handed to
:mod:`memtune.measure.runner` in a subprocess, so CI can test the translation without a GPU.

Choices the runner makes that a config cannot express are fixed here, in one place, and
recorded with every measurement:

* MoE routing is forced to balance (``moe_router_force_load_balancing``). Under the fake
  process group each rank routes only its own tokens, and with untrained router weights the
  tokens pile onto a few experts; balanced routing is what a trained model converges to.
* The auxiliary load-balancing loss is off (Megatron-Core's default coefficient, 0).
* LoRA jobs (``peft``) are built with ``memtune.peft.LoRA`` (docs/peft.md): base weights frozen
  (no gradient buffer, no optimizer state), adapters in Megatron's DDP buffers and optimizer.
* Fusions are passed to Megatron-Core as the config sets them. ``masked_softmax_fusion`` (with
  unfused attention) and ``gradient_accumulation_fusion`` need Megatron's CUDA extensions
  (``benchmarks/gpu/build_megatron_kernels.py`` builds them); the runner refuses without them and
  records which extensions were loaded.
* Without Transformer Engine the local layer spec is used. Its core attention is Megatron's
  ``DotProductAttention`` for ``unfused``/``local``/``auto`` and memtune's SDPA module
  (flash or memory-efficient kernels) for ``flash``/``fused``, matching which backends keep
  no ``s x s`` score matrix.
* Fine-grained activation offloading runs Megatron-Core's own offload and reload code; its
  context only flips a flag on Transformer Engine's ``cpu_offload`` module, which Transformer
  Engine's layers read and the local spec has none of, so the runner gives it a module holding
  just that flag when Transformer Engine is absent (recorded as ``te_cpu_offload_flag``).
* Python's garbage collector runs as the job says: ``train.manual_gc`` (Megatron-LM's
  ``--manual-gc``) collects once before the first iteration and turns the automatic collector
  off, as Megatron-LM's and Megatron-Bridge's ``train()`` do; otherwise the automatic collector
  decides. It matters for optimizer CPU offload, whose replaced first optimizer keeps fp32
  device copies until a full collection (docs/preflight.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from memtune.check import CheckedJob
from memtune.config import Derived, JobConfig
from memtune.config.derived import FLASH_BACKENDS
from memtune.errors import InputError

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# Recompute modules that megatron-core 0.19.2 runs through CheckpointWithoutOutput() without an
# fp8 argument, which then takes its FP8 path and so needs Transformer Engine.
OUTPUT_DISCARDING_RECOMPUTE = {"layernorm", "moe_act"}
DEFAULT_ITERATIONS = 3

# ModelConfig keys copied verbatim into Megatron-Core's TransformerConfig.
_TRANSFORMER_KEYS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "gated_linear_unit",
    "normalization",
    "qk_layernorm",
    "add_bias_linear",
    "add_qkv_bias",
    "hidden_dropout",
    "attention_dropout",
    "bias_activation_fusion",
    "masked_softmax_fusion",
    "attention_softmax_in_fp32",
    "cross_entropy_loss_fusion",
    "cross_entropy_fusion_impl",
    "gradient_accumulation_fusion",
    "defer_embedding_wgrad_compute",
    "wgrad_deferral_limit",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "microbatch_group_size_per_vp_stage",
    "recompute_granularity",
    "recompute_method",
    "recompute_num_layers",
    "distribute_saved_activations",
    "deallocate_pipeline_outputs",
    "bf16",
    "fp16",
)
_MOE_KEYS = (
    "num_moe_experts",
    "moe_router_topk",
    "moe_shared_expert_intermediate_size",
    "moe_layer_freq",
    "moe_grouped_gemm",
    "moe_token_dispatcher_type",
    "moe_router_load_balancing_type",
    "moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity",
    "moe_token_drop_policy",
    "moe_shared_expert_overlap",
    "moe_router_num_groups",
    "moe_router_group_topk",
)
_ACTIVATION_OFFLOAD_KEYS = (
    "fine_grained_activation_offloading",
    "offload_modules",
    "min_offloaded_tensor_size",
    "activation_offload_fraction",
)
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")


@dataclass(frozen=True)
class ChunkPlan:
    """One model chunk this rank builds (one per virtual pipeline stage)."""

    vp_stage: int | None  # None without virtual pipelining
    pre_process: bool
    post_process: bool
    num_layers: int


class Schedule(TypedDict):
    """The pipeline schedule's shape arguments."""

    num_microbatches: int
    seq_length: int
    micro_batch_size: int


@dataclass(frozen=True)
class MeasurePlan:
    """Everything the subprocess needs, as JSON-ready values (dtypes and functions by name)."""

    rank: int
    world_size: int
    pp_rank: int
    chunks: list[ChunkPlan]
    parallel_state: dict[str, Any]
    transformer_config: dict[str, Any]
    multi_latent_attention: bool
    model: dict[str, Any]  # GPTModel keyword arguments beyond config and spec
    ddp: dict[str, Any]
    optimizer: dict[str, Any]
    schedule: Schedule
    layer_spec: str  # "local" | "transformer_engine"
    core_attention: str  # "megatron_dot_product" | "sdpa" | "transformer_engine"
    iterations: int
    manual_gc: bool  # Megatron-LM's --manual-gc: collect once before training, then no automatic GC
    peft: dict[str, Any] | None = None  # memtune.peft.LoRA keyword arguments; None: full training
    env: dict[str, str] = field(default_factory=dict)  # process environment for the subprocess
    config: dict[str, Any] = field(default_factory=dict)  # the memtune job, exclude_defaults, for the record
    # ``memtune measure --resume``: the checkpoint round trip (:func:`resume_plan`); None: training only
    resume: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _refusals(job: JobConfig, d: Derived, rank: int, iterations: int) -> list[str]:
    m = job.model
    local = m.transformer_impl != "transformer_engine"
    problems = []
    if not 0 <= rank < d.world_size:
        problems.append(
            f"--rank {rank}: must be between 0 and {d.world_size - 1} (world size {d.world_size})"
        )
    if iterations < 2:
        problems.append(f"--iters {iterations}: needs at least 2 (Adam creates its state at the first step)")
    if m.cross_entropy_loss_fusion and m.cross_entropy_fusion_impl == "te" and local:
        problems.append(
            "model.cross_entropy_fusion_impl te: needs transformer_impl: transformer_engine; use native"
        )
    if m.tp_comm_overlap and local:
        problems.append(
            "model.tp_comm_overlap: needs Transformer Engine's userbuffers (transformer_engine spec)"
        )
    if m.moe_permute_fusion and local:
        problems.append("model.moe_permute_fusion: needs Transformer Engine's fused permutation")
    if m.fp8 is not None and local:
        problems.append("model.fp8: needs transformer_impl: transformer_engine")
    if d.cp > 1 and local:
        problems.append(
            "model.context_parallel_size > 1: the local layer spec has no context-parallel attention"
        )
    if local and m.attention_backend in FLASH_BACKENDS and (m.window_size or m.softmax_type != "vanilla"):
        problems.append(
            "model.window_size / model.softmax_type: memtune's SDPA attention has no sliding window or softmax "
            "offset; use attention_backend: unfused (Megatron's DotProductAttention has both)"
        )
    if m.multi_latent_attention and local and m.attention_backend not in FLASH_BACKENDS:
        problems.append(
            "model.multi_latent_attention: Megatron's local DotProductAttention rejects MLA; use attention_backend: flash"
        )
    if local and m.attention_backend in FLASH_BACKENDS and not d.half_precision:
        problems.append(
            "model.attention_backend flash: PyTorch's flash kernels need bf16 or fp16; use unfused for fp32"
        )
    discarding = sorted(set(d.recompute_modules) & OUTPUT_DISCARDING_RECOMPUTE)
    if local and discarding:
        problems.append(
            f"model.recompute_modules {discarding}: megatron-core 0.19.2's output-discarding checkpoint "
            "calls Transformer Engine, so these fail on the local spec"
        )
    if m.defer_embedding_wgrad_compute and local:
        problems.append(
            "model.defer_embedding_wgrad_compute: megatron-core 0.19.2's local ColumnParallelLinear appends every "
            "layer's input to the embedding buffer only the output layer has, and fails; needs Transformer Engine"
        )
    if d.cuda_graphs:
        problems.append("model.cuda_graph_impl: memtune measure does not capture CUDA graphs")
    if m.cpu_offloading:
        problems.append(
            "model.cpu_offloading: megatron-core 0.19.2's layer-wise offload context needs Transformer Engine; "
            "use fine_grained_activation_offloading"
        )
    if job.ddp.use_megatron_fsdp and d.pp > 1:
        problems.append(
            "ddp.use_megatron_fsdp with pipeline_model_parallel_size > 1: megatron-core 0.19.2's Megatron-FSDP "
            "lays its device mesh over the whole world as (dp_cp, ep, tp) and fails with PP"
        )
    if job.optimizer.use_precision_aware_optimizer and not job.optimizer.optimizer_cpu_offload:
        problems.append("optimizer.use_precision_aware_optimizer: needs Transformer Engine's FusedAdam")
    if job.optimizer.optimizer != "adam":
        problems.append(f"optimizer.optimizer {job.optimizer.optimizer!r}: memtune measure runs Adam")
    return problems


def _core_attention(job: JobConfig) -> str:
    m = job.model
    if m.transformer_impl == "transformer_engine":
        return "transformer_engine"
    return "sdpa" if m.attention_backend in FLASH_BACKENDS else "megatron_dot_product"


def _transformer_config(job: JobConfig, d: Derived) -> dict[str, Any]:
    m = job.model
    kwargs = {key: getattr(m, key) for key in _TRANSFORMER_KEYS}
    dtype = DTYPES[d.param_dtype]
    kwargs.update(
        ffn_hidden_size=d.ffn_hidden_size,
        num_query_groups=d.num_query_groups,
        kv_channels=d.kv_channels,
        activation_func=m.activation_func,
        expert_tensor_parallel_size=d.etp,
        sequence_parallel=d.sequence_parallel,
        virtual_pipeline_model_parallel_size=d.vpp if d.vpp > 1 else None,
        params_dtype=dtype,
        pipeline_dtype=DTYPES[d.pipeline_dtype],
        recompute_modules=list(d.recompute_modules) if d.recompute_modules else None,
        # Fixed shapes: the pipeline schedule sizes its receive buffers from seq_length and
        # micro_batch_size instead of exchanging shapes first.
        variable_seq_lengths=False,
        transformer_impl=m.transformer_impl,
        attention_backend=m.attention_backend,
        fp8=m.fp8,
        fp8_recipe=m.fp8_recipe if m.fp8 else None,
    )
    if m.fp8 is None:
        del kwargs["fp8_recipe"]
    if d.is_moe:
        kwargs.update({key: getattr(m, key) for key in _MOE_KEYS})
        kwargs.update(
            moe_ffn_hidden_size=d.moe_ffn_hidden_size,
            moe_router_force_load_balancing=True,
            moe_aux_loss_coeff=0.0,
        )
    if d.mtp_num_layers:
        kwargs["mtp_num_layers"] = d.mtp_num_layers
    if m.window_size:
        kwargs.update(window_size=tuple(m.window_size), window_attn_skip_freq=m.window_attn_skip_freq)
    if m.softmax_type != "vanilla":
        kwargs["softmax_type"] = m.softmax_type
    if m.activation_func_clamp_value is not None:
        kwargs["activation_func_clamp_value"] = m.activation_func_clamp_value
    if m.fine_grained_activation_offloading:
        kwargs.update({key: getattr(m, key) for key in _ACTIVATION_OFFLOAD_KEYS})
    if m.multi_latent_attention:
        kwargs.update({key: getattr(m, key) for key in _MLA_KEYS})
        kwargs["multi_latent_attention"] = True
        kwargs["rope_type"] = "yarn" if m.position_embedding_type == "yarn" else "rope"
    return kwargs


def _chunks(d: Derived, pp_rank: int) -> list[ChunkPlan]:
    virtual = d.vpp > 1
    return [
        ChunkPlan(
            vp_stage=c.vp_stage if virtual else None,
            pre_process=c.has_embedding,
            post_process=c.has_output,
            num_layers=len(c.layers),
        )
        for c in d.chunks[pp_rank]
    ]


def _process_env(job: JobConfig) -> dict[str, str]:
    """The allocator and CUDA settings the job runs under; unset ones stay unset."""
    env = job.env
    keys = (
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "NCCL_GRAPH_REGISTER",
        "CUDA_DEVICE_MAX_CONNECTIONS",
    )
    return {key: getattr(env, key) for key in keys if getattr(env, key) is not None}


def _fsdp(job: JobConfig, d: Derived) -> dict[str, Any]:
    """Megatron-FSDP's DDP keys, as Megatron-LM's get_megatron_ddp_config passes them."""
    if not d.megatron_fsdp:
        return {}
    ddp = job.ddp
    return dict(
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy=d.fsdp_strategy,
        megatron_fsdp_main_params_dtype=DTYPES.get(ddp.megatron_fsdp_main_params_dtype or ""),
        megatron_fsdp_main_grads_dtype=DTYPES.get(ddp.megatron_fsdp_main_grads_dtype or ""),
    )


def _optimizer_offload(job: JobConfig) -> dict[str, Any]:
    """HybridDeviceOptimizer's keys. The gate already requires the precision-aware optimizer
    with it (as Megatron-LM does); the hybrid optimizer reuses that code path, which then needs
    no Transformer Engine."""
    opt = job.optimizer
    if not opt.optimizer_cpu_offload:
        return {}
    return dict(
        optimizer_cpu_offload=True,
        optimizer_offload_fraction=opt.optimizer_offload_fraction,
        overlap_cpu_optimizer_d2h_h2d=opt.overlap_cpu_optimizer_d2h_h2d,
        use_precision_aware_optimizer=True,
    )


def _resume_refusals(job: JobConfig, d: Derived) -> list[str]:
    """What ``--resume`` cannot measure here: the checkpoint round trip runs for real, and the
    fake process group moves no data between ranks."""
    fmt = d.resume_format
    if not d.resumes and not d.saves:
        return [
            "--resume: the job neither resumes nor saves; set checkpoint.load or checkpoint.save (the"
            " estimate's resume and save phases need them)"
        ]
    if fmt == "torch_dcp":
        return ["--resume: checkpoint.ckpt_format torch_dcp (torch FSDP2's) is not measured or modeled"]
    problems = []
    if fmt in ("torch_dist", "fsdp_dtensor") and d.world_size > 1:
        problems.append(
            f"--resume with checkpoint.ckpt_format {fmt}: the distributed checkpoint exchanges its metadata "
            "between ranks, which the fake process group does not carry; measure a world size 1 job"
        )
    if fmt == "torch" and d.use_distributed_optimizer and (d.resumes or d.world_size > 1):
        problems.append(
            "--resume with checkpoint.ckpt_format torch and the distributed optimizer: the legacy format "
            "gathers the optimizer state over Gloo, which the measurement creates only to save at world size 1"
        )
    if d.megatron_fsdp != (fmt == "fsdp_dtensor"):
        problems.append(
            "--resume: Megatron-FSDP saves and loads only checkpoint.ckpt_format fsdp_dtensor, and "
            "fsdp_dtensor needs ddp.use_megatron_fsdp"
        )
    return problems


def resume_plan(d: Derived) -> dict[str, Any]:
    """The checkpoint round trip: the runner's ``save`` phase trains and saves, the ``load``
    phase (a fresh process) loads and runs the first iteration; ``directory`` is set per run."""
    if d.use_distributed_optimizer or d.megatron_fsdp:
        sharding = "fsdp_dtensor" if d.resume_format == "fsdp_dtensor" else "dp_reshardable"
    else:
        sharding = None
    c = d.job.checkpoint
    if d.saves and d.optimizer_save_sharding in ("dp_reshardable", "fully_reshardable"):
        sharding = d.optimizer_save_sharding  # what the save writes, which the load then reads
    return {
        "format": d.resume_format,
        "load_optim": d.optimizer_loaded_at_resume,
        "fully_parallel_load": c.fully_parallel_load,
        # What Megatron-LM's _build_sharded_state_dict_metadata asks the distributed optimizer for.
        "distrib_optim_sharding_type": sharding,
        "gated_linear_unit": d.model.gated_linear_unit,  # fsdp_dtensor splits SwiGLU's fc1 halves
        "phase": "save",
        "directory": None,
        # the save (docs/save.md): only the save is measured when the job does not resume
        "save_only": not d.resumes,
        "save_optim": c.save_optim,
        "fully_parallel_save": d.save_spreads_replicated_tensors,
        "fully_reshardable_mem_efficient": c.distrib_optim_fully_reshardable_mem_efficient,
        "async_save": d.async_save,
        # the Gloo groups the legacy format's and the Gloo fully_reshardable gathers need
        "gloo": d.optimizer_save_sharding == "dp_zero"
        or (d.optimizer_save_sharding == "fully_reshardable" and not d.fully_reshardable_gathered_on_device),
    }


def plan_measurement(
    checked: CheckedJob, rank: int, iterations: int = DEFAULT_ITERATIONS, resume: bool = False
) -> MeasurePlan:
    """The plan for measuring global rank ``rank`` of a checked job (with ``resume``, its
    checkpoint round trip too); InputError lists what cannot run on one GPU (the job's own
    errors were refused by the gate already)."""
    job, d = checked.job, checked.derived
    problems = _refusals(job, d, rank, iterations) + (_resume_refusals(job, d) if resume else [])
    if problems:
        raise InputError(problems)
    m = job.model
    pp_rank = d.pp_rank_of(rank)
    distributed = d.use_distributed_optimizer
    dtype = d.param_dtype
    return MeasurePlan(
        rank=rank,
        world_size=d.world_size,
        pp_rank=pp_rank,
        chunks=_chunks(d, pp_rank),
        parallel_state=dict(
            tensor_model_parallel_size=d.tp,
            pipeline_model_parallel_size=d.pp,
            virtual_pipeline_model_parallel_size=d.vpp if d.vpp > 1 else None,
            context_parallel_size=d.cp,
            expert_model_parallel_size=d.ep,
            expert_tensor_parallel_size=d.etp,
            num_distributed_optimizer_instances=job.ddp.num_distributed_optimizer_instances,
        ),
        transformer_config=_transformer_config(job, d),
        multi_latent_attention=m.multi_latent_attention,
        model=dict(
            vocab_size=d.padded_vocab_size,
            max_sequence_length=m.seq_length,
            share_embeddings_and_output_weights=m.share_embeddings_and_output_weights,
            position_embedding_type="rope"
            if m.position_embedding_type == "yarn"
            else m.position_embedding_type,
        ),
        ddp=dict(
            grad_reduce_in_fp32=job.ddp.grad_reduce_in_fp32,
            overlap_grad_reduce=d.overlap_grad_reduce,
            overlap_param_gather=d.overlap_param_gather,
            align_param_gather=d.align_param_gather,
            use_distributed_optimizer=distributed,
            bucket_size=d.bucket_size,
            num_distributed_optimizer_instances=job.ddp.num_distributed_optimizer_instances,
            **_fsdp(job, d),
        ),
        optimizer=dict(
            optimizer="adam",
            lr=1e-4,
            bf16=dtype == "bf16",
            fp16=dtype == "fp16",
            initial_loss_scale=job.optimizer.initial_loss_scale,
            params_dtype=DTYPES[dtype],
            use_distributed_optimizer=distributed,
            overlap_param_gather=d.overlap_param_gather,
            **_optimizer_offload(job),
        ),
        schedule=Schedule(
            num_microbatches=d.num_microbatches,
            seq_length=m.seq_length,
            micro_batch_size=d.micro_batch_size,
        ),
        layer_spec="transformer_engine" if m.transformer_impl == "transformer_engine" else "local",
        core_attention=_core_attention(job),
        iterations=iterations,
        manual_gc=job.train.manual_gc,
        peft=job.peft.model_dump(mode="json") if job.peft is not None else None,
        env=_process_env(job),
        config=job.model_dump(mode="json", exclude_defaults=True),
        resume=resume_plan(d) if resume else None,
    )
