"""Predicted step time of a training layout: compute from FLOPs at a shape-dependent GEMM
efficiency, communication from bytes over the link each collective uses, the pipeline bubble,
the optimizer step and offload transfers.

The model reads the architecture and the layout from a :class:`~memtune.config.derived.Derived`:
``memtune plan`` passes the view of each candidate's knobs (``Derived.with_knobs``) and a
:class:`PredictionMemo` that shares per-layer times between candidates; ``predict(checked)`` is
the one-job entry point. Every constant is in :mod:`memtune.perf.constants`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from memtune.catalog.gpus import GPU, get_gpu
from memtune.check import CheckedJob
from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.config.knobs import KnobSubset
from memtune.peft.model import adapter_collectives, adapters_in_layer
from memtune.perf import constants as K
from memtune.perf.offload import host_bytes_per_s, optimizer_offload_s

BF16 = 2


@dataclass
class Prediction:
    step_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    breakdown: dict[str, float]  # seconds per step by component, on the slowest pipeline stage
    stage_compute_s: tuple[float, ...] = ()  # per pipeline stage: its microbatches' compute and recompute

    @property
    def assumptions(self) -> list[str]:
        return list(ASSUMPTIONS)


ASSUMPTIONS = [
    "GEMM efficiency = peak fraction / (1 + n½/M + n½/N + n½/K): peak fraction and n½ fitted to shard-shaped GEMMs on the H200; other GPUs scale by catalog peak",
    "flash attention, causal; backward does 2.5x the forward FLOPs",
    "balanced MoE routing; each rank's experts get tokens · top-k · ETP · EP / (TP · experts) rows",
    "TP collectives half exposed (Transformer Engine comm overlap assumed on where recipes enable it)",
    "pipeline send/receive exposed; interleaved 1F1B bubble (p-1)/(v·m) of the slowest stage",
    "DP reduce-scatter / all-gather hidden behind the last/first microbatch when the overlap flags are on",
    "one 400 Gb/s NIC per GPU between nodes; NVLink inside a node",
    "LoRA: frozen base weights skip their weight-gradient GEMMs; the adapters' activation-sized TP collectives exposed; adapter FLOPs neglected",
    "model TFLOP/s counts 3x forward FLOPs without recompute (Megatron's convention)",
]


class _Hardware:
    def __init__(self, gpu: GPU, fp8: bool) -> None:
        self.peak = gpu.fp8_flops if fp8 and gpu.fp8_flops else gpu.bf16_flops
        self.bf16_peak = gpu.bf16_flops
        self.hbm = gpu.hbm_tbps * 1e12 * K.HBM_FRACTION
        self.nvlink = gpu.link_gbps / 2 * 1e9 * K.NVLINK_BUS_FRACTION
        self.nvlink_a2a = gpu.link_gbps / 2 * 1e9 * K.ALL_TO_ALL_NVLINK_FRACTION
        self.ib = K.INTER_NODE_GBPS_PER_GPU * 1e9 * K.INTER_NODE_BUS_FRACTION
        self.ib_a2a = K.INTER_NODE_GBPS_PER_GPU * 1e9 * K.ALL_TO_ALL_INTER_NODE_FRACTION


def gemm_efficiency(m: float, n: float, k: float) -> float:
    h = K.GEMM_HALF_SIZE
    return K.GEMM_PEAK_FRACTION / (1 + h / max(m, 1) + h / max(n, 1) + h / max(k, 1))


def gemm_time(hw: _Hardware, m: float, n: float, k: float, count: float = 1.0) -> float:
    if m <= 0 or n <= 0 or k <= 0 or count <= 0:
        return 0.0
    return count * 2 * m * n * k / (hw.peak * gemm_efficiency(m, n, k))


def ring_time(nbytes: float, group: int, bandwidth: float) -> float:
    """All-gather or reduce-scatter of ``nbytes`` (the full tensor) over a ring of ``group``."""
    if group <= 1:
        return 0.0
    return nbytes * (group - 1) / group / bandwidth


@dataclass
class _LayerTimes:
    gemm_fwd: float  # forward GEMMs
    gemm_wgrad: float  # weight-gradient GEMMs (dgrad equals forward)
    attn_fwd: float
    attn_bwd: float
    elementwise_fwd: float
    mlp_fwd: float  # part of gemm_fwd in the MLP / experts (selective recompute of mlp/moe)
    up_proj_fwd: float  # MLA's query and key-value up projections (selective recompute of mla_up_proj)
    shared_fwd: float  # shared experts (selective recompute of shared_experts)
    tp_comm: float  # one direction (forward); backward is the same
    ep_comm: float
    cp_comm: float


# The knobs one layer's times depend on (``_layer``); the memo keys them by these.
LAYER_KNOBS = KnobSubset("tp", "cp", "mbs", "ep", "etp", "sp")
# The knobs a stage's parameter count depends on (``_rank_params``), besides its layers and
# whether it is the first or the last stage.
STAGE_PARAMS_KNOBS = KnobSubset("tp", "ep", "etp", "pp")
StageParamsKey = tuple[tuple[Any, ...], int, bool]


@dataclass
class PredictionMemo:
    """What :func:`predict_layout` reuses across the layouts of one architecture on one GPU."""

    hardware: _Hardware | None = None
    flops_per_token: float | None = None
    layers: dict[tuple[Any, ...], dict[bool, _LayerTimes]] = field(default_factory=dict)  # by is_moe
    stage_params: dict[StageParamsKey, float] = field(default_factory=dict)


def _layer(d: Derived, hw: _Hardware, is_moe: bool, frozen: bool) -> _LayerTimes:
    m = d.model
    h = m.hidden_size
    t, cp = d.tp, d.cp
    seq = m.seq_length
    gpus_per_node = d.job.cluster.gpus_per_node
    T = d.micro_batch_size * seq / cp
    heads = m.num_attention_heads / t
    gemm = 0.0
    up_proj = 0.0
    shared = 0.0
    if m.multi_latent_attention:
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        if m.q_lora_rank is not None:
            up_proj += gemm_time(hw, T, heads * qk, m.q_lora_rank)
            gemm += gemm_time(hw, T, m.q_lora_rank, h)
        else:
            gemm += gemm_time(hw, T, heads * qk, h)
        gemm += gemm_time(hw, T, m.kv_lora_rank + m.qk_pos_emb_head_dim, h)
        up_proj += gemm_time(hw, T, heads * (m.qk_head_dim + m.v_head_dim), m.kv_lora_rank)
        gemm += up_proj
        gemm += gemm_time(hw, T, h, heads * m.v_head_dim)
        attn_flops = 2 * T * seq * heads * (qk + m.v_head_dim) * 0.5
    else:
        kv = d.kv_channels
        groups = max(d.num_query_groups / t, 1)
        gemm += gemm_time(hw, T, (heads + 2 * groups) * kv, h)
        gemm += gemm_time(hw, T, h, heads * kv)
        attn_flops = 4 * T * seq * heads * kv * 0.5
    attn_fwd = attn_flops / (hw.bf16_peak * K.ATTENTION_FWD_FRACTION)
    attn_bwd = K.ATTENTION_BWD_FLOPS_FACTOR * attn_flops / (hw.bf16_peak * K.ATTENTION_BWD_FRACTION)
    gate = 2 if m.gated_linear_unit else 1
    mlp = 0.0
    ep_comm = 0.0
    if is_moe:
        experts, k = m.num_moe_experts or 1, m.moe_router_topk
        f = d.moe_ffn_hidden_size / d.etp
        rows = T * k * d.etp * d.ep / (t * experts)
        local = experts / d.ep
        mlp += gemm_time(hw, T / t if d.sequence_parallel else T, experts, h)
        mlp += gemm_time(hw, rows, gate * f, h, local) + gemm_time(hw, rows, h, f, local)
        if m.moe_shared_expert_intermediate_size:
            fs = m.moe_shared_expert_intermediate_size / t
            shared = gemm_time(hw, T, gate * fs, h) + gemm_time(hw, T, h, fs)
            mlp += shared
        routed_bytes = BF16 * T / t * k * h * d.etp
        if d.ep > 1:
            inter = d.ep * d.etp > gpus_per_node
            bw = hw.ib_a2a if inter else hw.nvlink_a2a
            ep_comm = 2 * routed_bytes * (d.ep - 1) / d.ep / bw
    else:
        f = d.ffn_hidden_size / t
        mlp += gemm_time(hw, T, gate * f, h) + gemm_time(hw, T, h, f)
    gemm += mlp
    wgrad = 0.0 if frozen else gemm
    tokens_res = T / t if d.sequence_parallel else T
    elementwise = K.ELEMENTWISE_PASSES_FWD * BF16 * tokens_res * h / hw.hbm
    tp_comm = 0.0
    if t > 1:
        bw = hw.ib if t > gpus_per_node else hw.nvlink
        # Two all-gathers and two reduce-scatters (or two all-reduces) of the [T, h] activation.
        tp_comm = 4 * ring_time(BF16 * T * h, t, bw) * K.TP_COMM_EXPOSED_FRACTION
    cp_comm = 0.0
    if cp > 1:
        kv_width = (
            m.kv_lora_rank + m.qk_pos_emb_head_dim
            if m.multi_latent_attention
            else 2 * max(d.num_query_groups / t, 1) * d.kv_channels
        )
        bw = hw.ib if t * cp > gpus_per_node else hw.nvlink
        step = BF16 * T * kv_width / bw
        # Each of cp-1 ring steps sends this rank's KV block while attention runs on the last one.
        cp_comm = max(0.0, (cp - 1) * step - attn_fwd)
    return _LayerTimes(
        gemm,
        wgrad,
        attn_fwd,
        attn_bwd,
        elementwise,
        mlp,
        up_proj,
        shared,
        tp_comm,
        ep_comm,
        cp_comm,
    )


def _adapter_comm(d: Derived, hw: _Hardware, is_moe: bool) -> float:
    """One layer's LoRA adapters' activation-sized TP collectives, forward and backward
    (``memtune/peft/model.py adapter_collectives``; an all-reduce is two ring passes), none
    hidden. Not memoized with the layer: whether an adapter re-gathers depends on recompute."""
    t = d.tp
    if d.job.peft is None or t <= 1:
        return 0.0
    bw = hw.ib if t > d.job.cluster.gpus_per_node else hw.nvlink
    tokens = d.micro_batch_size * d.model.seq_length / d.cp
    ring = ring_time(BF16 * tokens * d.model.hidden_size, t, bw)
    return sum(
        adapter.copies * ring * (2 if c.op == "all_reduce" else 1)
        for adapter in adapters_in_layer(d, is_moe)
        for c in adapter_collectives(d, adapter)
        if c.activation
    )


class ForwardParts(Protocol):
    """A layer's forward times by the parts selective recompute can replay."""

    attn_fwd: float
    mlp_fwd: float
    up_proj_fwd: float
    shared_fwd: float
    elementwise_fwd: float


