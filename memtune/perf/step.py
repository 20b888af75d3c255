"""The step of a job exactly as configured: every chunk's kernels priced from measured tables,
its collectives on the declared fabric, and the iteration simulated in Megatron-Core's order.

``predict_step(derived)`` reads only :class:`~memtune.config.derived.Derived` (and the job's
own settings through it): nothing is switched on that the job did not ask for. Per chunk of
each pipeline stage and per microbatch it prices

- compute: every GEMM of a layer at its shard shape (``memtune/perf/kernels.py``: measured
  H200 tables, interpolated; routed experts from the measured per-expert or grouped table; FP8
  GEMMs from the measured table of their scaling plus Transformer Engine's input casts), causal flash
  attention from its measured table (PyTorch's memory-efficient kernel for MLA on the local
  spec's SDPA stand-in), the work around the GEMMs from the measured eager-kernel tables on the
  local spec (norms, RoPE, activation, residual additions; at HBM bandwidth under Transformer
  Engine), the MoE router and token permutes, the output layer and the unfused cross-entropy on
  the last chunk, replays of recompute in the backward, Adam from its measured kernel with
  Megatron's work around it, and fixed costs per layer, per microbatch and per step (kernel
  launches and Python, ``memtune/perf/constants.py``);
- communication: TP all-gathers/reduce-scatters (all-reduces without SP), EP dispatch and
  combine, CP's K/V ring, pipeline sends, the DP gradient reduction and parameter gather, each
  an α-β cost of its real message size on its group (``memtune/perf/collectives.py``);

then ``memtune/perf/simulate.py`` places them (overlap only where the job's settings make
Megatron hide them) and the step, bubble and per-stage idle come out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from memtune.catalog.gpus import GPU, get_gpu
from memtune.config.derived import Chunk, Derived
from memtune.config.knobs import KnobSubset
from memtune.errors import InputError
from memtune.limits import MAX_ESTIMATE_SIMULATED_OPERATIONS, MAX_SIMULATED_OPERATIONS
from memtune.peft.model import adapter_collectives, adapters_in_layer, gathered_input_bytes
from memtune.perf import constants as K
from memtune.perf.collectives import Group, Op, collective, pipeline_crosses_domain, send_recv
from memtune.perf.kernels import (
    MEASURED_ON,
    attention_fractions,
    eager_kernels,
    expert_gemm_fraction,
    fp8_gemm_fraction,
    gemm_fraction,
    memory_efficient_attention_fractions,
)
from memtune.perf.moe import dispatch_s, dispatcher_host_fwd_s
from memtune.perf.offload import activation_offload_s, optimizer_offload_s
from memtune.perf.sharding import chunk_work, exposed
from memtune.perf.simulate import ChunkWork, Overlap, Simulated, StageWork, simulate

BF16 = 2
Value = TypeVar("Value")
# What every step prediction rests on, in a line each (shown by `memtune fix`).
STEP_MODEL_NOTES = (
    "kernels from the measured H200 GEMM, expert, attention and eager-kernel tables, interpolated",
    "collectives as NCCL's ring/tree alpha-beta costs on the declared cluster.network fabric",
    "the iteration simulated in Megatron-Core's order; communication hidden only where the job's settings do",
    "a host floor per layer, microbatch, step and collective fitted to tune runs (Megatron-LM CI, H200)",
    "balanced MoE routing; model TFLOP/s counts 3x forward FLOPs without recompute (Megatron's convention)",
)


@dataclass(frozen=True)
class StepPrediction:
    step_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    simulated: Simulated
    unmeasured: tuple[str, ...]  # what the prediction took from assumptions instead of measurements


@dataclass(frozen=True)
class Throughput:
    """The step of the job as configured, beside its memory estimate: a prediction, or why none was made."""

    prediction: StepPrediction | None
    not_simulated: str | None  # why the step was not simulated; None when it was


def throughput_of(d: Derived, priced: Priced | None = None) -> Throughput:
    """:func:`predict_step` of the job of ``d`` (from its ``priced`` stages, where the planner
    has them) within a bounded time: a step whose simulation
    would place more than ``MAX_ESTIMATE_SIMULATED_OPERATIONS`` passes (``memtune/limits.py``;
    a long steady phase is priced without placing its repeats) gets the reason instead, so the
    memory estimate beside it is never refused for the step model."""
    try:
        if priced is None:
            return Throughput(predict_step(d, max_passes=MAX_ESTIMATE_SIMULATED_OPERATIONS), None)
        return Throughput(predict_priced(d, priced, max_passes=MAX_ESTIMATE_SIMULATED_OPERATIONS), None)
    except InputError as exc:
        return Throughput(None, exc.problems[0])


@dataclass
class _Layer:
    fwd: float  # device compute
    bwd: float
    host_fwd: float  # the host's launch work for the forward (Python, kernel launches)
    wgrad: float  # part of bwd
    attn_fwd: float
    mlp_fwd: float  # dense MLP or MoE block, forward (selective recompute of mlp / moe)
    up_proj_fwd: float
    shared_fwd: float
    elementwise_fwd: float
    tp_fwd: float  # TP collectives of the forward left exposed
    tp_bwd: float  # and of the backward
    tp_bwd_blocking: float  # the backward's that nothing hides (LoRA adapters' own)
    mlp_tp_fwd: float  # the MLP side's share of the forward's (a recompute of mlp or moe replays it)
    ep_fwd: float  # EP dispatch + combine of the forward; likewise


class _Pricer:
    def __init__(self, d: Derived, gpu: GPU, floor: K.HostFloor) -> None:
        self.d = d
        self.gpu = gpu
        self.floor = floor
        self.fp8 = d.model.fp8 is not None
        self.hbm = gpu.hbm_tbps * 1e12 * K.HBM_FRACTION
        self.net = d.network
        self.unmeasured: set[str] = set()
        if gpu.name != "H200":
            self.unmeasured.add(f"{gpu.name} kernels: H200 fractions of peak applied to its catalog peak")
        self.fp8_cast_bytes = K.FP8_CAST_BYTES_PER_ELEMENT[d.model.fp8_recipe] if self.fp8 else 0
        # the eager kernels were timed on the H200; memory-bound, they scale by HBM bandwidth
        self.eager = eager_kernels()
        self.hbm_ratio = get_gpu(MEASURED_ON).hbm_tbps / gpu.hbm_tbps
        # An fp32 job's matmuls run on the plain fp32 units: neither PyTorch (allow_tf32 off by
        # default) nor Megatron-LM switches TF32 on. The bf16 tables' fraction is applied to the
        # fp32 peak, and attention slows by the same ratio (unmeasured: no fp32 table).
        self.matmul_flops = gpu.bf16_flops
        if d.activation_dtype == "fp32":
            if gpu.fp32_flops is None:
                self.unmeasured.add(f"fp32 matmuls at the bf16 peak ({gpu.name} has no fp32 figure)")
            else:
                self.matmul_flops = gpu.fp32_flops
                self.unmeasured.add("fp32 matmuls at the bf16 tables' fraction of the fp32 peak")
        if self.fp8 and d.model.fp8_recipe == "mxfp8":
            self.unmeasured.add("mxfp8 FP8 GEMMs at the measured tensorwise fraction")
        if d.job.peft is not None:
            # measured (kernels-h200.json, lora_adapters) but not priced: docs/plan.md, Limits
            self.unmeasured.add("LoRA adapters' own GEMMs, dropout and additions: not priced")

    def gemm(self, m: float, n: float, k: float, count: float = 1.0) -> float:
        if m <= 0 or n <= 0 or k <= 0 or count <= 0:
            return 0.0
        if self.fp8 and self.gpu.fp8_flops:
            fraction = fp8_gemm_fraction(
                round(m), round(n), round(k), self.d.fp8_gemm_scaling or "tensorwise"
            )
            cast = self.fp8_cast_bytes * m * k / self.hbm
            return count * (2 * m * n * k / (self.gpu.fp8_flops * fraction) + cast)
        fraction = gemm_fraction(round(m), round(n), round(k))
        return count * 2 * m * n * k / (self.matmul_flops * fraction)

    def expert_gemm(self, m: float, n: float, k: float, count: float) -> float:
        """``count`` local experts' GEMMs of ``m`` rows each: the measured expert table (one
        after another, or grouped) where the shape lies in it, else as any GEMM."""
        if not self.fp8 and m > 0:
            sequential = self.d.experts_are_sequential_modules
            fraction = expert_gemm_fraction(round(m), round(n), round(k), sequential)
            if fraction is not None:
                return count * 2 * m * n * k / (self.matmul_flops * fraction)
        return self.gemm(m, n, k, count)

    def layer(self, is_moe: bool, frozen: bool) -> _Layer:
        d, m = self.d, self.d.model
        h, t, cp = m.hidden_size, d.tp, d.cp
        seq = m.seq_length
        T = d.micro_batch_size * seq / cp
        heads = m.num_attention_heads / t
        gemm = up_proj = shared = 0.0
        # (M, N, K) of the GEMMs around the TP collectives: the input side consumes the
        # all-gathered activations, the output side's result is reduce-scattered
        shapes: dict[str, tuple[float, float, float]] = {}
        if m.multi_latent_attention:
            qk = m.qk_head_dim + m.qk_pos_emb_head_dim
            if m.q_lora_rank is not None:
                up_proj += self.gemm(T, heads * qk, m.q_lora_rank)
                gemm += self.gemm(T, m.q_lora_rank, h)
            else:
                gemm += self.gemm(T, heads * qk, h)
            gemm += self.gemm(T, m.kv_lora_rank + m.qk_pos_emb_head_dim, h)
            up_proj += self.gemm(T, heads * (m.qk_head_dim + m.v_head_dim), m.kv_lora_rank)
            gemm += up_proj + self.gemm(T, h, heads * m.v_head_dim)
            attn_flops = 2 * T * seq * heads * (qk + m.v_head_dim) * 0.5
        else:
            kv = d.kv_channels
            shapes["attention in"] = (T, (heads + 2 * d.query_groups_per_tp_rank) * kv, h)
            shapes["attention out"] = (T, h, heads * kv)
            gemm += self.gemm(*shapes["attention in"]) + self.gemm(*shapes["attention out"])
            attn_flops = 4 * T * seq * heads * kv * 0.5
        attention = memory_efficient_attention_fractions if d.memory_efficient_sdpa else attention_fractions
        fwd_frac, bwd_frac = attention(seq, round(heads * d.micro_batch_size))
        attn_fwd = attn_flops / (self.matmul_flops * fwd_frac)
        attn_bwd = K.ATTENTION_BWD_FLOPS_FACTOR * attn_flops / (self.matmul_flops * bwd_frac)
        gate = 2 if m.gated_linear_unit else 1
        mlp = ep_fwd = 0.0
        tokens_res = T / t if d.sequence_parallel else T
        if is_moe:
            experts, k = m.num_moe_experts or 1, m.moe_router_topk
            f = d.moe_ffn_hidden_size / d.etp
            rows = T * k * d.etp * d.ep / (t * experts)
            local = experts / d.ep
            mlp += self.gemm(tokens_res, experts, h)
            mlp += self.expert_gemm(rows, gate * f, h, local) + self.expert_gemm(rows, h, f, local)
            if m.moe_shared_expert_intermediate_size:
                fs = m.moe_shared_expert_intermediate_size / t
                shared = self.gemm(T, gate * fs, h) + self.gemm(T, h, fs)
                mlp += shared
            # dispatch and combine by the job's dispatcher (memtune/perf/moe.py)
            ep_fwd = 2 * dispatch_s(d, tokens_res, self.net)
        else:
            f = d.ffn_hidden_size / t
            shapes["mlp in"], shapes["mlp out"] = (T, gate * f, h), (T, h, f)
            mlp += self.gemm(*shapes["mlp in"]) + self.gemm(*shapes["mlp out"])
        gemm += mlp
        wgrad = 0.0 if frozen else gemm
        if d.eager_elementwise:
            elementwise, elementwise_bwd = self.eager_elementwise(is_moe)
        else:
            elementwise = K.ELEMENTWISE_PASSES_FWD * BF16 * tokens_res * h / self.hbm
            elementwise_bwd = 2 * elementwise
        if is_moe:
            # the router's top-k and the token permute and unpermute around the experts; their
            # backward moves the same tokens the other way (the same kernels, unmeasured)
            routing = (
                self.eager.route_and_permute.seconds(tokens_res * m.moe_router_topk * h) * self.hbm_ratio
            )
            elementwise += routing
            elementwise_bwd += routing
        tp_fwd = tp_bwd = tp_bwd_blocking = ub_fwd = ub_bwd = mlp_tp_fwd = 0.0
        if t > 1:
            group = Group(t)
            full = BF16 * T * h
            if d.sequence_parallel:
                gather = collective(Op.ALL_GATHER, full, group, self.net, self.gpu.name).seconds
                scatter = collective(Op.REDUCE_SCATTER, full, group, self.net, self.gpu.name).seconds
                ops = 2 * (gather + scatter)
            else:
                ops = 2 * collective(Op.ALL_REDUCE, full, group, self.net, self.gpu.name).seconds
            # the backward has the same collectives, in reverse; each also costs its launch
            tp_fwd = tp_bwd = ops + (4 if d.sequence_parallel else 2) * K.COLLECTIVE_LAUNCH_S
            mlp_tp_fwd = tp_fwd / 2
            if m.tp_comm_overlap and d.sequence_parallel:
                sides = self.userbuffer_overlap(shapes, T * h, frozen)
                launches = 4 * K.COLLECTIVE_LAUNCH_S
                ub_fwd = sum(side.extra_fwd for side in sides.values())
                ub_bwd = sum(side.extra_bwd for side in sides.values())
                tp_fwd = sum(side.exposed_fwd for side in sides.values()) + launches
                tp_bwd = sum(side.exposed_bwd for side in sides.values()) + launches
                mlp_tp_fwd = sides["mlp"].extra_fwd + sides["mlp"].exposed_fwd + launches / 2
            lora_fwd, tp_bwd_blocking, lora_mlp_fwd = self.adapter_collectives(is_moe, group)
            tp_fwd += lora_fwd
            mlp_tp_fwd += lora_mlp_fwd
        cp_fwd = 0.0
        if cp > 1:
            kv_width = (
                m.kv_lora_rank + m.qk_pos_emb_head_dim
                if m.multi_latent_attention
                else 2 * d.query_groups_per_tp_rank * d.kv_channels
            )
            step = send_recv(BF16 * T * kv_width, t * cp > self.net.gpus_per_nvlink_domain, self.net)
            # each ring step hides behind one block's attention; its launch does not
            cp_fwd = max(0.0, (cp - 1) * step - attn_fwd) + (cp - 1) * K.COLLECTIVE_LAUNCH_S
        fwd = gemm + attn_fwd + elementwise + ub_fwd
        bwd = gemm + wgrad + attn_bwd + elementwise_bwd + ub_bwd
        host_fwd = self.floor.layer_fwd_s
        if is_moe:
            host_fwd += dispatcher_host_fwd_s(d)
        if is_moe and d.experts_are_sequential_modules:
            # each local expert its own module, one after another: the host's launch work and
            # Python per expert, which the GPU waits for only where its kernels are shorter
            host_fwd += (m.num_moe_experts or 1) / d.ep * K.SEQUENTIAL_EXPERT_FWD_S
        return _Layer(
            fwd=fwd * K.IN_STEP_KERNEL_FACTOR + cp_fwd,
            bwd=bwd * K.IN_STEP_KERNEL_FACTOR + 2 * cp_fwd,
            host_fwd=host_fwd,
            wgrad=wgrad,
            attn_fwd=attn_fwd,
            mlp_fwd=mlp,
            up_proj_fwd=up_proj,
            shared_fwd=shared,
            elementwise_fwd=elementwise,
            tp_fwd=tp_fwd,
            tp_bwd=tp_bwd,
            tp_bwd_blocking=tp_bwd_blocking,
            mlp_tp_fwd=mlp_tp_fwd,
            ep_fwd=ep_fwd,
        )

    def adapter_collectives(self, is_moe: bool, group: Group) -> tuple[float, float, float]:
        """Forward and backward seconds of one layer's LoRA adapters' own TP collectives
        (``memtune/peft/model.py adapter_collectives``), each with its launch, and the forward's
        share on the MLP side (``linear_fc1``, ``linear_fc2``: a recompute of the MLP replays
        it). Issued on the compute stream: the only work a re-gathering adapter's backward
        gather and reduce-scatter are issued ahead of are LoRA-A's GEMMs, products of rank
        width."""
        d, peft = self.d, self.d.job.peft
        if peft is None:
            return 0.0, 0.0, 0.0
        tokens = d.micro_batch_size * d.model.seq_length / d.cp
        sizes = {True: gathered_input_bytes(d), False: BF16 * tokens * peft.dim}
        ops = {"all_gather": Op.ALL_GATHER, "reduce_scatter": Op.REDUCE_SCATTER, "all_reduce": Op.ALL_REDUCE}
        fwd = bwd = mlp_fwd = 0.0
        for adapter in adapters_in_layer(d, is_moe):
            for c in adapter_collectives(d, adapter):
                seconds = collective(ops[c.op], sizes[c.activation], group, self.net, self.gpu.name).seconds
                seconds = adapter.copies * (seconds + K.COLLECTIVE_LAUNCH_S)
                if c.backward:
                    bwd += seconds
                else:
                    fwd += seconds
                    if adapter.target in ("linear_fc1", "linear_fc2"):
                        mlp_fwd += seconds
        return fwd, bwd, mlp_fwd

    def eager_elementwise(self, is_moe: bool) -> tuple[float, float]:
        """Forward and backward seconds of one layer's work around its GEMMs in PyTorch's eager
        kernels (Megatron-Core's local spec), each from the measured table by its size: the two
        norms (and Qwen3's norms of q and k) and the two residual additions with dropout on the
        layer's own tokens, RoPE on q and k, and the MLP's activation on what the GEMM before
        it wrote. Backward: the norms' measured backward (RMSNorm's, for LayerNorm too); RoPE
        and the residual additions move what their forward did; the activation twice its
        forward (two inputs and the gradient read, two gradients written): unmeasured."""
        d, m = self.d, self.d.model
        t, h = d.tp, m.hidden_size
        T = d.micro_batch_size * m.seq_length / d.cp
        tokens_res = T / t if d.sequence_parallel else T
        curves = self.eager.elementwise
        norm_fwd = curves["rmsnorm fwd" if m.normalization == "RMSNorm" else "layernorm fwd"]
        heads, groups = m.num_attention_heads / t, d.query_groups_per_tp_rank
        if m.multi_latent_attention:
            rotated = T * (heads + 1) * m.qk_pos_emb_head_dim  # the decoupled RoPE part of q and k
        else:
            rotated = T * (heads + groups) * d.kv_channels
        gate = 2 if m.gated_linear_unit else 1
        if is_moe:
            # every local expert's rows (the rank's tokens x top-k, gathered over the experts'
            # TP) at its share of the expert width
            activation = T * m.moe_router_topk / t * gate * d.moe_ffn_hidden_size
            if m.moe_shared_expert_intermediate_size:
                activation += T * gate * m.moe_shared_expert_intermediate_size / t
        else:
            activation = T * gate * d.ffn_hidden_size / t
        norms = [tokens_res * h, tokens_res * h]
        if m.qk_layernorm and not m.multi_latent_attention:
            norms += [T * heads * d.kv_channels, T * groups * d.kv_channels]
        fwd = sum(norm_fwd.seconds(n) for n in norms)
        bwd = sum(curves["rmsnorm bwd"].seconds(n) for n in norms)
        residual = 2 * curves["bias dropout add"].seconds(tokens_res * h)
        rope = curves["rope"].seconds(rotated) if d.rotary_embeddings else 0.0
        act = curves["swiglu fwd"].seconds(activation)
        fwd += residual + rope + act
        bwd += residual + rope + 2 * act
        return fwd * self.hbm_ratio, bwd * self.hbm_ratio

    def userbuffer_overlap(
        self, shapes: dict[str, tuple[float, float, float]], elements: float, frozen: bool
    ) -> dict[str, _Overlapped]:
        """Transformer Engine's userbuffer GEMM+collective overlap of one layer's attention and
        MLP sides, as its default configuration sets it up (TransformerEngine d0067d0,
        ``transformer_engine/pytorch/module/base.py`` ``initialize_ub``): the input-side
        all-gathers (qkv and fc1 forward, proj and fc2 data gradients) by ring exchange, the GEMM
        split in TP chunks each waiting for its slice; the output-side reduce-scatters (proj and
        fc2 forward) pipelined over ``UB_PIPELINE_SPLITS`` chunks, the last chunk's exposed; the
        data-gradient reduce-scatter and the weight-gradient input gather of qkv and fc1 in bulk
        beside their GEMMs. The pipelined and bulk GEMMs run without ``UB_SM_MARGIN`` of the
        GPU's SMs. A side whose GEMMs are not the plain pair (MLA's projections, MoE experts)
        keeps its collectives exposed."""
        t = self.d.tp
        # all-gather buffers are FP8 under an FP8 recipe (the same file's layers_all_gather_overlap)
        gather = collective(
            Op.ALL_GATHER, (1 if self.fp8 else BF16) * elements, Group(t), self.net, self.gpu.name
        ).seconds
        scatter = collective(Op.REDUCE_SCATTER, BF16 * elements, Group(t), self.net, self.gpu.name).seconds
        slowed = 1 / (1 - K.UB_SM_MARGIN)

        def ring(m: float, n: float, k: float) -> tuple[float, float]:
            chunk = self.gemm(m / t, n, k)
            return t * chunk - self.gemm(m, n, k), (t - 1) * max(0.0, gather / (t - 1) - chunk)

        def pipelined(m: float, n: float, k: float) -> tuple[float, float]:
            splits = K.UB_PIPELINE_SPLITS
            chunk = self.gemm(m / splits, n, k) * slowed
            exposed = scatter / splits + (splits - 1) * max(0.0, scatter / splits - chunk)
            return splits * chunk - self.gemm(m, n, k), exposed

        def bulk(m: float, n: float, k: float) -> tuple[float, float]:
            dgrad = self.gemm(m, n, k)
            wgrad = 0.0 if frozen else dgrad
            exposed = max(0.0, gather - dgrad * slowed) + max(0.0, scatter - wgrad * slowed)
            return (dgrad + wgrad) * (slowed - 1), exposed

        sides = {}
        for side in ("attention", "mlp"):
            if f"{side} in" not in shapes:
                sides[side] = _Overlapped(0.0, gather + scatter, 0.0, gather + scatter)
                continue
            m_in, n_in, k_in = shapes[f"{side} in"]
            m_out, n_out, k_out = shapes[f"{side} out"]
            (gather_extra, gather_exposed), (scatter_extra, scatter_exposed) = (
                ring(m_in, n_in, k_in),
                pipelined(m_out, n_out, k_out),
            )
            # the output side's data gradient (M, K, N) gathers by ring; the input side's in bulk
            (dgrad_extra, dgrad_exposed), (bulk_extra, bulk_exposed) = (
                ring(m_out, k_out, n_out),
                bulk(m_in, k_in, n_in),
            )
            sides[side] = _Overlapped(
                gather_extra + scatter_extra,
                gather_exposed + scatter_exposed,
                dgrad_extra + bulk_extra,
                dgrad_exposed + bulk_exposed,
            )
        return sides


@dataclass(frozen=True)
class _Overlapped:
    """One side of a layer under userbuffer overlap, against its plain GEMMs and collectives."""

    extra_fwd: float  # longer GEMMs: split in chunks, or on fewer SMs
    exposed_fwd: float  # communication the GEMMs do not hide
    extra_bwd: float
    exposed_bwd: float


def _pass_time(pieces: list[tuple[float, float]]) -> float:
    """One pass (a chunk's forward or backward of one microbatch): the host issues the kernels of
    each piece after its launch work and runs ahead of the GPU, across passes too (nothing
    synchronises until the optimizer), so in the steady stream of passes one takes the longer of
    the two totals. Small layers and shards leave the GPU waiting for the host."""
    return max(sum(host for host, _ in pieces), sum(device for _, device in pieces))


def recompute_forward(d: Derived, lt: _Layer, is_moe: bool) -> float:
    """Forward time one layer replays under selective recompute (Megatron-Core's modules: ``mlp``
    is the dense MLP, ``moe`` the whole MoE block, ``moe_act`` the experts' activation)."""
    mods = d.recompute_modules
    extra = 0.0
    if "core_attn" in mods:
        extra += lt.attn_fwd
    if ("mlp" in mods and not is_moe) or ("moe" in mods and is_moe):
        extra += lt.mlp_fwd
    elif "shared_experts" in mods and is_moe:
        extra += lt.shared_fwd
    # Norms and the activation are elementwise: a norm is about one hidden-sized pass each.
    if "layernorm" in mods:
        extra += lt.elementwise_fwd * 2 / K.ELEMENTWISE_PASSES_FWD
    if "moe_act" in mods and is_moe:
        extra += lt.elementwise_fwd * 1 / K.ELEMENTWISE_PASSES_FWD
    if "mla_up_proj" in mods:
        extra += lt.up_proj_fwd
    return extra


def model_flops_per_token(d: Derived) -> float:
    """Forward FLOPs per token of the whole model (active experts only), at TP = CP = 1: what
    model TFLOP/s counts (Megatron's convention: 3x this per trained token, recompute not counted)."""
    m = d.model
    h, seq = m.hidden_size, m.seq_length
    gate = 2 if m.gated_linear_unit else 1
    a = m.num_attention_heads
    if m.multi_latent_attention:
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        q = (h * m.q_lora_rank + m.q_lora_rank * a * qk) if m.q_lora_rank else h * a * qk
        attn = q + h * (m.kv_lora_rank + m.qk_pos_emb_head_dim)
        attn += m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim) + a * m.v_head_dim * h
        core = seq * a * (qk + m.v_head_dim) * 0.5
    else:
        kv, g = d.kv_channels, d.num_query_groups
        attn = h * (a + 2 * g) * kv + a * kv * h
        core = 2 * seq * a * kv * 0.5
    total = 0.0
    for is_moe in d.moe_layer_pattern:
        if is_moe:
            ffn = m.moe_router_topk * (gate + 1) * h * d.moe_ffn_hidden_size + h * (m.num_moe_experts or 0)
            if m.moe_shared_expert_intermediate_size:
                ffn += (gate + 1) * h * m.moe_shared_expert_intermediate_size
        else:
            ffn = (gate + 1) * h * d.ffn_hidden_size
        total += 2 * (attn + ffn) + 2 * core
    return total + 2 * h * m.vocab_size


# The knobs each price below depends on besides the job's architecture, so that the planner's
# ``StepPricer`` reuses it across layouts (``memtune/plan/search.py``; ``tests/plan/test_fast.py``
# and ``tests/plan/test_prune.py`` check its prices equal ``predict_step``'s on random layouts),
# in order: a layer's kernels and collectives, the output layer and the loss (``_Pricer``; under
# LoRA the adapters' collectives also depend on recompute, re-gather and activation offload,
# ``peft/model.py`` regather_blocker); a chunk's forward and backward pass; what one TP rank of a
# chunk holds (``estimate/params.py``); a chunk's work with its data-parallel collectives; the
# layers of every chunk of every stage (``Derived.chunks``, and the layers activation offload
# picks). A price that comes to read another knob must add it here.
SHAPE_KNOBS = KnobSubset("tp", "cp", "mbs", "sp", "ep", "etp")
ADAPTER_KNOBS = KnobSubset("recompute", "regather", "act_offload")
PASS_KNOBS = SHAPE_KNOBS | KnobSubset("vpp", "recompute", "act_offload", "regather")
PARAMS_KNOBS = KnobSubset("tp", "ep", "etp")
CHUNK_WORK_KNOBS = PASS_KNOBS | KnobSubset("pp", "sharding", "fsdp_strategy")
LAYOUT_KNOBS = Derived.CHUNK_KNOBS | KnobSubset("pp", "act_offload")

# What a chunk's passes and parameters depend on besides the knobs: its layers' kinds, whether
# it holds the embedding and the output layer, its MTP layers, and its first layer where
# layer-wise activation offload picks layers by index.
ChunkSignature = tuple[tuple[bool, ...], bool, bool, int, int]


@dataclass(frozen=True)
class _Shapes:
    """What one tensor/context/expert-parallel shape prices: each layer kind, the output layer
    and the loss."""

    pricer: _Pricer
    kinds: dict[bool, _Layer]  # by is_moe
    output_fwd: float
    output_wgrad: float
    loss_fwd: float
    loss_bwd: float


@dataclass(frozen=True)
class _Layout:
    """The chunks of a pipeline layout: each distinct stage's chunks with their signatures, and
    which distinct stage each pipeline rank is."""

    distinct: tuple[tuple[tuple[Chunk, ChunkSignature], ...], ...]
    rank_of: tuple[int, ...]  # per pipeline rank, its index in ``distinct``


@dataclass(frozen=True)
class Priced:
    """A layout's stages as the simulation takes them."""

    stages: list[StageWork]  # ranks that build the same chunks share one StageWork
    num_microbatches: int
    group: int  # microbatch_group_size_per_vp_stage
    overlap: Overlap
    unmeasured: tuple[str, ...]


class StepPricer:
    """Prices the stages of layouts of one job on one GPU in one training loop: per layer its
    kernels and collectives (``_Pricer``), per chunk its passes and data-parallel collectives,
    per stage its optimizer step. With ``reuse`` (the planner, which prices many layouts of one
    job) each piece is kept under the knobs it depends on (the ``*_KNOBS`` above) and every
    collective under its arguments; the prices are the same."""

    def __init__(self, gpu: GPU, floor: K.HostFloor, reuse: bool = False) -> None:
        self.gpu, self.floor, self.reuse = gpu, floor, reuse
        self._shapes: dict[tuple[object, ...], _Shapes] = {}
        self._passes: dict[tuple[object, ...], ChunkWork] = {}
        self._params: dict[tuple[object, ...], tuple[float, float]] = {}
        self._works: dict[tuple[object, ...], ChunkWork] = {}
        self._layouts: dict[tuple[object, ...], _Layout] = {}
        self._collectives: dict[tuple[object, ...], float] = {}

    def _cached(
        self,
        store: dict[tuple[object, ...], Value],
        key: tuple[object, ...],
        make: Callable[..., Value],
        *args: Any,
    ) -> Value:
        """``make(*args)``, kept in ``store`` under ``key`` when the pricer reuses prices."""
        if not self.reuse:
            return make(*args)
        hit = store.get(key)
        if hit is None:
            hit = store[key] = make(*args)
        return hit

    def price(self, d: Derived, data_parallel: bool = True) -> Priced:
        """Every stage of the layout of ``d``; stages that build the same chunks are priced once.
        Without ``data_parallel``, the chunks' passes alone: no data-parallel collectives (what
        the planner bounds a layout group by, ``memtune/plan/search.py``)."""
        shapes = self.shapes(d)
        layout = self._cached(self._layouts, LAYOUT_KNOBS.key(d.knobs), _layout_of, d)
        works = [self.stage(d, shapes, chunks, data_parallel) for chunks in layout.distinct]
        return Priced(
            [replace(works[i], send_s=_send_s(d, rank)) for rank, i in enumerate(layout.rank_of)],
            d.num_microbatches,
            d.model.microbatch_group_size_per_vp_stage or d.pp,
            overlap_of(d),
            tuple(sorted(shapes.pricer.unmeasured)),
        )

    def whole_model(self, d: Derived) -> ChunkWork:
        """The passes of one chunk holding every layer of the model with the embedding, the
        output layer and the loss, at the parallel shape of ``d`` (``simulate.spread_bound``)."""
        m = d.model
        whole = Chunk(0, 0, tuple(range(m.num_layers)), True, True, d.mtp_num_layers)
        return _chunk_passes(d, self.shapes(d), self.floor, whole, 1)

    def shapes(self, d: Derived) -> _Shapes:
        key = SHAPE_KNOBS.key(d.knobs)
        if d.job.peft is not None:
            key += ADAPTER_KNOBS.key(d.knobs)
        return self._cached(self._shapes, key, _shapes_of, d, self.gpu, self.floor)

    def stage(
        self,
        d: Derived,
        shapes: _Shapes,
        chunks: tuple[tuple[Chunk, ChunkSignature], ...],
        data_parallel: bool,
    ) -> StageWork:
        """One pipeline rank's chunks, the boundary tensor it sends, and its optimizer step."""
        works = []
        held = 0.0  # parameters whose optimizer state the rank keeps
        sharded = d.use_distributed_optimizer or d.fsdp_strategy != "no_shard"
        knobs = d.knobs
        params_key, passes_key, work_key = (
            PARAMS_KNOBS.key(knobs),
            PASS_KNOBS.key(knobs),
            CHUNK_WORK_KNOBS.key(knobs),
        )
        for chunk, signature in chunks:
            dense, expert = self._cached(self._params, (params_key, signature), _params_of, d, chunk)
            work = self._cached(
                self._passes,
                (passes_key, signature),
                _chunk_passes,
                d,
                shapes,
                self.floor,
                chunk,
                len(chunks),
            )
            if data_parallel:
                work = self._cached(
                    self._works,
                    (work_key, signature),
                    self.with_data_parallel,
                    d,
                    work,
                    dense,
                    expert,
                    len(chunk.layers),
                )
            works.append(work)
            held += dense / (d.dp * d.cp if sharded else 1)
            held += expert / (d.edp if sharded else 1)
        return StageWork(tuple(works), 0.0, self.optimizer(d, shapes, held))

    def with_data_parallel(
        self, d: Derived, passes: ChunkWork, dense: float, expert: float, layers: int
    ) -> ChunkWork:
        """A chunk's ``passes`` with the data-parallel collectives of its sharding strategy
        (``memtune/perf/sharding.py``): once a step, or Megatron-FSDP's every microbatch with what
        the passes' compute leaves of them exposed; ``dense`` and ``expert`` are the parameters
        one TP rank of it holds, in ``layers`` transformer layers."""
        frozen = d.job.peft is not None
        dp = chunk_work(d, d.network, self.gpu.name, dense, expert, layers, frozen)
        dp_fwd = exposed(dp.forward_s, dp.first_gather_s, passes.forward_s) if dp.forward_s else 0.0
        first = dp.first_gather_s if dp.forward_s else 0.0
        dp_bwd = exposed(dp.backward_s, first, passes.backward_s) if dp.backward_s else 0.0
        return replace(
            passes,
            grad_reduce_s=dp.grad_reduce_s,
            param_gather_s=dp.param_gather_s,
            buckets=dp.buckets,
            dp_forward_exposed_s=dp_fwd,
            dp_backward_exposed_s=dp_bwd,
        )

    def collective(self, d: Derived, op: Op, nbytes: float, group: Group) -> float:
        """Seconds of one collective (``memtune/perf/collectives.py``) on the job's fabric."""
        key = (op, nbytes, group)
        hit = self._collectives.get(key)
        if hit is None:
            hit = self._collectives[key] = collective(op, nbytes, group, d.network, self.gpu.name).seconds
        return hit

    def optimizer(self, d: Derived, shapes: _Shapes, held: float) -> float:
        """The optimizer step of a rank keeping the optimizer state of ``held`` parameters: Adam's
        own kernel from the measured table, and Megatron's work around it per parameter
        (gradient norm and clipping, the copy back into the model's weights; the distributed
        optimizer's shard copies) at HBM speed; the offloaded share over the host link and on the
        CPU (``memtune/perf/offload.py``)."""
        job, pricer = d.job, shapes.pricer
        trained = 0.0 if job.peft is not None else held
        host = job.optimizer.optimizer_offload_fraction if job.optimizer.optimizer_cpu_offload else 0.0
        adam_s = pricer.hbm_ratio / pricer.eager.adam_params_per_s[d.adam_kernel]
        around = K.OPTIMIZER_STEP_BYTES_PER_PARAM[d.use_distributed_optimizer] / pricer.hbm
        seconds = trained * (1 - host) * (adam_s + around) + self.floor.step_s
        if host:
            seconds += optimizer_offload_s(d, trained * host)
        return seconds


def _send_s(d: Derived, stage: int) -> float:
    """The boundary tensor from pipeline rank ``stage`` to the next (virtual) stage, over NVLink
    or, where the two stages sit in different NVLink domains (pipeline ranks TP x CP x DP apart),
    the adapters."""
    tokens = d.micro_batch_size * d.model.seq_length / d.cp
    boundary = BF16 * (tokens / d.tp if d.sequence_parallel else tokens) * d.model.hidden_size
    crosses = pipeline_crosses_domain(stage, d.pp, d.tp * d.cp * d.dp, d.network)
    return send_recv(boundary, crosses, d.network)


def _layout_of(d: Derived) -> _Layout:
    distinct: dict[tuple[ChunkSignature, ...], int] = {}
    stages: list[tuple[tuple[Chunk, ChunkSignature], ...]] = []
    rank_of = []
    for rank_chunks in d.chunks:
        signed = tuple((chunk, _signature(d, chunk)) for chunk in rank_chunks)
        key = tuple(signature for _, signature in signed)
        if key not in distinct:
            distinct[key] = len(stages)
            stages.append(signed)
        rank_of.append(distinct[key])
    return _Layout(tuple(stages), tuple(rank_of))


def _params_of(d: Derived, chunk: Chunk) -> tuple[float, float]:
    """(dense and replicated, expert) parameters one TP rank of ``chunk`` holds."""
    from memtune.estimate.params import chunk_params

    held = chunk_params(d, chunk)  # memtune/estimate/params.py
    return held.dense + held.replicated, held.expert


def _signature(d: Derived, chunk: Chunk) -> ChunkSignature:
    offloaded_from = chunk.layers[0] if d.activation_offload_layers and chunk.layers else -1
    return (
        tuple(d.moe_layer_pattern[i] for i in chunk.layers),
        chunk.has_embedding,
        chunk.has_output,
        chunk.mtp_layers,
        offloaded_from,
    )


def _shapes_of(d: Derived, gpu: GPU, floor: K.HostFloor) -> _Shapes:
    pricer = _Pricer(d, gpu, floor)
    frozen = d.job.peft is not None
    kinds = {moe: pricer.layer(moe, frozen) for moe in set(d.moe_layer_pattern)}
    T = d.micro_batch_size * d.model.seq_length / d.cp
    vocab = d.padded_vocab_size / d.tp
    output_fwd = pricer.gemm(T, vocab, d.model.hidden_size) * K.IN_STEP_KERNEL_FACTOR
    if d.cross_entropy == "unfused":
        # Megatron's VocabParallelCrossEntropy, forward and backward from the measured table,
        # split by the bytes each moves per logit (K.CROSS_ENTROPY_FORWARD_SHARE)
        both = pricer.eager.cross_entropy.seconds(T * vocab) * pricer.hbm_ratio
        loss_fwd, loss_bwd = both * K.CROSS_ENTROPY_FORWARD_SHARE, both * (1 - K.CROSS_ENTROPY_FORWARD_SHARE)
    else:
        # a fused kernel: about three fp32 passes over the logits each way (unmeasured)
        loss_fwd = loss_bwd = 3 * 4 * T * vocab / pricer.hbm
    return _Shapes(pricer, kinds, output_fwd, 0.0 if frozen else output_fwd, loss_fwd, loss_bwd)


def _chunk_passes(
    d: Derived, shapes: _Shapes, floor: K.HostFloor, chunk: Chunk, chunks_per_rank: int
) -> ChunkWork:
    """One microbatch's forward and backward pass through ``chunk``, without its data-parallel
    collectives: its layers' kernels (with
    what recompute replays and what activation offload leaves exposed), the embedding, the
    output layer and the loss, each pass the longer of its host and device totals
    (``_pass_time``) with the host copies of activation offload it does not hide
    (``memtune/perf/offload.py``), and the TP and EP collectives each layer leaves exposed."""
    m = d.model
    kinds = shapes.kinds
    h = m.hidden_size
    T = d.micro_batch_size * m.seq_length / d.cp
    tokens_res = T / d.tp if d.sequence_parallel else T
    hbm = shapes.pricer.hbm
    tp = tp_back = tp_blocking = ep = 0.0
    # (host launch work, device time) of each piece of the chunk's passes
    forward = [(floor.microbatch_s / chunks_per_rank, 0.0)]
    backward: list[tuple[float, float]] = []
    replayed = 0
    if m.recompute_granularity == "full":
        groups = d.full_recompute_groups(len(chunk.layers))
        replayed = sum(n for n, checkpointed in groups if checkpointed)
    if chunk.has_embedding:
        forward.append((0.0, BF16 * tokens_res * h / hbm))
    for i, layer in enumerate(chunk.layers):
        is_moe = d.moe_layer_pattern[layer]
        lt = kinds[is_moe]
        forward.append((lt.host_fwd, lt.fwd))
        back = lt.bwd + (lt.fwd if i < replayed else 0.0)
        if m.recompute_granularity == "selective":
            back += recompute_forward(d, lt, is_moe)
            modules = d.recompute_modules
            if ("mlp" in modules and not is_moe) or ("moe" in modules and is_moe):
                # the replayed MLP or MoE block runs its collectives again
                tp_back += lt.mlp_tp_fwd + (lt.ep_fwd if is_moe else 0.0)
        replay_host = lt.host_fwd if i < replayed else 0.0
        backward.append((floor.backward_factor * lt.host_fwd + replay_host, back))
        tp += lt.tp_fwd
        tp_back += lt.tp_bwd
        tp_blocking += lt.tp_bwd_blocking
        ep += lt.ep_fwd
    out_wgrad = 0.0
    if chunk.has_output:
        forward.append((0.0, shapes.output_fwd + shapes.loss_fwd))
        backward.append((0.0, shapes.output_fwd + shapes.output_wgrad + shapes.loss_bwd))
        out_wgrad = shapes.output_wgrad
    fwd, bwd = _pass_time(forward), _pass_time(backward)
    # the host copies of activation offload beyond the compute they hide behind
    offload_fwd, offload_bwd = activation_offload_s(d, chunk, fwd, bwd)
    return ChunkWork(
        forward_s=fwd + offload_fwd,
        backward_s=bwd + offload_bwd,
        tp_forward_s=tp,
        tp_backward_s=tp_back,
        tp_backward_blocking_s=tp_blocking,
        ep_forward_s=ep,
        ep_backward_s=ep,
        output_wgrad_s=out_wgrad,
    )


def overlap_of(d: Derived) -> Overlap:
    """Which communication the job's settings make Megatron hide (``memtune/perf/simulate.py``)."""
    return Overlap(
        overlap_grad_reduce=d.job.ddp.overlap_grad_reduce,
        overlap_param_gather=d.job.ddp.overlap_param_gather,
        deferred_output_wgrad_microbatches=d.deferred_wgrad_microbatches,
        # Megatron-LM and Bridge switch overlap_p2p_comm on with VPP
        # (megatron/core/transformer/moe/README.md, "auto-enabled with VPP").
        overlap_p2p_comm=d.vpp > 1,
        single_device_connection=d.device_max_connections == "1",
        overlap_moe_expert_parallel_comm=d.model.overlap_moe_expert_parallel_comm,
        delay_wgrad_compute=d.model.delay_wgrad_compute,
    )


def predict_step(
    d: Derived,
    gpu: GPU | None = None,
    floor: K.HostFloor | None = None,
    record_events: bool = False,
    pricer: StepPricer | None = None,
    max_passes: int = MAX_SIMULATED_OPERATIONS,
) -> StepPrediction:
    """Predicted step of the job of ``d`` as configured, on its GPU (or ``gpu``), in a training
    loop with host floor ``floor`` (Megatron-LM's unless told); ``record_events`` keeps the
    simulated passes for a Gantt chart. ``pricer`` (the planner's, reusing prices across the
    layouts of one job) gives the same prediction."""
    pricer = pricer or StepPricer(gpu or get_gpu(d.job.cluster.gpu), floor or K.MEGATRON_LM_LOOP)
    return predict_priced(d, pricer.price(d), record_events, max_passes)


def predict_priced(
    d: Derived, priced: Priced, record_events: bool = False, max_passes: int = MAX_SIMULATED_OPERATIONS
) -> StepPrediction:
    """The step of ``d``'s layout from its priced stages: the simulated schedule."""
    sim = simulate(
        priced.stages, priced.num_microbatches, priced.group, priced.overlap, record_events, max_passes
    )
    tokens = d.num_microbatches * d.micro_batch_size * d.model.seq_length * d.dp
    world = d.tp * d.pp * d.cp * d.dp
    flops = 3 * model_flops_per_token(d) * tokens
    return StepPrediction(
        step_time_s=sim.step_s,
        tokens_per_s_per_gpu=tokens / sim.step_s / world,
        model_tflops_per_gpu=flops / sim.step_s / world / 1e12,
        simulated=sim,
        unmeasured=priced.unmeasured,
    )
