"""Every fact Megatron (and torch) derive from the configuration, computed in one place.

Parallel sizes, batches, the layer layout per stage and chunk, the rank-to-stage mapping, the
distributed optimizer in effect, parameter and gradient dtypes, the allocator settings in effect
and the fragmentation margin, the attention flavour and software versions: every consumer
(check, estimate, measure, diagnose, plan) reads them from :class:`Derived`, and
``tests/config/test_one_home.py`` fails when one is computed elsewhere.

``derive(job)`` never raises on an inconsistent layout: it rounds the way Megatron would and
leaves the complaint to ``memtune check``; only unparsable version strings raise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from memtune.config.allocator import AllocatorSettings, allocator_settings
from memtune.config.layout import StageLayers, parse_layout, stage_grid
from memtune.config.schema import JobConfig, ModelConfig
from memtune.config.versions import Version, parse_version

DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


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
class Derived:
    job: JobConfig

    @property
    def model(self) -> ModelConfig:
        return self.job.model

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
    def kv_channels(self) -> int:
        return self.model.kv_channels or self.model.hidden_size // self.model.num_attention_heads

    @cached_property
    def num_query_groups(self) -> int:
        return self.model.num_query_groups or self.model.num_attention_heads

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
    def ep(self) -> int:
        return self.model.expert_model_parallel_size

    @cached_property
    def etp(self) -> int:
        return self.model.expert_tensor_parallel_size or self.tp

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
    def recompute_modules(self) -> tuple[str, ...]:
        """Selective-recompute modules in effect (Megatron's default is ``core_attn``)."""
        if self.model.recompute_granularity != "selective":
            return ()
        modules = self.model.recompute_modules
        return DEFAULT_RECOMPUTE_MODULES if modules is None else tuple(modules)

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
        """Dtype of the gradient buffer: fp32 with ``grad_reduce_in_fp32`` or fp32 weights."""
        return "fp32" if self.job.ddp.grad_reduce_in_fp32 or not self.half_precision else self.param_dtype

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
    def fsdp_strategy(self) -> str:
        """Megatron-FSDP's sharding strategy in effect, ``no_shard`` without FSDP."""
        ddp = self.job.ddp
        return ddp.data_parallel_sharding_strategy if ddp.use_megatron_fsdp else "no_shard"

    # --- implementation flavour --------------------------------------------------------
    @cached_property
    def transformer_engine(self) -> bool:
        return self.model.transformer_impl == "transformer_engine"

    @cached_property
    def flash_attention(self) -> bool:
        """Flash, fused or cuDNN attention: no ``s x s`` score matrix is kept. ``auto`` picks a
        fused kernel only on the Transformer Engine spec."""
        backend = self.model.attention_backend
        return backend in ("flash", "fused") or (backend == "auto" and self.transformer_engine)

    @cached_property
    def cuda_graphs(self) -> bool:
        return self.model.cuda_graph_impl != "none"

    # --- software and environment ------------------------------------------------------
    @cached_property
    def torch_version(self) -> Version:
        return parse_version(self.job.env.torch_version, "env.torch_version")

    @cached_property
    def mcore_version(self) -> Version:
        return parse_version(self.job.env.megatron_core_version, "env.megatron_core_version")

    @cached_property
    def allocator(self) -> AllocatorSettings:
        env = self.job.env
        return allocator_settings(env.PYTORCH_CUDA_ALLOC_CONF, env.PYTORCH_ALLOC_CONF, self.torch_version)

    @cached_property
    def fragmentation_margin(self) -> float:
        return self.allocator.fragmentation_margin

    # --- pipeline layout ----------------------------------------------------------------
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


def derive(job: JobConfig) -> Derived:
    return Derived(job)