def recompute_forward(d: Derived, lt: ForwardParts, is_moe: bool) -> float:
    """Forward time one layer replays under selective recompute (Megatron-Core's modules: ``mlp``
    is the dense MLP, ``moe`` the whole MoE block, ``moe_act`` the experts' activation); the
    analytic model and the step model (``perf/step.py``) both read it."""
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


def activation_offload_exposed_s(d: Derived, layer_compute_s: float) -> float:
    """What one offloaded layer's copies to the host and back (one microbatch, layer-wise
    ``cpu_offloading``) leave exposed beyond ``layer_compute_s``, the forward and backward compute
    they overlap (``ACTIVATION_OFFLOAD_OVERLAP``)."""
    m = d.model
    tokens = d.micro_batch_size * m.seq_length / d.cp
    per_layer = BF16 * (tokens / d.tp if d.sequence_parallel else tokens) * m.hidden_size * 17
    transfer = 2 * per_layer / host_bytes_per_s(d)
    return max(0.0, transfer - layer_compute_s)


def model_flops_per_token(d: Derived) -> float:
    """Forward FLOPs per token of the whole model (active experts only), at TP = CP = 1."""
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


def predict_derived(d: Derived, gpu: GPU, memo: PredictionMemo | None = None) -> Prediction:
    """Predicted step of the layout of ``d`` on ``gpu``.

    ``memo`` (one the caller keeps for the layouts of one job, ``Derived.with_knobs``, on one
    GPU) reuses per-layer times across layouts that share their knobs; the result is the same with
    or without it.
    """
    m, job = d.model, d.job
    memo = memo if memo is not None else PredictionMemo()
    if memo.hardware is None:
        memo.hardware = _Hardware(gpu, m.fp8 is not None)
    hw = memo.hardware
    frozen = job.peft is not None
    knobs = d.knobs
    key = LAYER_KNOBS.key(knobs)
    kinds = memo.layers.get(key)
    if kinds is None:
        kinds = memo.layers[key] = {moe: _layer(d, hw, moe, frozen) for moe in set(d.moe_layer_pattern)}
    moe_share = sum(d.moe_layer_pattern) / len(d.moe_layer_pattern)
    h = m.hidden_size
    T = d.micro_batch_size * m.seq_length / d.cp

    avg = _average_layer(kinds, moe_share)
    fwd_layer = avg.gemm_fwd + avg.attn_fwd + avg.elementwise_fwd
    bwd_layer = avg.gemm_fwd + avg.gemm_wgrad + avg.attn_bwd + 2 * avg.elementwise_fwd
    comm_layer = 2 * (avg.tp_comm + avg.ep_comm) + 3 * avg.cp_comm
    if frozen:
        comm_layer += sum(share * _adapter_comm(d, hw, moe) for moe, share in _shares(kinds, moe_share))
    recompute_layer = 0.0
    if d.recompute_granularity == "selective":
        recompute_layer = sum(
            share * recompute_forward(d, kinds[moe], moe) for moe, share in _shares(kinds, moe_share)
        )
    vocab = math.ceil(m.vocab_size / (m.make_vocab_size_divisible_by * d.tp)) * m.make_vocab_size_divisible_by
    output_fwd = gemm_time(hw, T, vocab, h)
    output_bwd = 2 * output_fwd if not frozen else output_fwd

    # The slowest stage sets the pace; the last stage also runs the output layer and the loss.
    stage_times, replays = [], []
    for r, layers in enumerate(d.layers_per_stage):
        replay = (
            fwd_layer * d.recomputed_layers_per_chunk * d.vpp
            if d.recompute_granularity == "full"
            else recompute_layer * layers
        )
        t = layers * (fwd_layer + bwd_layer + comm_layer) + replay
        if r == d.pp - 1:
            t += output_fwd + output_bwd
        stage_times.append(t)
        replays.append(replay)
    slowest = max(range(d.pp), key=lambda r: stage_times[r])
    t_mb = stage_times[slowest]
    layers = d.layers_per_stage[slowest]

    M, p, v = d.num_microbatches, d.pp, d.vpp
    breakdown: dict[str, float] = {}
    compute_mb = layers * (fwd_layer + bwd_layer) + (output_fwd + output_bwd if slowest == p - 1 else 0.0)
    breakdown["compute"] = M * compute_mb
    breakdown["compute: recompute"] = M * replays[slowest]
    breakdown["tensor/expert/context parallel comm"] = M * layers * comm_layer
    if p > 1:
        bw = hw.ib if d.world_size // p >= d.job.cluster.gpus_per_node else hw.nvlink
        boundary = BF16 * (T / d.tp if d.sequence_parallel else T) * h / bw
        breakdown["pipeline send/recv"] = K.PP_P2P_EXPOSED_FRACTION * M * v * 2 * boundary
    breakdown["pipeline bubble"] = (p - 1) / v * t_mb if p > 1 else 0.0

    # Data parallel: gradients reduce over DP x CP (experts over expert-DP), weights gather back.
    pkey: StageParamsKey = (
        STAGE_PARAMS_KNOBS.key(knobs),
        d.layers_per_stage[slowest],
        slowest == 0 or slowest == p - 1,
    )
    params = memo.stage_params.get(pkey)
    if params is None:
        params = memo.stage_params[pkey] = _rank_params(d, slowest)
    grad_bytes = DTYPE_BYTES[d.grad_dtype]
    weight_bytes = DTYPE_BYTES[d.param_dtype]
    trainable = 0.0 if frozen else params
    dp_group = d.dp * d.cp
    dp_bw = hw.ib if d.tp * d.cp * d.dp > d.job.cluster.gpus_per_node else hw.nvlink
    if d.fsdp_strategy == "optim_grads_params":
        comm = M * (
            2 * ring_time(weight_bytes * params, dp_group, dp_bw)
            + ring_time(grad_bytes * trainable, dp_group, dp_bw)
        )
        dp_time = max(0.0, comm - K.DP_OVERLAP_WINDOW_FRACTION * breakdown["compute"])
    else:
        reduce = ring_time(grad_bytes * trainable, dp_group, dp_bw) * (
            1 if d.use_distributed_optimizer else 2
        )
        gather = ring_time(weight_bytes * trainable, dp_group, dp_bw) if d.use_distributed_optimizer else 0.0
        bwd_window = K.DP_OVERLAP_WINDOW_FRACTION * layers * bwd_layer
        fwd_window = K.DP_OVERLAP_WINDOW_FRACTION * layers * fwd_layer
        dp_time = max(0.0, reduce - bwd_window) if d.job.ddp.overlap_grad_reduce else reduce
        dp_time += max(0.0, gather - fwd_window) if d.job.ddp.overlap_param_gather else gather
    breakdown["data-parallel comm"] = dp_time

    sharded = d.use_distributed_optimizer or d.fsdp_strategy != "no_shard"
    opt_params = trainable / dp_group if sharded else trainable
    on_host = d.optimizer_offload_fraction
    breakdown["optimizer step"] = opt_params * (1 - on_host) * K.OPTIMIZER_BYTES_PER_PARAM / hw.hbm
    if on_host:
        host = opt_params * on_host
        breakdown["optimizer offload"] = optimizer_offload_s(d, host)
    if d.activation_offload_layers:
        exposed = activation_offload_exposed_s(d, fwd_layer + bwd_layer)
        breakdown["activation offload"] = M * d.activation_offload_layers * exposed

    step = sum(breakdown.values())
    tokens = M * d.micro_batch_size * m.seq_length * d.dp
    world = d.world_size
    if memo.flops_per_token is None:
        memo.flops_per_token = model_flops_per_token(d)
    per_token = memo.flops_per_token
    flops = 3 * per_token * tokens
    return Prediction(
        step_time_s=step,
        tokens_per_s_per_gpu=tokens / step / world,
        model_tflops_per_gpu=flops / step / world / 1e12,
        breakdown=breakdown,
        stage_compute_s=tuple(
            M * (t - d.layers_per_stage[r] * comm_layer) for r, t in enumerate(stage_times)
        ),
    )


