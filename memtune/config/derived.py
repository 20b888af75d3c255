"""Every fact Megatron (and torch) derive from the configuration, computed in one place.

The layout's knobs as one value (``Derived.knobs``, :class:`~memtune.config.knobs.Knobs`) and
the derived view of other knobs (``Derived.with_knobs``); parallel sizes, batches, the layer
layout per stage and chunk, the rank-to-stage mapping, the distributed optimizer in effect,
parameter and gradient dtypes, the allocator settings in effect and the fragmentation margin,
the attention and kernel flavour and software versions: every consumer
(check, estimate, measure, diagnose, plan) reads them from :class:`Derived`, and
``tests/config/test_one_home.py`` fails when one is computed elsewhere.

``derive(job)`` never raises on an inconsistent layout: it rounds the way Megatron would and
leaves the complaint to ``memtune check``; only unparsable version strings raise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from memtune.config.allocator import AllocatorSettings, allocator_settings
from memtune.config.knobs import Knobs, KnobSubset, Recompute
from memtune.config.layout import StageLayers, layout_text, parse_layout, stage_grid
from memtune.config.schema import UB_REDUCE_SCATTER, UB_RING_ONLY, JobConfig, ModelConfig
from memtune.config.versions import Version, parse_version

if TYPE_CHECKING:
    from memtune.catalog.network import Network

DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
# Transformer Engine 2.8 reads NVTE_DPA_FP8_RECIPE (the attention's own FP8 recipe) and keeps
# current-scaling and MXFP8 attention to Blackwell (25252e9f2, #2012, in release_v2.8)
TE_PER_ATTENTION_FP8 = (2, 8, 0)
# attention_backend values that `memtune measure` runs on the local spec as PyTorch's SDPA
# restricted to its flash and memory-efficient kernels (memtune/measure/sdpa_attention.py); the
# others are Megatron-Core's DotProductAttention
FLASH_BACKENDS = ("flash", "fused")
FSDP_MIN_COMMUNICATION_UNIT = 1_000_000_000  # elements
# the gradient bucket Bridge's CommOverlapConfig sets where DP > 1, in parameters (comm_overlap.py)
BRIDGE_DP_OVERLAP_BUCKET = 128 * 1024 * 1024
# The modules fine-grained activation offloading accepts (megatron-core 0.19.2, TransformerConfig).
OFFLOAD_MODULES = (
    "attn_norm",
    "qkv_linear",
    "core_attn",
    "attn_proj",
    "mlp_norm",
    "expert_fc1",
    "moe_act",
    "fused_group_mlp",
)


@dataclass(frozen=True)
class Chunk:
    """One model chunk: the layers a pipeline rank builds for one virtual stage."""

    pp_rank: int
    vp_stage: int
    layers: tuple[int, ...]  # global decoder layer indices, 0-based
    has_embedding: bool  # pre_process: first pipeline stage, first virtual stage
    has_output: bool  # post_process: last pipeline stage, last virtual stage
    mtp_layers: int  # multi-token-prediction layers, on the post-process chunk


@dataclass(frozen=True)
class UserbufferGemm:
    """How Transformer Engine overlaps one GEMM with its TP collective (``initialize_ub``):
    ``method``, the SMs the GEMM leaves to the communication kernel, and a pipelined GEMM's
    chunks (a ring exchange runs one chunk per TP rank)."""

    method: str
    margin_sms: int
    splits: int

    @property
    def gemm_calls(self) -> int:
        """The GEMM calls it runs (TransformerEngine d0067d0 ``comm_gemm_overlap.cpp``): one per
        chunk of a ring exchange or a pipelined reduce-scatter, one for a bulk overlap."""
        return 1 if self.method == "bulk" else self.splits


@dataclass(frozen=True)
class Derived:
    job: JobConfig

    @property
    def model(self) -> ModelConfig:
        return self.job.model

    # --- the layout's knobs ---------------------------------------------------------------
    @cached_property
    def knobs(self) -> Knobs:
        """The job's value of every knob ``memtune plan`` varies."""
        m, job = self.model, self.job
        opt, ddp = job.optimizer, job.ddp
        granularity = m.recompute_granularity
        if granularity == "full":
            recompute = Recompute(
                "full", layers=m.recompute_num_layers or 1, method=m.recompute_method or "block"
            )
        elif granularity == "selective":
            recompute = Recompute("selective", self.recompute_modules)
        else:
            recompute = Recompute()
        sharding = "fsdp" if self.megatron_fsdp else "distopt" if self.use_distributed_optimizer else "ddp"
        accounted = m.account_for_embedding_in_pipeline_split and m.account_for_loss_in_pipeline_split
        first, last = m.num_layers_in_first_pipeline_stage, m.num_layers_in_last_pipeline_stage
        layout = m.pipeline_model_parallel_layout
        if layout is not None:
            split = "layout"
        elif (first or last) and self.pp > 1:
            split = "uneven"
        else:
            split = "accounted" if accounted else "even"
        return Knobs(
            tp=self.tp,
            pp=self.pp,
            vpp=self.vpp,
            cp=self.cp,
            ep=self.ep,
            etp=self.etp,
            mbs=self.micro_batch_size,
            sp=m.sequence_parallel,
            recompute=recompute,
            sharding=sharding,
            offload=opt.optimizer_offload_fraction if opt.optimizer_cpu_offload else 0.0,
            act_offload=m.cpu_offloading_num_layers if m.cpu_offloading else 0,
            regather=bool(job.peft is not None and job.peft.sequence_parallel_input_regather),
            split=split,
            fsdp_strategy=ddp.data_parallel_sharding_strategy if self.megatron_fsdp else "optim_grads_params",
            first_stage_layers=(first or 0) if split == "uneven" else 0,
            last_stage_layers=(last or 0) if split == "uneven" else 0,
            pipeline_layout=layout_text(layout) if layout is not None else None,
        )

    def with_knobs(self, knobs: Knobs) -> Derived:
        """The derived facts of this job with ``knobs`` set (the keys ``Knobs.changes`` names).

        The job is built without re-validating it, so the planner can afford one per layout;
        ``tests/plan/test_fast.py`` checks it equals the validated job ``with_changes`` gives."""
        sections: dict[str, dict[str, Any]] = {}
        for section, key, value in knobs.settings(self):
            sections.setdefault(section, {})[key] = value
        job = self.job
        # The model section differs from one candidate to the next; the others take a few
        # values each over a whole search, so their copies are kept on this Derived and shared
        # (as the sections no knob touches are shared with this job).
        copies: dict[tuple[Any, ...], Any] = self.__dict__.setdefault("_sections_by_knobs", {})
        update = {}
        for name, values in sections.items():
            if name == "model":
                update[name] = job.model.model_copy(update=values)
                continue
            values_key = (name, *values.items())
            copy = copies.get(values_key)
            if copy is None:
                copy = copies[values_key] = getattr(job, name).model_copy(update=values)
            update[name] = copy
        view = Derived(job.model_copy(update=update))
        # What the knobs do not change carries over, and views with the same pipeline knobs share
        # one layer layout (kept on this Derived, outside its fields): the planner builds a view
        # per candidate it estimates or predicts.
        for name in KNOB_FREE_FACTS:
            view.__dict__[name] = getattr(self, name)
        layouts: dict[tuple[Any, ...], Any] = self.__dict__.setdefault("_layouts_by_knobs", {})
        chunk_key = self.CHUNK_KNOBS.key(knobs)
        shared = layouts.get(chunk_key)
        if shared is None:
            shared = layouts[chunk_key] = (view.chunks, view.layers_per_stage)
        view.__dict__["chunks"], view.__dict__["layers_per_stage"] = shared
        # The job's knobs read back are the knobs set (tests/plan/test_fast.py): no need to
        # read them back from its sections.
        view.__dict__["knobs"] = knobs
        return view

    @cached_property
    def stack(self) -> str:
        """Which stack builds the job: megatron-core, megatron-lm or megatron-bridge. The two
        launchers forgive some settings Megatron-Core refuses (see memtune/config/stacks.py)."""
        return self.job.defaults

    # --- architecture -------------------------------------------------------------------
    @cached_property
    def ffn_hidden_size(self) -> int:
        return self.model.ffn_hidden_size or 4 * self.model.hidden_size

    @cached_property
    def fc1_width_factor(self) -> int:
        """The MLP's fc1 is this many times the FFN width: 2 for a gated linear unit (its gate and
        linear halves), else 1."""
        return 2 if self.model.gated_linear_unit else 1

    @cached_property
    def kv_channels(self) -> int:
        return self.model.kv_channels or self.model.hidden_size // self.model.num_attention_heads

    @cached_property
    def num_query_groups(self) -> int:
        return self.model.num_query_groups or self.model.num_attention_heads

    @cached_property
    def query_groups_per_tp_rank(self) -> float:
        """Key/value heads on one tensor-parallel rank; at least one, since Megatron-Core
        replicates a group when TP exceeds the group count."""
        return max(self.num_query_groups / self.tp, 1)

    @cached_property
    def moe_ffn_hidden_size(self) -> int:
        return self.model.moe_ffn_hidden_size or self.ffn_hidden_size

    @cached_property
    def num_experts(self) -> int:
        """Routed experts per MoE layer; 0 for a dense model."""
        return self.model.num_moe_experts or 0

    @cached_property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @cached_property
    def local_experts(self) -> int:
        """Routed experts each EP rank holds of a MoE layer (Megatron-Core splits them evenly
        over EP; ``num_moe_experts`` must divide by EP); 0 for a dense model."""
        return self.num_experts // self.ep

    @cached_property
    def experts_are_sequential_modules(self) -> bool:
        """The routed experts are Megatron-Core's ``SequentialMLP``, one module per local expert
        run one after another: always on the local spec, and on Transformer Engine's without
        ``moe_grouped_gemm`` (megatron-core 0.19.2 ``models/backends.py`` and
        ``extensions/transformer_engine_spec_provider.py`` ``grouped_mlp_modules``)."""
        return self.is_moe and (not self.transformer_engine or not self.model.moe_grouped_gemm)

    @cached_property
    def experts_weighted_fused_activation(self) -> bool:
        """Grouped experts scale each row by its router probability inside Megatron-Core's fused
        activation, whose backward also reduces that probability's gradient over the row
        (megatron-core 0.19.2 ``moe/experts.py``: ``weighted_bias_swiglu_impl`` or
        ``weighted_bias_quick_geglu_impl`` under ``bias_activation_fusion``, the GLUs it fuses)."""
        m = self.model
        return (
            self.is_moe
            and not self.experts_are_sequential_modules
            and m.bias_activation_fusion
            and m.gated_linear_unit
            and m.activation_func in ("silu", "quick_gelu")
        )

    @cached_property
    def experts_clamp_eagerly(self) -> bool:
        """Grouped experts clamp their GLU halves in eager ops before Megatron-Core's fused
        weighted quick-GeGLU (GPT-OSS's ``activation_func_clamp_value``): a chunk, two clamps and
        a concatenation (megatron-core 0.19.2 ``fusions/fused_bias_geglu.py``
        ``weighted_bias_quick_geglu_impl``, which ``moe/experts.py`` calls with
        ``bias_activation_fusion``). Forward they move the fc1 output twice more, backward the
        clamps' gradients do, and the clamped copy is kept for the fused kernel's backward beside
        the unclamped one the clamps keep."""
        m = self.model
        return (
            self.experts_weighted_fused_activation
            and m.activation_func == "quick_gelu"
            and m.activation_func_clamp_value is not None
        )

    @cached_property
    def moe_layer_pattern(self) -> tuple[bool, ...]:
        """Whether each decoder layer is an MoE layer (Megatron's ``moe_layer_freq``)."""
        n = self.model.num_layers
        if not self.is_moe:
            return (False,) * n
        freq = self.model.moe_layer_freq
        if isinstance(freq, list):
            return tuple(bool(x) for x in freq)
        return tuple(i % freq == 0 for i in range(n))

    @cached_property
    def window_attention_pattern(self) -> tuple[bool, ...]:
        """Whether each decoder layer attends within ``window_size`` (Megatron-Core
        ``transformer/utils.py is_layer_window_attention``, layers numbered from 1: with an
        integer ``window_attn_skip_freq`` N, every N-th layer attends in full)."""
        m = self.model
        n = m.num_layers
        if not m.window_size:
            return (False,) * n
        freq = m.window_attn_skip_freq
        if freq is None:
            return (True,) * n
        if isinstance(freq, list):
            return tuple(bool(x) for x in freq)
        return tuple((i + 1) % freq != 0 for i in range(n))

    @cached_property
    def padded_vocab_size(self) -> int:
        multiple = self.model.make_vocab_size_divisible_by * self.tp
        return math.ceil(self.model.vocab_size / multiple) * multiple

    @cached_property
    def mtp_num_layers(self) -> int:
        return self.model.mtp_num_layers or 0

    # --- parallel sizes -----------------------------------------------------------------
    @cached_property
    def tp(self) -> int:
        return self.model.tensor_model_parallel_size

    @cached_property
    def pp(self) -> int:
        return self.model.pipeline_model_parallel_size

    @cached_property
    def vpp(self) -> int:
        """Virtual stages per pipeline rank; a stage layout sets it (Megatron-LM's arguments.py)."""
        if self.stage_layout is not None:
            return len(self.stage_layout[0])
        return self.model.virtual_pipeline_model_parallel_size or 1

    @cached_property
    def stage_layout(self) -> list[list[StageLayers]] | None:
        """``[pp_rank][vp_stage]`` decoder and MTP layers of ``pipeline_model_parallel_layout``."""
        layout = self.model.pipeline_model_parallel_layout
        return None if layout is None else stage_grid(parse_layout(layout), self.pp)

    @cached_property
    def cp(self) -> int:
        return self.model.context_parallel_size

    @cached_property
    def cp_all_to_all_size(self) -> int:
        """CP ranks among which attention splits its heads by all-to-all (Transformer Engine
        ``AttnFuncWithCPAndQKVOA2A``, d0067d0 ``context_parallel.py``): all of CP under ``a2a``,
        the first hierarchical group under ``a2a+p2p`` (consecutive CP ranks, Megatron-Core
        ``create_hierarchical_groups``), otherwise none (1)."""
        m = self.model
        if self.cp == 1 or m.cp_comm_type not in ("a2a", "a2a+p2p"):
            return 1
        if m.cp_comm_type == "a2a":
            return self.cp
        sizes = m.hierarchical_context_parallel_sizes
        return sizes[0] if sizes else 1

    @cached_property
    def cp_comm_type_for_attention(self) -> str:
        """The CP exchange this job's attention can take: its own, unless a sliding window or an
        offset softmax rules the ring out (Transformer Engine's assertions, check SEQ007 and
        SEQ008); then the all-to-all, which carries both."""
        m = self.model
        windowed = any(self.window_attention_pattern) and m.cp_comm_type not in ("a2a", "all_gather")
        offset = m.softmax_type != "vanilla" and m.cp_comm_type != "a2a"
        return "a2a" if windowed or offset else m.cp_comm_type

    def hierarchical_cp_sizes(self, cp: int) -> list[int] | None:
        """``hierarchical_context_parallel_sizes`` for CP ``cp``: the job's all-to-all group
        kept and the ring grown to the rest; the job's own sizes where its group does not divide
        ``cp`` (check SEQ006 then refuses the layout)."""
        sizes = self.model.hierarchical_context_parallel_sizes
        if not sizes or cp % sizes[0]:
            return sizes
        return [sizes[0], cp // sizes[0]]

    @cached_property
    def cp_ring_size(self) -> int:
        """CP ranks that pass K/V chunks around a ring behind the attention (``p2p``, and the
        second hierarchical group of ``a2a+p2p``); 1 where CP exchanges no ring."""
        if self.cp == 1 or self.model.cp_comm_type in ("a2a", "all_gather"):
            return 1
        return self.cp // self.cp_all_to_all_size

    @cached_property
    def ep(self) -> int:
        return self.model.expert_model_parallel_size

    @cached_property
    def etp(self) -> int:
        return self.model.expert_tensor_parallel_size or self.tp

    @cached_property
    def experts_use_expert_groups(self) -> bool:
        """Routed-expert parameters take the expert process groups, and with them optimizer
        param groups of their own, only when EP > 1 or ETP differs from TP
        (megatron/core/tensor_parallel/layers.py ``use_expert_pgs``, megatron-core 0.19.2);
        otherwise Megatron steps them with the dense parameters."""
        return self.num_experts > 0 and (self.ep > 1 or self.etp != self.tp)

    @cached_property
    def sequence_parallel(self) -> bool:
        """Megatron-LM and Megatron-Bridge turn SP off when TP is 1 (Megatron-Core refuses it)."""
        return self.model.sequence_parallel and self.tp > 1

    @cached_property
    def world_size(self) -> int:
        """The given world size or, without one, the smallest one the layout allows (DP = 1)."""
        if self.job.cluster.num_gpus:
            return self.job.cluster.num_gpus
        dense = self.tp * self.pp * self.cp
        expert = self.etp * self.ep * self.pp
        return dense * expert // math.gcd(dense, expert)

    @cached_property
    def world_size_assumed(self) -> bool:
        return self.job.cluster.num_gpus is None

    @cached_property
    def dp(self) -> int:
        """Data-parallel size; like Megatron's it excludes CP."""
        return max(1, self.world_size // (self.tp * self.pp * self.cp))

    @cached_property
    def edp(self) -> int:
        """Expert data-parallel size (CP folded in)."""
        return max(1, self.world_size // (self.etp * self.ep * self.pp))

    def pp_rank_of(self, global_rank: int) -> int:
        """Pipeline stage of a global rank under Megatron-Core's default order ``tp-cp-ep-dp-pp``
        (pipeline outermost, so each stage holds ``world_size / pp`` consecutive ranks)."""
        return global_rank // (self.world_size // self.pp)

    def dp_cp_rank_of(self, global_rank: int) -> int:
        """A global rank's place in its data-parallel x context-parallel group, which the
        distributed optimizer shards dense parameters over (order ``tp-cp-ep-dp-pp``)."""
        return (global_rank // self.tp) % (self.dp * self.cp)

    def expert_dp_rank_of(self, global_rank: int) -> int:
        """A global rank's place in its expert data-parallel group (expert grid
        ``etp-ep-edp-pp``), which shards routed experts."""
        return (global_rank // (self.etp * self.ep)) % self.edp

    @cached_property
    def bridge_sets_dp_overlap(self) -> bool:
        """Megatron-Bridge's CommOverlapConfig sets the data-parallel overlaps at setup, over the
        ddp section's (``comm_overlap.py`` ``_get_optimizer_overlap_cfgs`` at 067f987df03b, applied
        with the distributed optimizer): where the job has one that leaves them unset."""
        return self.job.ddp.overlap_by_data_parallel_size and self.use_distributed_optimizer

    @cached_property
    def overlap_grad_reduce(self) -> bool:
        """The gradient reduce-scatter runs bucket by bucket beside the backward: as the ddp
        section says, or under Bridge's CommOverlapConfig exactly where DP > 1."""
        return self.dp > 1 if self.bridge_sets_dp_overlap else self.job.ddp.overlap_grad_reduce

    @cached_property
    def overlap_param_gather(self) -> bool:
        """The distributed optimizer's parameter all-gather runs beside the next forward: as the
        ddp section says, or under Bridge's CommOverlapConfig exactly where DP > 1."""
        return self.dp > 1 if self.bridge_sets_dp_overlap else self.job.ddp.overlap_param_gather

    @cached_property
    def align_param_gather(self) -> bool:
        """Every virtual stage's parameter gather issued at once (Megatron-LM's
        ``--align-param-gather``): Bridge's CommOverlapConfig turns it on where DP > 1 under an
        interleaved pipeline."""
        return self.bridge_sets_dp_overlap and self.dp > 1 and self.pp > 1 and self.vpp > 1

    @cached_property
    def bucket_size(self) -> int | None:
        """``ddp.bucket_size`` as Megatron gets it: Bridge's CommOverlapConfig sets 128 Mi
        parameters where DP > 1 and none where DP = 1."""
        if self.bridge_sets_dp_overlap:
            return BRIDGE_DP_OVERLAP_BUCKET if self.dp > 1 else None
        return self.job.ddp.bucket_size

    def ddp_bucket_size(self, data_parallel_size: int) -> int | None:
        """Parameters per gradient bucket (megatron-core 0.19.2, ``DistributedDataParallel``):
        ``bucket_size`` or max(4e7, 1e6 x DP); one bucket per buffer without
        ``overlap_grad_reduce``."""
        if not self.overlap_grad_reduce:
            return None
        return self.bucket_size or max(40_000_000, 1_000_000 * data_parallel_size)

    # --- batches ------------------------------------------------------------------------
    @cached_property
    def micro_batch_size(self) -> int:
        return self.job.train.micro_batch_size

    @cached_property
    def global_batch_size(self) -> int:
        return self.job.train.global_batch_size or self.micro_batch_size * self.dp

    @cached_property
    def num_microbatches(self) -> int:
        return max(1, self.global_batch_size // (self.micro_batch_size * self.dp))

    # --- recompute ----------------------------------------------------------------------
    @cached_property
    def recompute_granularity(self) -> str | None:
        """None, ``selective`` or ``full``."""
        return self.model.recompute_granularity

    @cached_property
    def recompute_modules(self) -> tuple[str, ...]:
        """Selective-recompute modules in effect (Megatron's default is ``core_attn``)."""
        if self.model.recompute_granularity != "selective":
            return ()
        modules = self.model.recompute_modules
        return DEFAULT_RECOMPUTE_MODULES if modules is None else tuple(modules)

    @cached_property
    def recomputable_modules(self) -> tuple[str, ...]:
        """The selective-recompute modules that exist in this model, in Megatron-Core's order
        (transformer_config.py ``recompute_modules``): MoE ones only with experts, ``mlp`` only
        with a dense layer, ``mla_up_proj`` only with multi-latent attention, ``shared_experts``
        only with shared experts. Whether one saves anything is memtune check's to say."""
        m = self.model
        present = {
            "core_attn": True,
            "moe_act": self.is_moe,
            "layernorm": True,
            "mla_up_proj": m.multi_latent_attention,
            "mlp": not all(self.moe_layer_pattern),
            "moe": self.is_moe,
            "shared_experts": self.is_moe and bool(m.moe_shared_expert_intermediate_size),
        }
        return tuple(module for module, here in present.items() if here)

    def full_recompute_groups(self, layers: int) -> list[tuple[int, bool]]:
        """How a chunk of ``layers`` transformer layers runs under autograd: (layers in the unit,
        checkpointed), in order. Full recompute ``uniform`` checkpoints consecutive groups of
        ``recompute_num_layers``; ``block`` checkpoints the first ``recompute_num_layers`` layers
        one by one (megatron-core 0.19.2, ``TransformerBlock._checkpointed_forward``); otherwise
        every layer is its own unit and none is checkpointed."""
        m = self.model
        if m.recompute_granularity != "full":
            return [(1, False)] * layers
        k = m.recompute_num_layers or 1
        if m.recompute_method == "uniform":
            return [(min(k, layers - i), True) for i in range(0, layers, k)]
        return [(1, i < k) for i in range(layers)]

    @cached_property
    def recomputed_layers_per_chunk(self) -> int:
        """Layers full recompute replays in the largest chunk in each backward (0 without)."""
        if self.model.recompute_granularity != "full" or not self.layers_per_stage:
            return 0
        chunk_layers = max(self.layers_per_stage) // self.vpp
        return sum(n for n, checkpointed in self.full_recompute_groups(chunk_layers) if checkpointed)

    # --- precision and optimizer ---------------------------------------------------------
    @cached_property
    def param_dtype(self) -> str:
        """Dtype of the model's weights: ``bf16``, ``fp16`` or ``fp32``."""
        return "bf16" if self.model.bf16 else "fp16" if self.model.fp16 else "fp32"

    @cached_property
    def half_precision(self) -> bool:
        return self.param_dtype != "fp32"

    @cached_property
    def grad_dtype(self) -> str:
        """Dtype of the gradient buffer: fp32 with ``grad_reduce_in_fp32`` or fp32 weights.

        Megatron-FSDP ignores ``grad_reduce_in_fp32``: its main-gradient buffer takes
        ``megatron_fsdp_main_grads_dtype``, and without one (Megatron-LM's ``auto``) the
        weights' dtype (megatron-core 0.19.2, ``ParamAndGradBuffer._resolve_group_grad_dtype``)."""
        ddp = self.job.ddp
        if self.megatron_fsdp:
            return ddp.megatron_fsdp_main_grads_dtype or self.param_dtype
        return "fp32" if ddp.grad_reduce_in_fp32 or not self.half_precision else self.param_dtype

    @cached_property
    def pipeline_dtype(self) -> str:
        """Dtype of tensors sent between stages (Megatron-LM and Bridge fill it from the weights)."""
        return self.model.pipeline_dtype or self.param_dtype

    @cached_property
    def use_distributed_optimizer(self) -> bool:
        """Megatron-Bridge turns both flags on when either is on, and Megatron-LM has one flag
        for both, so the optimizer is distributed when either section asks for it. Megatron-LM
        also turns it on for Megatron-FSDP (version 1), which shards through it."""
        ddp = self.job.ddp
        return (
            ddp.use_distributed_optimizer
            or self.job.optimizer.use_distributed_optimizer
            or ddp.use_megatron_fsdp
        )

    @cached_property
    def optimizer_offload_fraction(self) -> float:
        """Share of the optimizer state kept on the host: ``optimizer_offload_fraction`` with
        ``optimizer_cpu_offload``, else 0."""
        opt = self.job.optimizer
        return opt.optimizer_offload_fraction if opt.optimizer_cpu_offload else 0.0

    @cached_property
    def megatron_fsdp(self) -> bool:
        """The model is wrapped in Megatron-FSDP rather than Megatron's DDP."""
        return self.job.ddp.use_megatron_fsdp

    @cached_property
    def fsdp_strategy(self) -> str:
        """Megatron-FSDP's sharding strategy in effect, ``no_shard`` without FSDP."""
        ddp = self.job.ddp
        return ddp.data_parallel_sharding_strategy if ddp.use_megatron_fsdp else "no_shard"

    @cached_property
    def fsdp_sharded_groups(self) -> tuple[bool, bool]:
        """Whether Megatron-FSDP's dense groups (DP x CP) and its expert groups (expert DP) span
        more than one rank; a group of one keeps its whole buffer and gathers nothing."""
        return self.dp * self.cp > 1, self.edp > 1

    @cached_property
    def fsdp_main_params_dtype(self) -> str | None:
        """Dtype of Megatron-FSDP's main-weight buffer, which the optimizer steps; ``None``
        (Megatron-LM's ``auto``) builds none and steps the model-weight buffer itself."""
        return self.job.ddp.megatron_fsdp_main_params_dtype

    def fsdp_communication_unit(self, mean_unit_params: float) -> float:
        """Megatron-FSDP's communication unit in elements (megatron-core 0.19.2,
        ``MegatronFSDP._init_fsdp_param_and_grad_buffer``): twice a mean FSDP unit under
        ``optim_grads_params``, else the bucket size, else 1e9, and never below 1e9. The
        reduce-scatter queue holds unsharded gradient buckets up to this many elements and
        the all-gather prefetches half of it ahead."""
        if self.fsdp_strategy == "optim_grads_params":
            unit = 2 * mean_unit_params
        else:
            unit = self.bucket_size or FSDP_MIN_COMMUNICATION_UNIT
        return max(FSDP_MIN_COMMUNICATION_UNIT, unit)

    # --- implementation flavour --------------------------------------------------------
    @cached_property
    def transformer_engine(self) -> bool:
        return self.model.transformer_impl == "transformer_engine"

    @cached_property
    def eager_elementwise(self) -> bool:
        """The work around the GEMMs (norms, RoPE, activation, residual additions) runs as
        PyTorch's eager kernels: Megatron-Core's local spec (torch norms, unfused RoPE);
        Transformer Engine fuses it."""
        return self.model.transformer_impl == "local"

    @cached_property
    def memory_efficient_sdpa(self) -> bool:
        """The core attention runs PyTorch's memory-efficient SDPA kernel: the local spec's SDPA
        stand-in (``FLASH_BACKENDS``) for multi-latent attention, whose q/k head dim (with the
        RoPE part) differs from v's, which PyTorch's flash kernel does not take."""
        m = self.model
        return (
            m.transformer_impl == "local"
            and m.attention_backend in FLASH_BACKENDS
            and m.multi_latent_attention
            and m.qk_head_dim + m.qk_pos_emb_head_dim != m.v_head_dim
        )

    @cached_property
    def rotary_embeddings(self) -> bool:
        """q and k are rotated in every layer: RoPE and its YaRN scaling (Megatron-Core's
        ``RotaryEmbedding`` / ``YarnRotaryEmbedding``); learned absolute positions are added once
        at the embedding."""
        return self.model.position_embedding_type in ("rope", "yarn")

    @cached_property
    def adam_kernel(self) -> Literal["fused", "foreach"]:
        """Which Adam step runs: Transformer Engine's (or Apex's) fused multi-tensor Adam, or,
        on the local spec (neither installed), torch's AdamW in its default foreach form, which
        Megatron-Core falls back to (benchmarks/measured/README.md, "Optimizer")."""
        return "foreach" if self.model.transformer_impl == "local" else "fused"

    @cached_property
    def separate_input_norm(self) -> bool:
        """The attention's input norm is a module of its own (Megatron-Core's layer specs): on
        the local spec, and for multi-latent attention; Transformer Engine's spec otherwise
        fuses it into the QKV linear (``TELayerNormColumnParallelLinear``)."""
        return not self.transformer_engine or self.model.multi_latent_attention

    @cached_property
    def flash_attention(self) -> bool:
        """Flash, fused or cuDNN attention: no ``s x s`` score matrix is kept. ``auto`` picks a
        fused kernel only on the Transformer Engine spec."""
        backend = self.model.attention_backend
        return backend in ("flash", "fused") or (backend == "auto" and self.transformer_engine)

    @cached_property
    def attention_kernel(self) -> Literal["flash", "cudnn", "memory_efficient", "unfused"]:
        """The core attention's kernel, as the step model prices it. On the local spec: the SDPA
        stand-in's flash kernel (``FLASH_BACKENDS``; PyTorch's memory-efficient one for
        multi-latent attention, :attr:`memory_efficient_sdpa`), else Megatron's unfused
        ``DotProductAttention``. On Transformer Engine's spec ``flash`` runs TE's FlashAttention
        backend (the flash-attn package), ``fused`` cuDNN's fused attention, and ``auto`` cuDNN's
        as well: TE prefers ``FusedAttention`` over FlashAttention on Hopper and later when both
        can run (TransformerEngine d0067d0, ``pytorch/attention/dot_product_attention/utils.py``,
        ``get_attention_backend``); ``unfused``/``local`` run TE's unfused attention."""
        backend = self.model.attention_backend
        if self.memory_efficient_sdpa:
            return "memory_efficient"
        if not self.flash_attention:
            return "unfused"
        if self.transformer_engine and backend != "flash":
            return "cudnn"
        return "flash"

    @cached_property
    def fp8_weight_copies(self) -> Literal["none", "cached", "per_microbatch"]:
        """The FP8 copies of the weights an FP8 job's Transformer Engine linears keep beside the
        weights (TransformerEngine d0067d0 ``pytorch/module/linear.py`` ``Linear.forward``,
        ``module/base.py`` ``quantize_weight``; Megatron-Core 0.19 ``extensions/
        transformer_engine.py``): ``none`` with ``fp8_param_gather``, whose parameters are FP8
        tensors themselves (and without FP8 or TE); ``cached``, one copy for the run, refreshed
        at each step's first microbatch (Megatron passes ``is_first_microbatch``, TE keeps it in
        ``_fp8_workspaces``); ``per_microbatch`` with ``disable_parameter_transpose_cache``
        (``is_first_microbatch=None``): every forward quantizes the weights afresh and saves the
        copy for its backward."""
        m = self.model
        if m.fp8 is None or not self.transformer_engine or m.fp8_param_gather:
            return "none"
        return "per_microbatch" if m.disable_parameter_transpose_cache else "cached"

    @cached_property
    def fp8_attention_requested(self) -> bool:
        """``fp8_dot_product_attention`` reaches Transformer Engine: set on an FP8 job of the TE
        spec whose recipe Megatron-Core builds with ``fp8_dpa`` (delayed, current and MXFP8
        scaling; block scaling without it: ``fp8_utils.py`` at core_v0.19.0)."""
        m = self.model
        return (
            m.fp8_dot_product_attention
            and m.fp8 is not None
            and self.transformer_engine
            and m.fp8_recipe != "blockwise"
        )

    @cached_property
    def attention_fp8_recipe(self) -> str | None:
        """The FP8 recipe the core attention runs, None where it runs in bf16 (or fp16).

        Where :attr:`fp8_attention_requested`, the attention takes the linears' recipe unless
        ``NVTE_DPA_FP8_RECIPE`` names another, or ``F16`` (read from TE 2.8,
        ``TE_PER_ATTENTION_FP8``; TransformerEngine d0067d0 ``dot_product_attention.py``). Only
        cuDNN's fused kernel trains FP8 attention (``get_attention_backend`` turns flash
        attention 2, 3 and 4 and the unfused path off for FP8 training): on any other kernel the
        job fails at its first forward (check SEQ014), and this is None."""
        if not self.fp8_attention_requested or self.attention_kernel != "cudnn":
            return None
        override = self.job.env.NVTE_DPA_FP8_RECIPE
        if override is None or self.te_version < TE_PER_ATTENTION_FP8:
            return self.model.fp8_recipe
        return {
            "DelayedScaling": "delayed",
            "Float8CurrentScaling": "tensorwise",
            "MXFP8BlockScaling": "mxfp8",
        }.get(override)

    @cached_property
    def fp8_attention_needs_blackwell(self) -> bool:
        """FP8 attention in current or MXFP8 scaling, which TE runs only on compute capability
        10.0 and later from 2.8 on (``TE_PER_ATTENTION_FP8``; d0067d0 ``get_attention_backend``:
        "Disabling FusedAttention for FP8 current scaling on arch < sm100", the same for MXFP8).
        Before 2.8 (up to its dev builds, such as c47f329b) current scaling ran on Hopper."""
        return (
            self.attention_fp8_recipe in ("tensorwise", "mxfp8") and self.te_version >= TE_PER_ATTENTION_FP8
        )

    @cached_property
    def fp8_attention(self) -> bool:
        """The core attention runs in FP8 (:attr:`attention_fp8_recipe`), forward and backward
        (``NVTE_FP8_DPA_BWD`` defaults to 1)."""
        return self.attention_fp8_recipe is not None

    @cached_property
    def attention_saved_output_bytes(self) -> float:
        """Bytes per element of the core attention's output that the fused attention itself
        keeps for its backward, beyond what ``linear_proj`` keeps of the same tensor
        (TransformerEngine d0067d0 ``FusedAttnFunc.forward``). In bf16 TE keeps the output it
        returns; ``linear_proj`` keeps a view of it when its GEMM runs in bf16 (nothing beyond),
        and an FP8 copy of its own when it runs in FP8, so the bf16 output stays as well. In FP8
        attention, delayed scaling keeps an FP8 copy of the output (1) and returns a dequantized
        one that ``linear_proj`` casts again; current and MXFP8 scaling keep the bf16 output
        (``NVTE_DPA_FP8CS_O_in_F16`` defaults to 1). 0 where the kernel is not TE's fused or
        flash one, or the output is recomputed (``core_attn``)."""
        if not (self.transformer_engine and self.flash_attention) or "core_attn" in self.recompute_modules:
            return 0.0
        if self.attention_fp8_recipe == "delayed":
            return 1.0
        return DTYPE_BYTES[self.activation_dtype] if self.fp8_activations else 0.0

    @cached_property
    def attention_saved_input_bytes(self) -> float:
        """Bytes per element of the q, k and v the fused attention keeps for its backward: FP8
        copies (1) in FP8 attention (``combine_and_quantize``, TransformerEngine d0067d0
        ``FusedAttnFunc.forward``), the activations' own width otherwise."""
        return 1.0 if self.fp8_attention else DTYPE_BYTES[self.activation_dtype]

    @cached_property
    def qk_norm_consistency_checks(self) -> int:
        """Comparisons read on the host in each attention forward under ``test_mode``
        (megatron-core ``SelfAttention.run_realtime_tests``, Megatron-LM d98e8a64dd
        ``transformer/attention.py``): with ``qk_layernorm``, the Q and K norms' weights and
        biases (four tensors) are all-gathered over the data-parallel group (CP excluded) and over
        the tensor-parallel group, and each rank's gathered copy of each tensor is asserted equal to
        the local one, an ``assert torch.all(...)`` that makes the host wait for the GPU; 0 without
        either, and under multi-latent attention, whose own QKV path runs no tests."""
        m = self.model
        if not (m.test_mode and m.qk_layernorm) or m.multi_latent_attention:
            return 0
        return 4 * (self.dp + self.tp)

    @cached_property
    def sinkhorn_routing(self) -> bool:
        """The MoE routers balance their logits with Sinkhorn in training
        (``moe_router_load_balancing_type: sinkhorn``; megatron-core
        ``TopKRouter.sinkhorn_load_balancing`` and ``moe_utils.sinkhorn``): a loop of row and
        column normalisations whose ``while error > tol`` reads the error on the host, so each
        iteration of each MoE layer's forward waits for the GPU."""
        return self.is_moe and self.model.moe_router_load_balancing_type == "sinkhorn"

    @cached_property
    def moe_forward_syncs_host(self) -> bool:
        """Each MoE layer's forward makes the host wait for the GPU: the token dispatcher copies
        the tokens per expert to the host and synchronises on it (megatron-core 0.19.2
        ``transformer/moe/token_dispatcher.py``: the all-to-all dispatcher's
        ``_maybe_dtoh_and_synchronize``, the all-gather dispatcher's ``.cpu()``; the experts'
        ``tokens_per_expert.tolist()`` in ``experts.py``), except with inputs padded to capacity
        (``moe_pad_expert_input_to_capacity``: the splits are known on the host)."""
        return self.is_moe and not self.model.moe_pad_expert_input_to_capacity

    @cached_property
    def overlap_p2p_comm(self) -> bool:
        """The pipeline's sends and receives run unbatched beside the compute: Megatron-LM turns
        ``overlap_p2p_comm`` on with the interleaved schedule and off without it (``arguments.py``,
        ``--no-overlap-p2p-communication``), Megatron-Bridge likewise with VPP; Megatron-Core's
        own default (``ModelParallelConfig``) is off."""
        return self.pp > 1 and self.vpp > 1 and self.stack != "megatron-core"

    @cached_property
    def pipeline_p2p_syncs_host(self) -> bool:
        """Every pipeline exchange makes the host wait for the GPU: batched P2P
        (``batch_p2p_comm``, which is ``not overlap_p2p_comm``, Megatron-LM's
        ``training/argument_utils.py``) synchronizes the device after each batch while
        ``batch_p2p_sync`` is on, its default (megatron-core 0.19.2
        ``pipeline_parallel/p2p_communication.py``), so the host cannot run ahead across passes."""
        return self.pp > 1 and not self.overlap_p2p_comm

    @cached_property
    def wgrad_accumulates_in_gemm(self) -> bool:
        """The linear layers' weight-gradient GEMMs add into the fp32 main gradient themselves
        (``gradient_accumulation_fusion``: Transformer Engine's ``fuse_wgrad_accumulation``, or
        Megatron's ``fused_weight_gradient_mlp_cuda`` on the local spec), so only the other
        parameters (embeddings, norms, routers) go through DDP's backward hook, which adds each
        parameter's bf16 gradient into ``main_grad`` every microbatch (megatron-core 0.19.2
        ``distributed/distributed_data_parallel.py``, ``_make_backward_post_hook``)."""
        return self.model.gradient_accumulation_fusion

    @cached_property
    def fused_activation(self) -> bool:
        """The bias-SwiGLU/GeLU fusion runs (``bias_activation_fusion`` with a SiLU or GeLU
        activation): the MLP keeps only the fc1 output for the activation's backward."""
        m = self.model
        return m.bias_activation_fusion and m.activation_func in ("silu", "gelu")

    @cached_property
    def fp8_activations(self) -> bool:
        """Transformer Engine keeps FP8 copies (1 byte) of linear inputs for backward."""
        return self.transformer_engine and self.model.fp8 is not None

    @cached_property
    def pipeline_outputs_kept(self) -> bool:
        """Megatron-Core's schedule keeps each output it sends to the next stage until that
        microbatch's backward, unless ``deallocate_pipeline_outputs`` frees it once sent."""
        return not self.model.deallocate_pipeline_outputs

    @cached_property
    def fused_softmax_kernel(self) -> bool:
        """Megatron's fused scale-mask-softmax kernel runs in unfused attention.

        ``FusedScaleMaskSoftmax.is_kernel_available`` (megatron-core 0.19.2,
        ``megatron/core/fusions/fused_softmax.py``): fusion asked for, half-precision scores,
        ``16 < sk <= 4096``, ``sq`` and ``sk`` multiples of 4, and ``b * heads / TP`` a multiple of
        4 and of the kernel's batches per block (apex's ``get_batch_per_block``; causal mask).
        Otherwise the torch softmax runs, in fp32 unless ``attention_softmax_in_fp32`` is off.
        On the TE spec TE's own module and rule run (:attr:`te_fused_softmax_kernel`).
        """
        if self.transformer_engine:
            return self.te_fused_softmax_kernel
        m = self.model
        if not m.masked_softmax_fusion or self.flash_attention or not self.half_precision:
            return False
        if m.multi_latent_attention:
            return False
        sq = sk = m.seq_length // self.cp
        attn_batches = self.micro_batch_size * (m.num_attention_heads // self.tp)
        if not (16 < sk <= 4096 and sq % 4 == 0 and sk % 4 == 0 and attn_batches % 4 == 0):
            return False
        return attn_batches % _softmax_batches_per_block(sk) == 0

    @cached_property
    def softmax_dtype(self) -> str:
        """Dtype the unfused attention's softmax runs in: the kernel and the torch path with
        ``attention_softmax_in_fp32`` off stay in the weights' half precision."""
        if self.fused_softmax_kernel:
            return self.param_dtype
        if self.transformer_engine:
            return "fp32"  # TE's FusedScaleMaskSoftmax falls back with softmax_in_fp32=True
        if self.half_precision and not self.model.attention_softmax_in_fp32:
            return self.param_dtype
        return "fp32"

    @cached_property
    def cross_entropy(self) -> str:
        """Which vocab-parallel cross entropy the last stage runs (``LanguageModule``'s
        ``compute_language_model_loss``): ``unfused`` (Megatron's autograd function, in place on
        one fp32 copy of the logits), ``native`` (the same math under ``torch.compile``) or
        ``te`` (Transformer Engine's kernel, which writes the gradient into the bf16 logits)."""
        m = self.model
        return m.cross_entropy_fusion_impl if m.cross_entropy_loss_fusion else "unfused"

    @cached_property
    def deferred_wgrad_microbatches(self) -> int:
        """Microbatches whose output-layer weight gradient the last stage defers to the end of
        the schedule (``defer_embedding_wgrad_compute``, megatron-core's
        ``LinearWithGradAccumulationAndAsyncCommunication``): each keeps its logits gradient
        and the output layer's input until then; ``wgrad_deferral_limit`` caps the count (0:
        all). Megatron-Core accepts the flag only with PP > 1 and gradient-accumulation fusion."""
        m = self.model
        if not (m.defer_embedding_wgrad_compute and self.pp > 1 and m.gradient_accumulation_fusion):
            return 0
        limit = m.wgrad_deferral_limit
        return min(self.num_microbatches, limit) if limit else self.num_microbatches

    @cached_property
    def deferred_wgrad_buffers_at_peak(self) -> int:
        """Deferred microbatches whose buffers exist beside a later microbatch's backward: all
        of them when a limit stops deferral before the last microbatch, else all but the last
        (whose logits gradient is part of its own working set when it is appended)."""
        n = self.deferred_wgrad_microbatches
        return n if n and n < self.num_microbatches else max(n - 1, 0)

    @cached_property
    def activation_offload_layers(self) -> int:
        """Layers whose activations Megatron's CPU offloading moves to the host
        (``cpu_offloading_num_layers`` with ``cpu_offloading`` and ``cpu_offloading_activations``)."""
        m = self.model
        return m.cpu_offloading_num_layers if m.cpu_offloading and m.cpu_offloading_activations else 0

    @cached_property
    def fp8_gemm_scaling(self) -> str | None:
        """How an FP8 job's GEMMs are scaled, which sets the kernel they run: ``tensorwise``
        for delayed and current scaling (one scale per tensor either way), ``blockwise`` for
        Megatron-Core's ``blockwise`` recipe (1x128 activation, 128x128 weight blocks). MXFP8
        needs Blackwell's block-scaled MMA; its GEMMs are priced as ``tensorwise`` and the step
        model says so. None without FP8."""
        if self.model.fp8 is None:
            return None
        return "blockwise" if self.model.fp8_recipe == "blockwise" else "tensorwise"

    @cached_property
    def tp_gathers_fp8(self) -> bool:
        """Tensor parallelism's all-gathers of activations move FP8 in an FP8 job: Transformer
        Engine casts the local shard and gathers the cast copy (d0067d0 ``module/linear.py``,
        ``module/layernorm_linear.py``: ``gather_along_first_dim`` with the quantizer, a
        column-parallel GEMM's input forward and a row-parallel GEMM's output gradient
        backward; the userbuffer overlap's gather buffers likewise). Reduce-scatters stay in
        the activations' dtype."""
        return self.model.fp8 is not None

    def fp8_cast_bytes(self, after_norm: bool, gathered: bool) -> float:
        """Bytes per element Transformer Engine moves to cast one bf16 GEMM operand to FP8 in
        training, where the backward reads it again (TransformerEngine d0067d0
        ``pytorch/csrc/quantizer.cpp``, ``extensions/normalization.cpp``,
        ``common/normalization/layernorm/ln_api.cpp``): it reads the bf16 tensor (2) and writes
        the FP8 copy the forward GEMM takes (1) and a second copy for the backward's other
        layout (1) where one is needed: MXFP8 and blockwise always (row- and column-wise
        scaled), delayed and current scaling only where the GPU runs no non-TN FP8 GEMM
        (before Blackwell: the transpose, ``nvte_is_non_tn_fp8_gemm_supported``). Current
        scaling first reads the tensor for its amax (2). A GEMM input straight out of Transformer
        Engine's fused norm (``after_norm``: ``linear_qkv``'s and ``linear_fc1``'s, in
        ``LayerNormLinear``) is cheaper: under current scaling the norm kernel takes the amax
        (``FUSED_NORM_AMAX_FP8``); under delayed scaling it writes the FP8 copy itself, one
        byte where the norm's own price counts two, and the transpose, where needed, reads it
        and writes another. MXFP8 and blockwise norms are unfused. Scales are left out (one
        byte per 32 elements at most). A weight is cast like an operand that does not come out
        of a norm, once a step where its copy is cached and every microbatch where it is not
        (``fp8_weight_copies``); the step's cast is left out.

        A ``gathered`` operand is one sequence parallelism all-gathers over TP (a column-parallel
        GEMM's input, a row-parallel GEMM's output gradient): each rank casts its own shard
        before the gather (``module/layernorm_linear.py``, ``module/base.py``
        ``grad_output_preprocess``), so the cast's bytes are a TP-th of the gathered tensor's.
        Delayed and current scaling gather only the row-wise copy
        (``supports_only_rowwise_all_gather``) and make the transpose from the gathered FP8
        tensor, reading one byte and writing one (``module/_common.py``
        ``set_quantizer_usage_for_wgrad_all_gather``). Per element of the gathered tensor."""
        recipe = self.model.fp8_recipe
        second_copy = recipe in ("mxfp8", "blockwise") or not self.blackwell_or_newer
        if after_norm and recipe == "delayed":
            row_wise, column_wise = -1.0, 2.0 * second_copy
        else:
            amax = 2 if recipe == "tensorwise" and not after_norm else 0
            row_wise, column_wise = amax + 2.0 + 1.0, 1.0 * second_copy
        if not (gathered and self.sequence_parallel and self.tp > 1):
            return row_wise + column_wise
        if second_copy and recipe in ("delayed", "tensorwise"):
            return row_wise / self.tp + 2.0
        return (row_wise + column_wise) / self.tp

    @cached_property
    def fp8_amax_reduced_over_tp(self) -> bool:
        """Under current scaling (Megatron's ``tensorwise``: Transformer Engine's
        ``Float8CurrentScaling``, ``megatron/core/fp8_utils.py``) with sequence parallelism,
        Transformer Engine all-reduces over the TP group the amax of each tensor it casts to FP8
        and gathers over it: a column-parallel GEMM's input in the forward, a row-parallel GEMM's
        output gradient in the backward, so every rank casts the gathered tensor with one scale
        (TransformerEngine d0067d0 ``module/linear.py``, ``layernorm_linear.py``,
        ``layernorm_mlp.py``: ``set_quantizer_amax_reduction_group``; ``csrc/quantizer.cpp``
        ``Float8CurrentScalingQuantizer``: the all-reduce between the amax and the cast). The
        block-scaled recipes keep a scale per block and delayed scaling reduces its amax history
        once a step: neither reduces per GEMM."""
        return (
            self.transformer_engine
            and self.model.fp8 is not None
            and self.model.fp8_recipe == "tensorwise"
            and self.sequence_parallel
        )

    @cached_property
    def lora_input_gathered_by_te(self) -> bool:
        """Megatron-Bridge hands the LoRA adapters of a dense layer's ``linear_qkv`` and
        ``linear_fc1`` the full-sequence layernorm output Transformer Engine's
        LayerNormColumnParallelLinear has already gathered, so they gather nothing themselves,
        under TE with SP and without TP comm overlap (``get_adapter_attributes_from_linear``:
        ``return_layernorm_output_gathered``; ../shared/reference notes, Bridge §2.2). An
        adapter that re-gathers asks TE for the local shard instead and gathers it itself."""
        return bool(
            self.job.peft is not None
            and self.transformer_engine
            and self.sequence_parallel
            and not self.model.tp_comm_overlap
        )

    @cached_property
    def userbuffer_overlap(self) -> bool:
        """Transformer Engine's userbuffer overlap runs each TP GEMM beside its collective
        (``tp_comm_overlap``, with sequence parallelism in effect, so TP > 1): the input-side
        GEMMs split in TP chunks of M / TP rows."""
        return bool(self.model.tp_comm_overlap and self.sequence_parallel)

    def userbuffer_gemm(self, gemm: str) -> UserbufferGemm:
        """``gemm``'s userbuffer overlap: Transformer Engine's default for it (TransformerEngine
        d0067d0 ``module/base.py`` ``initialize_ub``: ring exchange for the input-side all-gathers,
        pipelined in 4 chunks for the output side's forward reduce-scatter, bulk for the input
        side's data- and weight-gradient GEMMs; the communication takes 1 SM in a ring, 16
        otherwise, and the GEMM leaves them free except in a ring), with the job's
        ``tp_comm_overlap_cfg`` entry laid over it as ``initialize_ub`` lays it."""
        method = (
            "ring_exchange" if gemm in UB_RING_ONLY else "pipeline" if gemm in UB_REDUCE_SCATTER else "bulk"
        )
        ring = method == "ring_exchange"
        num_sm, margin, splits = (1 if ring else 16), not ring, 4
        cfg = (self.model.tp_comm_overlap_cfg or {}).get(gemm)  # type: ignore[call-overload]
        if cfg is not None:
            method = cfg.method or method
            num_sm = num_sm if cfg.num_sm is None else cfg.num_sm
            margin = margin if cfg.set_sm_margin is None else cfg.set_sm_margin
            splits = cfg.num_splits or splits
        if method == "ring_exchange":
            splits = self.tp
        return UserbufferGemm(method, num_sm if margin else 0, splits)

    @cached_property
    def lora_regather(self) -> bool:
        """LoRA adapters are asked to re-gather their sequence-parallel input
        (``sequence_parallel_input_regather`` with SP in effect); which adapters can is
        ``regather_blocker`` in memtune/peft/model.py."""
        peft = self.job.peft
        return bool(peft is not None and peft.sequence_parallel_input_regather and self.sequence_parallel)

    @cached_property
    def lora_row_all_to_all(self) -> bool:
        """A row-parallel LoRA adapter sends its output from its hidden shard to its sequence
        shard by one all-to-all (``a2a_experimental`` with SP in effect; Megatron-Bridge's
        ``ParallelLinearAdapter`` takes the path only then)."""
        peft = self.job.peft
        return bool(peft is not None and peft.a2a_experimental and self.sequence_parallel)

    @cached_property
    def cuda_graphs(self) -> bool:
        return self.model.cuda_graph_impl != "none"

    @cached_property
    def whole_step_graphed(self) -> bool:
        """The forward and backward passes of a step run as one CUDA graph
        (``cuda_graph_impl: full_iteration``, or the deprecated ``local`` with scope
        ``full_iteration`` it migrates to; megatron-core 0.19.2 ``FullCudaGraphWrapper``)."""
        impl = self.model.cuda_graph_impl
        return impl == "full_iteration" or (
            impl == "local" and "full_iteration" in (self.model.cuda_graph_scope or [])
        )

    def graphed(self, part: str, is_moe: bool) -> bool:
        """Whether a layer's ``part`` ("attention" or "mlp") runs as a CUDA-graph replay
        (megatron-core 0.19.2 ``TransformerConfig.cuda_graph_modules``): all of it under
        ``full_iteration`` (the implementation, or the deprecated scope it migrates to) or a
        whole-layer graph (no scope, or the deprecated ``full``); else the attention under
        ``attn``, a dense MLP under ``mlp``, a MoE block under ``moe``."""
        if not self.cuda_graphs:
            return False
        scope = self.model.cuda_graph_scope or []
        if self.whole_step_graphed or not scope or "full" in scope:
            return True
        if part == "attention":
            return "attn" in scope
        return ("moe" if is_moe else "mlp") in scope

    def layer_graph_replays(self, is_moe: bool) -> int:
        """How many CUDA graphs a layer's pass replays where graphs cover all of it (one for a
        whole-layer graph, one per part under a scope naming both), else 0: not graphed, graphed
        in part, or inside a full-iteration graph, which replays once a step."""
        if not self.cuda_graphs or self.whole_step_graphed:
            return 0
        scope = self.model.cuda_graph_scope or []
        if not scope or "full" in scope:
            return 1
        parts = ("attention", "mlp")
        return len(parts) if all(self.graphed(part, is_moe) for part in parts) else 0

    def partly_graphed(self, is_moe: bool) -> tuple[str, ...]:
        """The parts of a layer that replay a per-layer CUDA graph where graphs cover only part
        of it (megatron-core 0.19 ``cuda_graph_modules``) and whose host work is priced:
        "attention" under ``attn`` (``TransformerLayer._forward_attention``: the input norm, the
        self-attention, its bias-dropout-add), a dense layer's "mlp" under ``mlp``, a MoE layer's
        "router" under ``moe_router`` (``MoETransformerLayer._forward_mlp_router``: the pre-MLP
        norm, the router and, with ``moe_preprocess``, the dispatcher's preprocessing). Empty
        where no graph, a whole-layer or whole-step graph. A MoE block graphed whole without its
        attention (``moe``) is not among them: its host work is kept."""
        if not self.cuda_graphs or self.whole_step_graphed or self.layer_graph_replays(is_moe):
            return ()
        scope = self.model.cuda_graph_scope or []
        parts = ["attention"] if "attn" in scope else []
        if not is_moe and "mlp" in scope:
            parts.append("mlp")
        if is_moe and "moe_router" in scope:
            parts.append("router")
        return tuple(parts)

    # --- software and environment ------------------------------------------------------
    @cached_property
    def torch_version(self) -> Version:
        return parse_version(self.job.env.torch_version, "env.torch_version")

    @cached_property
    def mcore_version(self) -> Version:
        return parse_version(self.job.env.megatron_core_version, "env.megatron_core_version")

    @cached_property
    def te_version(self) -> Version:
        return parse_version(self.job.env.transformer_engine_version, "env.transformer_engine_version")

    @cached_property
    def fine_grained_offload_needs_te_cpu_offload_v1(self) -> bool:
        """Megatron-Bridge refuses fine-grained activation offloading under Transformer Engine
        2.10 and newer unless ``NVTE_CPU_OFFLOAD_V1=1`` (src/megatron/bridge/training/config.py
        ``_validate_fine_grained_activation_offloading``, Megatron-Bridge 067f987)."""
        return self.stack == "megatron-bridge" and self.te_version >= (2, 10, 0)

    @cached_property
    def allocator(self) -> AllocatorSettings:
        env = self.job.env
        return allocator_settings(env.PYTORCH_CUDA_ALLOC_CONF, env.PYTORCH_ALLOC_CONF, self.torch_version)

    @cached_property
    def fragmentation_margin(self) -> float:
        return self.allocator.fragmentation_margin

    @cached_property
    def expandable_segments_settings(self) -> tuple[tuple[str, str], ...] | None:
        """The environment keys and values that turn expandable segments on as Megatron's guards
        read them (in ``PYTORCH_CUDA_ALLOC_CONF``, beside the options in effect;
        ``NCCL_GRAPH_REGISTER=0`` under CUDA graphs, docs/allocator.md S2): () when they are on
        already, None where Megatron-Core refuses them beside NCCL user buffers (check ENV001)."""
        if self.allocator.expandable_segments:
            return ()
        if self.job.env.use_nccl_ub:
            return None
        options = {**self.allocator.options, "expandable_segments": "True"}
        settings = [("env.PYTORCH_CUDA_ALLOC_CONF", ",".join(f"{k}:{v}" for k, v in options.items()))]
        if self.cuda_graphs and self.job.env.NCCL_GRAPH_REGISTER != "0":
            settings.append(("env.NCCL_GRAPH_REGISTER", "0"))
        return tuple(settings)

    @cached_property
    def blackwell_or_newer(self) -> bool:
        """The GPU is a B100/B200/B300 or a GB200/GB300 (compute capability 10 and up), told by
        its catalogue name."""
        return self.job.cluster.gpu.upper().startswith(("B", "GB"))

    @cached_property
    def device_max_connections(self) -> str | None:
        """The ``CUDA_DEVICE_MAX_CONNECTIONS`` the job should run with: the config's own value,
        else ``"1"`` where Megatron-LM asserts it (TP > 1 or CP > 1 before Blackwell, without
        Megatron-FSDP, which wants it unset), else None (leave it unset)."""
        configured = self.job.env.CUDA_DEVICE_MAX_CONNECTIONS
        if configured is not None:
            return configured
        if (
            (self.tp > 1 or self.cp > 1)
            and not self.blackwell_or_newer
            and not self.job.ddp.use_megatron_fsdp
        ):
            return "1"
        return None

    @cached_property
    def one_hardware_queue(self) -> bool:
        """The job's streams share one hardware work queue (``CUDA_DEVICE_MAX_CONNECTIONS=1``):
        as configured, else as Megatron-LM and Megatron-Bridge launch it
        (:attr:`device_max_connections`); a Megatron-Core job of one's own (``memtune
        measure``'s among them) runs with CUDA's default queues unless it sets the variable."""
        if self.job.env.CUDA_DEVICE_MAX_CONNECTIONS is None and self.stack == "megatron-core":
            return False
        return self.device_max_connections == "1"

    # --- pipeline layout ----------------------------------------------------------------
    # The knobs the layer layout per stage and chunk depends on (with the job's layer counts).
    CHUNK_KNOBS: ClassVar[KnobSubset] = KnobSubset(
        "pp", "vpp", "split", "first_stage_layers", "last_stage_layers", "pipeline_layout"
    )

    @cached_property
    def layers_per_stage(self) -> tuple[int, ...]:
        """Decoder layers built by each pipeline rank (all its virtual chunks together)."""
        return tuple(sum(len(c.layers) for c in chunks) for chunks in self.chunks)

    @cached_property
    def chunks(self) -> tuple[tuple[Chunk, ...], ...]:
        """``chunks[pp_rank][vp_stage]``, following Megatron's layer-offset rules."""
        p, m = self.pp, self.vpp
        sizes = self._chunk_sizes()
        chunks: list[list[Chunk]] = [[] for _ in range(p)]
        offset = 0
        # Global layer order runs over virtual stages first, then pipeline ranks.
        for v in range(m):
            for r in range(p):
                n = sizes[r][v]
                first = r == 0 and v == 0
                last = r == p - 1 and v == m - 1
                chunks[r].append(
                    Chunk(
                        pp_rank=r,
                        vp_stage=v,
                        layers=tuple(range(offset, offset + n)),
                        has_embedding=first,
                        has_output=last,
                        mtp_layers=self._mtp_layers_of(r, v, last),
                    )
                )
                offset += n
        return tuple(tuple(c) for c in chunks)

    def _mtp_layers_of(self, pp_rank: int, vp_stage: int, last: bool) -> int:
        """MTP layers sit with the output layer, or where a stage layout puts them."""
        if self.stage_layout is not None:
            return self.stage_layout[pp_rank][vp_stage].mtp
        return self.mtp_num_layers if last else 0

    def _chunk_sizes(self) -> list[list[int]]:
        if self.stage_layout is not None:
            return [[stage.decoder for stage in rank] for rank in self.stage_layout]
        model, p, m, n = self.model, self.pp, self.vpp, self.model.num_layers
        first, last = model.num_layers_in_first_pipeline_stage, model.num_layers_in_last_pipeline_stage
        if first is not None or last is not None:
            stage = [0] * p
            pinned = set()
            if first is not None:
                stage[0] = first
                pinned.add(0)
            if last is not None and p > 1:
                stage[-1] = last
                pinned.add(p - 1)
            middle = [i for i in range(p) if i not in pinned]
            rest = n - sum(stage)
            for i in middle:
                stage[i] = rest // len(middle)
            return [[s // m] * m for s in stage]
        emb = 1 if model.account_for_embedding_in_pipeline_split else 0
        loss = 1 if model.account_for_loss_in_pipeline_split else 0
        per_chunk = (n + emb + loss) // (p * m)
        sizes = [[per_chunk] * m for _ in range(p)]
        sizes[0][0] -= emb
        sizes[-1][-1] -= loss
        return sizes

    @cached_property
    def activation_dtype(self) -> str:
        """Dtype of the activations: the weights' dtype. ``Float16Module`` casts the whole model to
        fp16 or bf16 and its inputs with it (megatron-core 0.19.2 ``transformer/module.py``), so
        every layer computes in that dtype; without it an fp32 job's activations are fp32. Loss
        scaling (fp16) changes no activation size; what stays fp32 inside a half-precision job
        (norm statistics, softmax in fp32, the loss) is the estimator's per-tensor business."""
        return self.param_dtype

    @cached_property
    def te_fused_softmax_kernel(self) -> bool:
        """Transformer Engine's fused softmax kernel runs in its unfused attention.

        On the TE spec ``attention_backend: unfused`` runs TE's ``UnfusedDotProductAttention``,
        whose ``FusedScaleMaskSoftmax`` has its own rule
        (``transformer_engine/pytorch/attention/dot_product_attention/softmax.py``
        ``is_kernel_available``): half-precision scores, ``16 < sk < 16384``, ``sk`` a multiple
        of 8, ``sq`` a multiple of 4 and of the kernel's batches per block, ``b * heads / TP`` a
        multiple of 4 (causal mask). Megatron's ``masked_softmax_fusion`` does not reach it (TE
        reads ``NVTE_MASKED_SOFTMAX_FUSION``, on by default), and it serves MLA too.
        """
        if self.flash_attention or not self.half_precision:
            return False
        sq = sk = self.model.seq_length // self.cp
        attn_batches = self.micro_batch_size * (self.model.num_attention_heads // self.tp)
        if not (16 < sk < 16384 and sk % 8 == 0 and sq % 4 == 0 and attn_batches % 4 == 0):
            return False
        return sq % _softmax_batches_per_block(sk) == 0

    @cached_property
    def fit_uncertainty(self) -> dict[str, float]:
        """Share of the peak by which a Transformer Engine path memtune cannot pin down from
        source and published runs may exceed the estimate, by path (``docs/limits.md``,
        "Transformer Engine"). The verdict adds them to the fragmentation margin, so a job whose
        headroom is smaller than this uncertainty is not called "fits". None depends on the
        layout (``memtune plan`` reads one value for all candidates)."""
        if not self.transformer_engine:
            return {}
        m = self.model
        shares = {
            # Static inputs/outputs per captured (layer, microbatch) and the graph pool.
            "CUDA graphs": 0.10 if self.cuda_graphs else 0.0,
            # Registered userbuffers outside PyTorch, one per overlapped GEMM.
            "tp_comm_overlap userbuffers": 0.05 if m.tp_comm_overlap else 0.0,
            # DeepEP/HybridEP communication buffers outside PyTorch.
            "flex dispatcher buffers": 0.10 if self.is_moe and m.moe_token_dispatcher_type == "flex" else 0.0,
            # TE's MoE path (grouped GEMM, fused permutation, router): published tune runs down to -5.8%.
            "TE MoE": 0.06 if self.is_moe else 0.0,
        }
        return {path: share for path, share in shares.items() if share}

    @cached_property
    def fit_margin(self) -> float:
        """What the verdict adds to the peak: the fragmentation margin and the TE uncertainty."""
        return self.fragmentation_margin + sum(self.fit_uncertainty.values())

    # --- fabric -------------------------------------------------------------------------
    @cached_property
    def network(self) -> Network:
        """The fabric in effect: ``cluster.network`` over its reference system's defaults
        (``memtune/catalog/data/networks.yaml``)."""
        from memtune.catalog.network import network_of  # the catalog imports the schema

        return network_of(self.job.cluster)

    @cached_property
    def resumes(self) -> bool:
        """The job loads a checkpoint before training: ``checkpoint.load`` (Megatron-LM's --load),
        or ``pretrained_checkpoint``, which Megatron-LM's and Megatron-Bridge's ``load_checkpoint``
        read when the load directory holds none."""
        c = self.job.checkpoint
        return c.load is not None or c.pretrained_checkpoint is not None

    @cached_property
    def resume_format(self) -> str:
        """The checkpoint format a resume reads (``checkpoint.ckpt_format``)."""
        return self.job.checkpoint.ckpt_format

    @cached_property
    def optimizer_loaded_at_resume(self) -> bool:
        """The resume loads the optimizer state: from ``load``, not with --no-load-optim or
        --finetune (Megatron-LM's and Megatron-Bridge's ``load_checkpoint`` skip it under
        ``finetune``, and a ``pretrained_checkpoint`` is loaded with ``finetune`` set)."""
        c = self.job.checkpoint
        return c.load is not None and c.load_optim and not c.finetune

    @cached_property
    def te_fused_adam(self) -> bool:
        """The optimizer is Transformer Engine's FusedAdam: Adam on the Transformer Engine spec
        (the local spec falls back to torch's AdamW, see ``estimate/state.py``), not wrapped in
        the host optimizer of optimizer_cpu_offload, whose checkpoint load is not modeled."""
        opt = self.job.optimizer
        return (
            opt.optimizer == "adam"
            and self.model.transformer_impl != "local"
            and not opt.optimizer_cpu_offload
        )

    @cached_property
    def optimizer_rebuilt_at_load(self) -> bool:
        """Loading the optimizer state makes FusedAdam's ``load_state_dict`` allocate it a second
        time (docs/resume.md): not for the legacy format without the distributed optimizer (its
        host tensors are replaced one at a time), nor where Megatron-Bridge's setup loads a plain
        distributed FusedAdam with torch's base loader (src/megatron/bridge/training/optim.py,
        ``memory_efficient_fp32_optimizer_state_loading``: not precision-aware, not
        Megatron-FSDP, not offloaded)."""
        if not self.optimizer_loaded_at_resume or not self.te_fused_adam:
            return False
        if self.resume_format == "torch" and not self.use_distributed_optimizer:
            return False
        bridge_fast_path = (
            self.stack == "megatron-bridge"
            and self.use_distributed_optimizer
            and not self.megatron_fsdp
            and not self.job.optimizer.use_precision_aware_optimizer
        )
        return not bridge_fast_path

    @cached_property
    def optimizer_state_made_by_dummy_step_at_load(self) -> bool:
        """Loading an fsdp_dtensor checkpoint with the optimizer state first creates that state
        by one optimizer step on zero gradients (megatron/core/optimizer/distrib_optimizer.py,
        ``sharded_param_state_fsdp_dtensor`` → ``_init_optimizer_states_with_dummy_values``)."""
        return self.optimizer_loaded_at_resume and self.resume_format == "fsdp_dtensor"

    @cached_property
    def checkpoint_format_tied_to_fsdp(self) -> bool:
        """The stack refuses Megatron-FSDP with a checkpoint format other than ``fsdp_dtensor``,
        and ``fsdp_dtensor`` without Megatron-FSDP: Megatron-LM always
        (megatron/training/arguments.py ``validate_args``, Megatron-LM d98e8a64dd),
        Megatron-Bridge when the job loads or saves a checkpoint
        (src/megatron/bridge/training/config.py ``_validate_and_apply_megatron_fsdp_v1_configs``
        and ``validate``, Megatron-Bridge 067f987); Megatron-Core itself has no such guard."""
        if self.stack == "megatron-lm":
            return True
        return self.stack == "megatron-bridge" and self.resumes

    @cached_property
    def fsdp_device_connections_refused(self) -> bool:
        """Megatron-LM and Megatron-Bridge refuse Megatron-FSDP with ``CUDA_DEVICE_MAX_CONNECTIONS=1``
        ("FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset."; same files as above)."""
        return self.stack != "megatron-core" and self.job.env.CUDA_DEVICE_MAX_CONNECTIONS == "1"

    @cached_property
    def glu_fc1_merged_at_load(self) -> bool:
        """A torch_dist load rebuilds each gated linear_fc1 from its two saved halves
        (megatron/core/transformer/mlp.py ``apply_swiglu_sharded_factory``, merged by ``torch.cat``)."""
        return self.model.gated_linear_unit and self.resume_format == "torch_dist"

    # --- saving checkpoints (docs/save.md) ------------------------------------------------
    @cached_property
    def saves(self) -> bool:
        """The job saves checkpoints (``checkpoint.save``, Megatron-LM's --save)."""
        return self.job.checkpoint.save is not None

    @cached_property
    def save_format(self) -> str:
        """The format a save writes (``checkpoint.ckpt_format``, as a resume reads it)."""
        return self.job.checkpoint.ckpt_format

    @cached_property
    def optimizer_saved(self) -> bool:
        """A save writes the optimizer state (not with --no-save-optim)."""
        return self.saves and self.job.checkpoint.save_optim

    @cached_property
    def async_save(self) -> bool:
        """Saves run in the background, in a persistent worker process per rank: Megatron-LM runs
        --async-save only with --use-persistent-ckpt-worker and otherwise saves synchronously
        (megatron/training/arguments.py); Megatron-Bridge asserts the worker (its default);
        neither offers it for the legacy format."""
        c = self.job.checkpoint
        return (
            self.saves
            and c.async_save
            and c.use_persistent_ckpt_worker
            and self.save_format in ("torch_dist", "fsdp_dtensor")
        )

    @cached_property
    def optimizer_save_sharding(self) -> str | None:
        """How a save lays out the distributed optimizer's state (megatron/training/checkpointing.py
        ``_build_sharded_state_dict_metadata``, ``save_checkpoint``): ``dp_reshardable`` (its
        buckets, as they are) or ``fully_reshardable`` (the model's layout, gathered over the
        data-parallel ranks) for torch_dist, ``fsdp_dtensor`` for Megatron-FSDP, ``dp_zero``
        (gathered to data-parallel rank 0 over Gloo by ``save_parameter_state``) for the legacy
        format; None without the distributed optimizer or without its state in the save."""
        if not self.optimizer_saved or not self.use_distributed_optimizer:
            return None
        if self.save_format == "fsdp_dtensor":
            return "fsdp_dtensor"
        if self.save_format == "torch":
            return "dp_zero"
        if self.save_format != "torch_dist":
            return None
        return (
            "fully_reshardable" if self.job.checkpoint.dist_ckpt_optim_fully_reshardable else "dp_reshardable"
        )

    @cached_property
    def fully_reshardable_gathered_on_device(self) -> bool:
        """The fully_reshardable save gathers each bucket's state over NCCL on the device, to
        every data-parallel rank; with ``distrib_optim_fully_reshardable_mem_efficient`` over Gloo
        on the host, to rank 0 only (megatron/core/optimizer/distrib_optimizer.py,
        ``sharded_param_state_fully_reshardable``)."""
        return (
            self.optimizer_save_sharding == "fully_reshardable"
            and not self.job.checkpoint.distrib_optim_fully_reshardable_mem_efficient
        )

    @cached_property
    def save_spreads_replicated_tensors(self) -> bool:
        """A torch_dist save spreads the writing of tensors every data-parallel rank holds over
        those ranks (``fully_parallel_save``, ``FullyParallelSaveStrategyWrapper``); otherwise the
        data-parallel rank 0 of each copy writes them."""
        return self.save_format == "torch_dist" and self.job.checkpoint.fully_parallel_save

    @cached_property
    def host_memory_bytes_per_node(self) -> int | None:
        """A node's RAM: ``cluster.host_memory_gib``, else the reference system's for the job's
        GPU (memtune/catalog/data/networks.yaml) over ``gpus_per_node`` GPUs; None for a GPU no
        reference system carries."""
        from memtune.catalog.network import host_memory_gib  # the catalog imports the schema

        gib = host_memory_gib(self.job.cluster)
        return None if gib is None else round(gib * 2**30)


# Derived facts no knob changes (``Derived.with_knobs`` carries them over;
# tests/plan/test_fast.py checks every fact of a view against the validated job's).
KNOB_FREE_FACTS = (
    "stack",
    "recomputable_modules",
    "ffn_hidden_size",
    "fc1_width_factor",
    "kv_channels",
    "num_query_groups",
    "moe_ffn_hidden_size",
    "num_experts",
    "is_moe",
    "moe_layer_pattern",
    "experts_weighted_fused_activation",
    "experts_clamp_eagerly",
    "mtp_num_layers",
    "param_dtype",
    "half_precision",
    "transformer_engine",
    "separate_input_norm",
    "flash_attention",
    "cross_entropy",
    "fused_activation",
    "fp8_activations",
    "pipeline_outputs_kept",
    "cuda_graphs",
    "blackwell_or_newer",
    "torch_version",
    "mcore_version",
    "te_version",
    "allocator",
    "fragmentation_margin",
    "network",
    "saves",
    "save_format",
    "host_memory_bytes_per_node",
)


def _softmax_batches_per_block(key_seq_len: int) -> int:
    """Rows of attention scores one block of the fused softmax kernel handles (128 threads,
    warps of up to 32 lanes, two rows per warp for keys up to 128)."""
    next_power_of_two = 1 << max(0, math.ceil(math.log2(key_seq_len)))
    warp = min(next_power_of_two, 32)
    rows_per_warp = 2 if next_power_of_two <= 128 else 1
    return (128 // warp) * rows_per_warp


def derive(job: JobConfig) -> Derived:
    return Derived(job)