def _average_layer(kinds: dict[bool, _LayerTimes], moe_share: float) -> _LayerTimes:
    """The times of the model's mean layer: MoE and dense layers weighted by their shares."""
    if len(kinds) == 1:
        return next(iter(kinds.values()))
    moe, dense = kinds[True], kinds[False]
    return _LayerTimes(
        **{
            f.name: moe_share * getattr(moe, f.name) + (1 - moe_share) * getattr(dense, f.name)
            for f in fields(_LayerTimes)
        }
    )


def _shares(kinds: dict[bool, _LayerTimes], moe_share: float) -> list[tuple[bool, float]]:
    if len(kinds) == 1:
        return [(next(iter(kinds)), 1.0)]
    return [(True, moe_share), (False, 1 - moe_share)]


def _rank_params(d: Derived, stage: int) -> float:
    """Parameters one GPU of ``stage`` holds (dense over TP, experts over EP x ETP)."""
    from memtune.estimate.params import layer_params

    layers = d.layers_per_stage[stage]
    moe_share = sum(d.moe_layer_pattern) / len(d.moe_layer_pattern)
    dense = layer_params(d, False) if moe_share < 1 else None
    moe = layer_params(d, True) if moe_share > 0 else None
    total = 0.0
    for counts, share in ((dense, 1 - moe_share), (moe, moe_share)):
        if counts is not None:
            total += (
                share * layers * (counts.dense / d.tp + counts.replicated + counts.expert / (d.ep * d.etp))
            )
    if stage in (0, d.pp - 1):
        total += d.model.vocab_size * d.model.hidden_size / d.tp
    return total


def predict(checked: CheckedJob) -> Prediction:
    """Predicted step time, tokens/s and model TFLOP/s per GPU of a checked job."""
    d = checked.derived
    return predict_derived(d, get_gpu(checked.job.cluster.gpu))
