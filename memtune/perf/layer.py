"""One transformer layer's work for one microbatch at one parallel shape, and the other pieces
of a chunk's passes that depend only on that shape: what :mod:`memtune.perf.step` adds up.

:class:`ShapePricer` prices, for the tensor/context/expert-parallel shape and micro-batch of a
job (``step.SHAPE_KNOBS``; the planner shares one across every layout of that shape):

- a layer's kernels (:meth:`ShapePricer.layer`): every GEMM at its shard shape
  (``memtune/perf/kernels.py``: the GPU's own measured tables, else the H200's, interpolated;
  routed experts from the measured per-expert or grouped table; FP8 GEMMs from the measured
  table of their scaling plus Transformer Engine's input casts), the core attention by the
  kernel that runs it (``Derived.attention_kernel``: PyTorch's flash kernel, cuDNN's fused attention, PyTorch's
  memory-efficient kernel, each from its measured table, or Megatron's unfused attention: its
  score GEMMs and the passes of its masked softmax over the scores), the work around the GEMMs
  (measured eager kernels on the local spec, HBM passes under Transformer Engine), the MoE
  router and token permutes, and the host's launch work for it (the userbuffer overlap's extra
  GEMM calls among it, :meth:`ShapePricer.userbuffer_chunks`);
- a layer's collectives (:meth:`ShapePricer.layer_collectives`): TP all-gathers/reduce-scatters
  (all-reduces without SP; Transformer Engine's userbuffer overlap; FP8 current scaling's amax
  all-reduces, :meth:`ShapePricer.amax_reductions`), EP dispatch and combine by
  the job's dispatcher (``memtune/perf/moe.py``), CP's K/V ring, the LoRA adapters' own, each an
  NCCL-tuned cost of its real message size on its group (``memtune/perf/collectives.py``);
- what a selective recompute replays of a layer (:meth:`ShapePricer.replayed`: kernels and host
  work), the embedding and its gradient, the final norm, output layer and loss, a
  multi-token-prediction layer, and DDP's per-microbatch gradient add.

A price that reads a knob outside the shape takes the job's ``Derived`` as an argument (the
pricer's own is the first layout of its shape the planner met).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memtune.catalog.gpus import GPU, get_gpu
from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.config.schema import UB_DGRAD
from memtune.peft.model import adapter_collectives, adapters_in_layer, gathered_input_bytes
from memtune.perf import constants as K
from memtune.perf.collectives import Group, Op, all_to_all, collective, send_recv
from memtune.perf.kernels import (
    REFERENCE,
    SMALL_M_MEASURED_ON,
    attention_fractions,
    cudnn_attention_fractions,
    eager_kernels,
    expert_gemm_fraction,
    fp8_gemm_fraction,
    gemm_fraction,
    lora_adapter_cost,
    memory_efficient_attention_fractions,
    published_gemm_scale,
    tables_of,
)
from memtune.perf.moe import dispatch_s, dispatcher_host_fwd_s, moe_layer_host_s

BF16 = 2


@dataclass(frozen=True)
class Machine:
    """The time a machine's kernels take inside a training step relative to what the kernel
    tables give (1: the machine they were timed on). The fused attention kernels apart: on the
    H100s that timed memtune's ``crel-``, ``cchk-`` and ``cchk2-`` runs, PyTorch's flash kernel
    took 1.05-1.09x the H100 table's price inside a step while every other kernel took
    0.85-0.89x (``benchmarks/compute_accuracy.py``, from the traced kernels). A measured set's
    machine prices that set only; every user's job is priced at 1."""

    kernels: float = 1.0
    attention: float = 1.0


TABLES_MACHINE = Machine()  # what every user's job is priced on


@dataclass(frozen=True)
class LayerPrice:
    """One transformer layer's work for one microbatch, in seconds: what its passes cost and the
    parts a selective recompute replays."""

    fwd: float  # device compute of the forward (kernels, in-step factor, CP's exposed exchange)
    bwd: float  # of the backward: data and weight gradients
    host_fwd: float  # the host's launch work for the forward (Python, kernel launches)
    host_bwd: float  # and for the backward (autograd's launches)
    wgrad: float  # weight-gradient GEMMs, part of bwd
    attn_fwd: float  # core attention's forward (a ``core_attn`` recompute replays it)
    mlp_fwd: float  # dense MLP or MoE block (routing, activation), forward (``mlp`` / ``moe``)
    up_proj_fwd: float  # MLA's up projections (``mla_up_proj``)
    shared_fwd: float  # shared experts (``shared_experts``)
    norms_fwd: float  # the two norms (``layernorm``)
    activation_fwd: float  # the MLP's activation (``moe_act``)
    tp_fwd: float  # TP collectives of the forward left exposed
    tp_bwd: float  # and of the backward
    tp_bwd_blocking: float  # the backward's that nothing hides (LoRA adapters' own)
    mlp_tp_fwd: float  # the MLP side's share of the forward's (a recompute of mlp or moe replays it)
    ep_fwd: float  # EP dispatch + combine of the forward; likewise
    syncs: bool  # the forward makes the host wait for the GPU (MoE dispatch)


@dataclass(frozen=True)
class _Collectives:
    tp_fwd: float
    tp_bwd: float
    tp_bwd_blocking: float
    mlp_tp_fwd: float
    ep_fwd: float
    ub_fwd: float  # userbuffer overlap's longer GEMMs, forward
    ub_bwd: float


@dataclass(frozen=True)
class Piece:
    """Part of a pass: the host's launch work and the device's time for it."""

    host: float
    device: float
    syncs: bool = False  # the host waits for the GPU inside it


class ShapePricer:
    """The prices of one parallel shape of a job (``d``) on ``gpu`` in a loop with host floor
    ``floor``: each layer kind's, and the other per-microbatch pieces of a chunk's passes.
    Without ``exchanges`` (a rank run alone under PyTorch's fake process group) the MoE
    dispatcher's exchanges move nothing, and its host does not wait on them. ``machine`` is
    the speed of the machine's kernels against the tables' (:class:`Machine`)."""

    def __init__(
        self,
        d: Derived,
        gpu: GPU,
        floor: K.HostFloor,
        exchanges: bool = True,
        machine: Machine = TABLES_MACHINE,
    ) -> None:
        self.d = d
        self.kernel_factor = K.IN_STEP_KERNEL_FACTOR * machine.kernels
        # the fused attention kernels' time against the other kernels' on this machine
        self.attention_factor = machine.attention / machine.kernels
        self.exchanges = exchanges
        self.gpu = gpu
        self.floor = floor
        self.fp8 = d.model.fp8 is not None
        self.hbm = gpu.hbm_tbps * 1e12 * K.HBM_FRACTION
        self.net = d.network
        self.frozen = d.job.peft is not None
        self.tokens = d.micro_batch_size * d.model.seq_length / d.cp  # one microbatch's, per CP rank
        self.tokens_res = self.tokens / d.tp if d.sequence_parallel else self.tokens  # around the GEMMs
        self.act = DTYPE_BYTES[d.activation_dtype]
        self.unmeasured: set[str] = set()
        self.tables = tables_of(gpu.name)
        # a bf16 GEMM's fraction of the reference's, where this GPU has no tables of its own
        self.bf16_gemm_scale = 1.0
        if self.tables != gpu.name:
            self.unmeasured.add(
                f"{gpu.name} kernels: {REFERENCE} fractions of peak applied to its catalog peak"
            )
            blackwell = K.BLACKWELL_KERNEL_FACTOR.get(gpu.name)
            if blackwell is not None:
                self.kernel_factor *= blackwell
                self.unmeasured.add(
                    f"{gpu.name} kernels at {blackwell:.2f}x that price (fitted on published "
                    "whole steps, constants.BLACKWELL_KERNEL_FACTOR)"
                )
            published = published_gemm_scale(gpu.name)
            if published is not None:
                self.bf16_gemm_scale = published
                self.unmeasured.add(
                    f"{gpu.name} bf16 GEMMs at {published:.2f} of the {REFERENCE}'s fractions "
                    "(published square GEMMs, gpus.yaml)"
                )
        # the eager kernels as timed on the tables' GPU; memory-bound, they scale by HBM bandwidth
        self.eager = eager_kernels(self.tables)
        self.hbm_ratio = get_gpu(self.tables).hbm_tbps / gpu.hbm_tbps
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
        # MXFP8's block-scaled kernels: the tensorwise tables' fraction at their measured rate
        self.fp8_gemm_rate = 1.0
        if self.fp8 and d.model.fp8_recipe == "mxfp8":
            self.fp8_gemm_rate = K.MXFP8_GEMM_RATE
            self.unmeasured.add(
                f"mxfp8 GEMMs at {K.MXFP8_GEMM_RATE:.3f} of the tensorwise tables' rate (measured on a "
                "B300 by Transformer Engine, constants.MXFP8_GEMM_RATE)"
            )
        if d.job.peft is not None:
            self.adapter_cost = lora_adapter_cost(self.tables)
            self.unmeasured.add("LoRA adapters' backward: its bytes at the forward's measured rate")
        self._note_shapes_and_graphs()

    def _note_shapes_and_graphs(self) -> None:
        """What the prediction assumes of small GEMMs, windowed attention, CP's exchanges and CUDA
        graphs."""
        d = self.d
        window = d.model.window_size
        if window and any(d.window_attention_pattern):
            if d.attention_kernel not in ("unfused", "cudnn"):
                self.unmeasured.add(
                    "sliding-window attention: its share of the causal kernels' work, at their rate"
                )
            elif d.attention_kernel == "cudnn" and window[0] > K.WINDOW_ATTENTION_TIMED_KEYS:
                self.unmeasured.add(
                    "sliding-window attention wider than the 128 keys timed: their rate, at most a causal layer's time"
                )
        if d.fp8_attention:
            self.unmeasured.add(
                f"FP8 attention ({d.attention_fp8_recipe} scaling): its forward at the rate timed on an H100, "
                "its backward's fitted on published Hopper steps (docs/plan.md)"
            )
        if d.model.softmax_type != "vanilla" and not self.sink_measured:
            self.unmeasured.add(f"{d.model.softmax_type} softmax offsets: priced as the vanilla softmax")
        if d.userbuffer_overlap and any(d.userbuffer_gemm(g).method != "bulk" for g in UB_DGRAD):
            self.unmeasured.add(
                "userbuffer overlap of a data gradient's reduce-scatter (tp_comm_overlap_rs_dgrad): priced as bulk"
            )
        rows = self.tokens / d.tp if d.userbuffer_overlap else self.tokens
        if rows < 1024 and self.tables != SMALL_M_MEASURED_ON:
            self.unmeasured.add(f"GEMMs under 1,024 rows on {self.gpu.name} at the H100's measured ratios")
        if d.cp > 1 and d.model.cp_comm_type != "p2p":
            self.unmeasured.add(
                f"CP's {d.model.cp_comm_type} exchanges: read from Transformer Engine, at NCCL's modelled rates"
            )
        if d.whole_step_graphed:
            self.unmeasured.add("full-iteration CUDA graph: no host work per pass (read from Megatron-Core)")
        elif d.cuda_graphs:
            self._note_layer_graphs()

    def _note_layer_graphs(self) -> None:
        """What the prediction assumes of graphs captured per layer (not the whole step)."""
        d = self.d
        self.unmeasured.add("CUDA graphs: the graphed parts' collectives launch nothing")
        for is_moe in set(d.moe_layer_pattern):
            if d.layer_graph_replays(is_moe):
                self.unmeasured.add(
                    "per-layer CUDA graphs: a replay's host work measured through torch's graphed callables"
                )
            else:
                if d.partly_graphed(is_moe):
                    self.unmeasured.add(
                        "a layer graphed in part: the graphed parts' host work by shares measured on local-spec layers"
                    )
                if is_moe and d.graphed("mlp", is_moe):
                    self.unmeasured.add("a MoE block graphed without its attention keeps its host work")

    # --- kernels -------------------------------------------------------------------------

    def gemm(
        self,
        m: float,
        n: float,
        k: float,
        count: float = 1.0,
        after_norm: bool = False,
        parallel: Literal["column", "row"] | None = None,
        casts_weight: bool = True,
    ) -> float:
        """``count`` GEMMs of an ``m x k`` input by a ``k x n`` weight, as a layer's forward,
        data-gradient and weight-gradient GEMMs each take it (the backward twice this). In FP8,
        Transformer Engine's casts come with them: the input's in the forward and the output
        gradient's (``m x n``) in the backward, each once for both of the backward's GEMMs
        (``Derived.fp8_cast_bytes``; ``after_norm``: the input comes out of the fused norm;
        sequence parallelism gathers a ``column``-parallel GEMM's input and a ``row``-parallel
        GEMM's output gradient), spread as a third over each of the three. Where the weights are
        quantized afresh every microbatch (``Derived.fp8_weight_copies``), the weight's cast
        comes with them too (not with a TP chunk of the GEMM: ``casts_weight``); otherwise it is
        cast once a step and cached."""
        if m <= 0 or n <= 0 or k <= 0 or count <= 0:
            return 0.0
        d = self.d
        if self.fp8 and self.gpu.fp8_flops:
            fraction = fp8_gemm_fraction(
                self.tables, round(m), round(n), round(k), d.fp8_gemm_scaling or "tensorwise"
            )
            cast_bytes = (
                d.fp8_cast_bytes(after_norm, gathered=parallel == "column") * m * k
                + d.fp8_cast_bytes(False, gathered=parallel == "row") * m * n
            )
            if casts_weight and d.fp8_weight_copies == "per_microbatch":
                cast_bytes += d.fp8_cast_bytes(False, gathered=False) * k * n
            cast = cast_bytes / 3 / self.hbm
            return count * (2 * m * n * k / (self.gpu.fp8_flops * fraction * self.fp8_gemm_rate) + cast)
        return self.unquantized_gemm(m, n, k, count)

    def unquantized_gemm(self, m: float, n: float, k: float, count: float = 1.0) -> float:
        """A GEMM in the activations' dtype, also in an FP8 job: the modules Transformer Engine's
        FP8 autocast does not reach, which are not its modules (megatron-core 0.19.2: the
        output layer, ``tensor_parallel.ColumnParallelLinear`` in ``models/gpt/gpt_model.py``
        unless MXFP8's ``fp8_output_proj``; the router's ``router_gating_linear``, a torch
        matmul, in ``transformer/moe/router.py``)."""
        if m <= 0 or n <= 0 or k <= 0 or count <= 0:
            return 0.0
        fraction = gemm_fraction(self.tables, round(m), round(n), round(k)) * self.bf16_gemm_scale
        return count * 2 * m * n * k / (self.matmul_flops * fraction)

    def expert_gemm(self, m: float, n: float, k: float, count: float) -> float:
        """``count`` local experts' GEMMs of ``m`` rows each: the measured expert table (one
        after another, or grouped) where the shape lies in it, else as any GEMM."""
        if not self.fp8 and m > 0:
            sequential = self.d.experts_are_sequential_modules
            fraction = expert_gemm_fraction(self.tables, round(m), round(n), round(k), sequential)
            if fraction is not None:
                return count * 2 * m * n * k / (self.matmul_flops * fraction * self.bf16_gemm_scale)
        return self.gemm(m, n, k, count)

    def attention_gemms(self) -> tuple[float, float, dict[str, tuple[float, float, float]]]:
        """The attention's projections, forward: all of them, MLA's up projections among them,
        and the (M, N, K) of the GEMMs around the TP collectives (the input side consumes the
        all-gathered activations, the output side's result is reduce-scattered)."""
        d, m = self.d, self.d.model
        h, T, heads = m.hidden_size, self.tokens, m.num_attention_heads / d.tp
        shapes: dict[str, tuple[float, float, float]] = {}
        if m.multi_latent_attention:
            qk = m.qk_head_dim + m.qk_pos_emb_head_dim
            up_proj = self.gemm(T, heads * (m.qk_head_dim + m.v_head_dim), m.kv_lora_rank)
            gemm = self.gemm(T, m.kv_lora_rank + m.qk_pos_emb_head_dim, h)
            if m.q_lora_rank is not None:
                up_proj += self.gemm(T, heads * qk, m.q_lora_rank)
                gemm += self.gemm(T, m.q_lora_rank, h)
            else:
                gemm += self.gemm(T, heads * qk, h)
            return gemm + up_proj + self.gemm(T, h, heads * m.v_head_dim), up_proj, shapes
        kv = d.kv_channels
        shapes["attention in"] = (T, (heads + 2 * d.query_groups_per_tp_rank) * kv, h)
        shapes["attention out"] = (T, h, heads * kv)
        qkv = self.gemm(*shapes["attention in"], after_norm=True, parallel="column")
        return qkv + self.gemm(*shapes["attention out"], parallel="row"), 0.0, shapes

    def core_attention(self) -> tuple[float, float]:
        """Forward and backward seconds of the core attention of one layer and microbatch."""
        d, m = self.d, self.d.model
        seq, heads = m.seq_length, m.num_attention_heads / d.tp
        if m.multi_latent_attention:
            qk, v = m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim
        else:
            qk = v = d.kv_channels
        kernel = d.attention_kernel
        if kernel == "unfused":
            return self.unfused_attention(seq / d.cp, heads, qk, v)
        # causal: half the scores, less those a sliding window leaves out (cuDNN's windowed kernel
        # at its measured rate against the causal one's)
        rates = K.WINDOW_ATTENTION_RATE if kernel == "cudnn" else (1.0, 1.0)
        causal = 2 * self.tokens * seq * heads * (qk + v) * 0.5
        flops, flops_bwd = causal * self.window_share(rates[0]), causal * self.window_share(rates[1])
        batch = round(heads * d.micro_batch_size)
        if kernel == "memory_efficient":
            fwd_frac, bwd_frac = memory_efficient_attention_fractions(self.tables, seq, batch)
        elif kernel == "cudnn":
            fwd_frac, bwd_frac = cudnn_attention_fractions(self.tables, seq, batch, round(qk))
        else:
            fwd_frac, bwd_frac = attention_fractions(self.tables, seq, batch)
        fwd_factor = bwd_factor = self.attention_factor
        if d.fp8_attention:
            fwd_factor *= K.FP8_ATTENTION_FWD_FACTOR
            bwd_factor *= K.FP8_ATTENTION_BWD_FACTOR
        fwd = flops / (self.matmul_flops * fwd_frac) * fwd_factor
        bwd = K.ATTENTION_BWD_FLOPS_FACTOR * flops_bwd / (self.matmul_flops * bwd_frac) * bwd_factor
        if self.sink_measured:
            # the offsets' gradient: a fixed time per query row and head
            bwd += K.SINK_ATTENTION_BWD_S * d.micro_batch_size * heads * seq / d.cp
        return fwd, bwd

    @property
    def sink_measured(self) -> bool:
        """Whether this job's softmax offsets are priced from a measurement: learnable ones on
        cuDNN's kernel (``SINK_ATTENTION_BWD_S``)."""
        return self.d.attention_kernel == "cudnn" and self.d.model.softmax_type == "learnable"

    def window_share(self, rate: float = 1.0) -> float:
        """The fused kernels' attention work in an average layer against full causal attention,
        a windowed layer's share taking ``rate`` times its work's time, at most a causal layer's:
        in a windowed layer a query sees itself and at most ``window_size[0]`` keys before it
        (Transformer Engine's and flash attention's sliding window); full layers see every key
        before them. Unfused attention computes the whole score matrix either way and masks it."""
        d = self.d
        pattern, window = d.window_attention_pattern, d.model.window_size
        if not window or window[0] < 0 or not any(pattern):
            return 1.0
        s = d.model.seq_length
        w = min(window[0] + 1, s)
        windowed = (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2)
        share = sum(pattern) / len(pattern)
        # the rate was timed on windows of 128 keys; a windowed layer never takes longer than a
        # causal one (the kernel skips the tiles the band masks, and runs the rest as causal)
        return 1 - share + share * min(windowed * rate, 1.0)

    def unfused_attention(self, s: float, heads: float, qk: float, v: float) -> tuple[float, float]:
        """Megatron-Core's unfused ``DotProductAttention`` (megatron-core 0.19.2,
        ``transformer/dot_product_attention.py``; Transformer Engine's unfused attention has
        the same steps): the full ``s x s`` scores by ``baddbmm``, the masked softmax over them,
        probabilities times values by ``bmm``; backward, two batched GEMMs for each. The GEMMs
        at ``UNFUSED_BMM_FRACTION`` of the peak (their inner dimension is a head); the softmax's
        passes over the scores at HBM speed (:func:`unfused_score_bytes`)."""
        d = self.d
        scores = d.micro_batch_size * heads * s * s
        flops = 2 * scores * (qk + v)
        gemm = flops / (self.matmul_flops * K.UNFUSED_BMM_FRACTION)
        fwd_bytes, bwd_bytes = unfused_score_bytes(
            self.act, d.fused_softmax_kernel, d.softmax_dtype, d.model.attention_dropout > 0
        )
        per_byte = scores / (self.hbm * K.UNFUSED_SOFTMAX_HBM_SHARE)
        return gemm + fwd_bytes * per_byte, 2 * gemm + bwd_bytes * per_byte

    def mlp(self, is_moe: bool) -> tuple[float, float, dict[str, tuple[float, float, float]]]:
        """The dense MLP's or the MoE block's GEMMs (router, routed experts, shared experts),
        forward; the shared experts' part; the dense MLP's (M, N, K) around its TP collectives."""
        d, m = self.d, self.d.model
        h, t, T = m.hidden_size, d.tp, self.tokens
        gate = d.fc1_width_factor
        if not is_moe:
            f = d.ffn_hidden_size / t
            shapes = {"mlp in": (T, gate * f, h), "mlp out": (T, h, f)}
            fc1 = self.gemm(*shapes["mlp in"], after_norm=True, parallel="column")
            return fc1 + self.gemm(*shapes["mlp out"], parallel="row"), 0.0, shapes
        experts, k = m.num_moe_experts or 1, m.moe_router_topk
        f = d.moe_ffn_hidden_size / d.etp
        rows = T * k * d.etp * d.ep / (t * experts)
        local = d.local_experts
        total = self.unquantized_gemm(self.tokens_res, experts, h)
        total += self.expert_gemm(rows, gate * f, h, local) + self.expert_gemm(rows, h, f, local)
        shared = 0.0
        if m.moe_shared_expert_intermediate_size:
            fs = m.moe_shared_expert_intermediate_size / t
            shared = self.gemm(T, gate * fs, h, parallel="column") + self.gemm(T, h, fs, parallel="row")
        return total + shared, shared, {}

    def elementwise(self, is_moe: bool) -> tuple[float, float, float, float]:
        """Forward and backward seconds of the work around a layer's GEMMs (the MoE routing
        apart, :meth:`routing`), and the forward's norms and activation apart (what
        ``layernorm`` and ``moe_act`` recompute replays)."""
        d, m = self.d, self.d.model
        if d.eager_elementwise:
            fwd, bwd, norms, activation = self.eager_elementwise(is_moe)
        else:
            one_pass = BF16 * self.tokens_res * m.hidden_size / self.hbm
            # the fused activation reads the GEMM's output (gate x f wide) and writes f
            gate = d.fc1_width_factor
            activation = BF16 * self.activation_elements(is_moe) * (1 + 1 / gate) / self.hbm
            fwd = K.ELEMENTWISE_PASSES_FWD * one_pass + activation
            bwd = 2 * fwd
            if is_moe and d.experts_weighted_fused_activation:
                routed = BF16 * self.routed_activation_elements() * (1 + 1 / gate) / self.hbm
                bwd += (K.WEIGHTED_ACTIVATION_BWD_RATIO - 2) * routed
                if d.experts_clamp_eagerly:
                    # the eager clamps before it (a moe_act recompute replays them too)
                    clamp = K.EXPERT_CLAMP_FWD_RATIO * routed
                    fwd, activation = fwd + clamp, activation + clamp
                    bwd += K.EXPERT_CLAMP_BWD_RATIO * routed
            norms = 2 * one_pass
        return fwd, bwd, norms, activation

    def activation_elements(self, is_moe: bool) -> float:
        """Elements of the MLP activation's input on this rank for one microbatch: the rank's
        tokens at its share of the FFN width (gate and linear halves for a GLU); on a MoE layer
        the routed experts' (:meth:`routed_activation_elements`) and the shared experts'."""
        d, m = self.d, self.d.model
        gate = d.fc1_width_factor
        if not is_moe:
            return self.tokens * gate * d.ffn_hidden_size / d.tp
        elements = self.routed_activation_elements()
        if m.moe_shared_expert_intermediate_size:
            elements += self.tokens * gate * m.moe_shared_expert_intermediate_size / d.tp
        return elements

    def routed_activation_elements(self) -> float:
        """Every local expert's activation input: the rank's tokens x top-k (gathered over the
        experts' TP) at the expert width."""
        d, m = self.d, self.d.model
        gate = d.fc1_width_factor
        return self.tokens * m.moe_router_topk / d.tp * gate * d.moe_ffn_hidden_size

    def routing(self) -> float:
        """The router's top-k and the token permute and unpermute around the experts, one way;
        their backward moves the same tokens the other way (the same kernels, unmeasured)."""
        m = self.d.model
        return (
            self.eager.route_and_permute.seconds(self.tokens_res * m.moe_router_topk * m.hidden_size)
            * self.hbm_ratio
        )

    def eager_elementwise(self, is_moe: bool) -> tuple[float, float, float, float]:
        """Forward and backward seconds of one layer's work around its GEMMs in PyTorch's eager
        kernels (Megatron-Core's local spec), each from the measured table by its size: the two
        norms (and Qwen3's norms of q and k) and the two residual additions with dropout on the
        layer's own tokens, RoPE on q and k, and the MLP's activation on what the GEMM before
        it wrote; and the forward's two norms and activation apart. Backward: the norms'
        measured backward (RMSNorm's, for LayerNorm too); RoPE and the residual additions move
        what their forward did; the activation twice its forward (two inputs and the gradient
        read, two gradients written): unmeasured."""
        d, m = self.d, self.d.model
        t, h, T = d.tp, m.hidden_size, self.tokens
        curves = self.eager.elementwise
        norm_fwd = curves["rmsnorm fwd" if m.normalization == "RMSNorm" else "layernorm fwd"]
        heads, groups = m.num_attention_heads / t, d.query_groups_per_tp_rank
        if m.multi_latent_attention:
            rotated = T * (heads + 1) * m.qk_pos_emb_head_dim  # the decoupled RoPE part of q and k
        else:
            rotated = T * (heads + groups) * d.kv_channels
        norms = [self.tokens_res * h, self.tokens_res * h]
        if m.qk_layernorm and not m.multi_latent_attention:
            norms += [T * heads * d.kv_channels, T * groups * d.kv_channels]
        two_norms = 2 * norm_fwd.seconds(self.tokens_res * h)
        fwd = sum(norm_fwd.seconds(n) for n in norms)
        bwd = sum(curves["rmsnorm bwd"].seconds(n) for n in norms)
        residual = 2 * curves["bias dropout add"].seconds(self.tokens_res * h)
        rope = curves["rope"].seconds(rotated) if d.rotary_embeddings else 0.0
        act = curves["swiglu fwd"].seconds(self.activation_elements(is_moe))
        fwd += residual + rope + act
        bwd += residual + rope + 2 * act
        r = self.hbm_ratio
        return fwd * r, bwd * r, two_norms * r, act * r

    def norm(self, elements: float) -> tuple[float, float]:
        """One norm over ``elements``: the eager kernels on the local spec, else an HBM pass."""
        if self.d.eager_elementwise:
            curves = self.eager.elementwise
            fwd = curves["rmsnorm fwd" if self.d.model.normalization == "RMSNorm" else "layernorm fwd"]
            return fwd.seconds(elements) * self.hbm_ratio, curves["rmsnorm bwd"].seconds(
                elements
            ) * self.hbm_ratio
        one = 2 * self.act * elements / self.hbm
        return one, 2 * one

    def adapter_compute(self, is_moe: bool) -> tuple[float, float]:
        """Forward and backward seconds of one layer's LoRA adapters' own work
        (:class:`~memtune.perf.kernels.AdapterCost`): each at the full sequence of the rank's
        microbatch (routed experts' adapters at their share of the routed rows, one launch floor
        per local expert). Backward: the output gradient read twice (for B's gradient and through
        B), the input read for A's gradient and its gradient added into the input's (``3 in + 2
        out`` elements a row) at the forward's rate (unmeasured: the table's backward timings
        carry autograd's start-up), and the dropout's backward, the mask applied to the input's
        gradient, what the dropout added to the forward."""
        peft, m = self.d.job.peft, self.d.model
        if peft is None:
            return 0.0, 0.0
        cost, dropout = self.adapter_cost, peft.dropout > 0
        fwd = bwd = 0.0
        for a in adapters_in_layer(self.d, is_moe):
            fan_in, fan_out = a.a_shape[1], a.b_shape[0]
            rows = self.tokens
            if a.kind == "routed_expert":
                rows = self.tokens * m.moe_router_topk / self.d.tp / a.copies
            forward = cost.seconds(rows, fan_in + 2 * fan_out, dropout)
            dropout_bwd = forward - cost.seconds(rows, fan_in + 2 * fan_out)
            fwd += a.copies * forward
            bwd += a.copies * (cost.seconds(rows, 3 * fan_in + 2 * fan_out) + dropout_bwd)
        return fwd * self.hbm_ratio, bwd * self.hbm_ratio

    def adapters_host_share(self, is_moe: bool) -> float:
        """The host's work for one layer's LoRA adapters as a share of the layer's own, every
        adapter (each local expert's its own) alike."""
        if self.d.job.peft is None:
            return 0.0
        return sum(a.copies for a in adapters_in_layer(self.d, is_moe)) * K.LORA_ADAPTER_HOST_SHARE

    # --- one layer --------------------------------------------------------------------------

    def layer(self, is_moe: bool) -> LayerPrice:
        """One layer's kernels and collectives for one microbatch."""
        d = self.d
        attention, up_proj, shapes = self.attention_gemms()
        attn_fwd, attn_bwd = self.core_attention()
        mlp, shared, mlp_shapes = self.mlp(is_moe)
        shapes.update(mlp_shapes)
        gemm = attention + mlp
        wgrad = 0.0 if self.frozen else gemm
        elementwise, elementwise_bwd, norms, activation = self.elementwise(is_moe)
        routing = self.routing() if is_moe else 0.0
        comm = self.layer_collectives(is_moe, shapes)
        cp_fwd, cp_bwd = self.cp_exchange(attn_fwd)
        adapters_fwd, adapters_bwd = self.adapter_compute(is_moe)
        fwd = gemm + attn_fwd + elementwise + routing + comm.ub_fwd + adapters_fwd
        bwd = gemm + wgrad + attn_bwd + elementwise_bwd + routing + comm.ub_bwd + adapters_bwd
        host_fwd = self.floor.layer_fwd_s * (1 + self.adapters_host_share(is_moe))
        block_host_fwd, block_host_bwd = self.moe_block_host(is_moe)
        host_bwd = self.floor.backward_factor * host_fwd + block_host_bwd
        host_fwd += block_host_fwd
        # test_mode's consistency tests (Derived.qk_norm_consistency_checks): two all-gathers and
        # the comparisons, each read on the host, in the forward only
        checks = d.qk_norm_consistency_checks
        if checks:
            host_fwd += 2 * K.COLLECTIVE_LAUNCH_S + checks * K.CONSISTENCY_CHECK_HOST_S
        sinkhorn = is_moe and d.sinkhorn_routing
        if sinkhorn:
            # the router's Sinkhorn loop, under no_grad: the forward only
            host_fwd += K.SINKHORN_ROUTER_HOST_S
        if d.userbuffer_overlap and self.exchanges:
            # each extra chunk of an overlapped GEMM is one more GEMM call the host issues
            chunks_fwd, chunks_bwd = self.userbuffer_chunks(is_moe, shapes)
            host_fwd += chunks_fwd * K.UB_CHUNK_HOST_S
            host_bwd += chunks_bwd * K.UB_CHUNK_HOST_S
        if replays := d.layer_graph_replays(is_moe):
            # CUDA graphs cover the whole layer: the host only replays them (a full-iteration
            # graph leaves no host work per pass at all, perf/step.py)
            host_fwd, host_bwd = replays * K.GRAPH_REPLAY_HOST_FWD_S, replays * K.GRAPH_REPLAY_HOST_BWD_S
        elif parts := d.partly_graphed(is_moe):
            graphed_fwd, graphed_bwd = self.graphed_host(parts)
            # one replay a pass for the graphed parts (Transformer Engine captures a graphed MoE
            # router with the attention, as one callable); the shares, measured on a dense
            # layer, can exceed the little host work a MoE block without exchanges is priced at
            host_fwd = max(host_fwd - graphed_fwd, 0.0) + K.GRAPH_REPLAY_HOST_FWD_S
            host_bwd = max(host_bwd - graphed_bwd, 0.0) + K.GRAPH_REPLAY_HOST_BWD_S
        return LayerPrice(
            fwd=fwd * self.kernel_factor + cp_fwd,
            bwd=bwd * self.kernel_factor + cp_bwd,
            host_fwd=host_fwd,
            host_bwd=host_bwd,
            wgrad=wgrad,
            attn_fwd=attn_fwd,
            mlp_fwd=mlp + activation + routing,
            up_proj_fwd=up_proj,
            shared_fwd=shared,
            norms_fwd=norms,
            activation_fwd=activation,
            tp_fwd=comm.tp_fwd,
            tp_bwd=comm.tp_bwd,
            tp_bwd_blocking=comm.tp_bwd_blocking,
            mlp_tp_fwd=comm.mlp_tp_fwd,
            ep_fwd=comm.ep_fwd,
            syncs=(is_moe and d.moe_forward_syncs_host) or sinkhorn or checks > 0,
        )

    def graphed_host(self, parts: tuple[str, ...]) -> tuple[float, float]:
        """The host work, forward and backward, that the graphed ``parts`` of a layer graphed in
        part (``Derived.partly_graphed``) no longer do, each a measured share of the loop's layer
        floor (its backward ``backward_factor`` times the floor): the attention half's
        (``GRAPH_ATTENTION_HOST_SHARE``), a dense MLP's the rest, a MoE router part's by token
        dispatcher (``GRAPH_ROUTER_HOST_SHARE``; the flex dispatcher's, not measurable on one
        GPU, is the all-to-all's)."""
        attention = K.GRAPH_ATTENTION_HOST_SHARE
        dispatcher = self.d.model.moe_token_dispatcher_type
        saved = {
            "attention": attention,
            "mlp": (1 - attention[0], 1 - attention[1]),
            "router": K.GRAPH_ROUTER_HOST_SHARE["alltoall" if dispatcher == "flex" else dispatcher],
        }
        floor = self.floor.layer_fwd_s
        fwd = sum(saved[part][0] for part in parts) * floor
        bwd = sum(saved[part][1] for part in parts) * self.floor.backward_factor * floor
        return fwd, bwd

    def moe_block_host(self, is_moe: bool) -> tuple[float, float]:
        """The host work a MoE block adds to a dense layer's, forward and backward: its router,
        dispatcher bookkeeping and permutes (``moe_layer_host_s``), what its exchanges add on the
        host (``dispatcher_host_fwd_s``, the backward ``backward_factor`` times it) and, where its
        local experts are modules run one after another (``SequentialMLP``), each expert's
        Python and launches."""
        if not is_moe:
            return 0.0, 0.0
        d = self.d
        fwd, bwd = moe_layer_host_s(d)
        if self.exchanges:
            exchanged = dispatcher_host_fwd_s(d)
            fwd += exchanged
            bwd += self.floor.backward_factor * exchanged
        if d.experts_are_sequential_modules:
            fwd += d.local_experts * K.SEQUENTIAL_EXPERT_FWD_S
            bwd += d.local_experts * K.SEQUENTIAL_EXPERT_BWD_S
        return fwd, bwd

    def layer_collectives(self, is_moe: bool, shapes: dict[str, tuple[float, float, float]]) -> _Collectives:
        """One layer's TP collectives (and Transformer Engine's userbuffer overlap of them), the
        LoRA adapters' own, and EP's dispatch and combine, each with its launch."""
        d = self.d
        h, t = d.model.hidden_size, d.tp
        # dispatch and combine by the job's dispatcher (memtune/perf/moe.py)
        ep_fwd = 2 * dispatch_s(d, self.tokens_res, self.net) if is_moe else 0.0
        if t == 1:
            return _Collectives(0.0, 0.0, 0.0, 0.0, ep_fwd, 0.0, 0.0)
        group = Group(t)
        full = BF16 * self.tokens * h
        if d.sequence_parallel:
            gathered = (1 if d.tp_gathers_fp8 else BF16) * self.tokens * h
            gather = collective(Op.ALL_GATHER, gathered, group, self.net, self.gpu.name).seconds
            scatter = collective(Op.REDUCE_SCATTER, full, group, self.net, self.gpu.name).seconds
            ops = 2 * (gather + scatter)
        else:
            ops = 2 * collective(Op.ALL_REDUCE, full, group, self.net, self.gpu.name).seconds
        # the backward has the same collectives, in reverse; each side's (one all-reduce, or a
        # gather and a reduce-scatter) also costs its launches, except inside a CUDA graph
        per_side = 2 if d.sequence_parallel else 1
        attn_launches = 0.0 if d.graphed("attention", is_moe) else per_side * K.COLLECTIVE_LAUNCH_S
        mlp_launches = 0.0 if d.graphed("mlp", is_moe) else per_side * K.COLLECTIVE_LAUNCH_S
        tp_fwd = tp_bwd = ops + attn_launches + mlp_launches
        mlp_tp_fwd = ops / 2 + mlp_launches
        ub_fwd = ub_bwd = 0.0
        if d.userbuffer_overlap:
            sides = self.userbuffer_overlap(shapes, self.tokens * h)
            # the userbuffer overlap launches two exchanges a side
            attn_launches, mlp_launches = 2 * attn_launches / per_side, 2 * mlp_launches / per_side
            ub_fwd = sum(side.extra_fwd for side in sides.values())
            ub_bwd = sum(side.extra_bwd for side in sides.values())
            tp_fwd = sum(side.exposed_fwd for side in sides.values()) + attn_launches + mlp_launches
            tp_bwd = sum(side.exposed_bwd for side in sides.values()) + attn_launches + mlp_launches
            mlp_tp_fwd = sides["mlp"].extra_fwd + sides["mlp"].exposed_fwd + mlp_launches
        amax_attention, amax_mlp = self.amax_reductions(is_moe, shapes)
        tp_fwd, tp_bwd = tp_fwd + amax_attention + amax_mlp, tp_bwd + amax_attention + amax_mlp
        mlp_tp_fwd += amax_mlp
        lora_fwd, blocking, lora_mlp_fwd = self.adapter_collectives(is_moe, group)
        return _Collectives(
            tp_fwd + lora_fwd, tp_bwd, blocking, mlp_tp_fwd + lora_mlp_fwd, ep_fwd, ub_fwd, ub_bwd
        )

    def userbuffer_chunks(
        self, is_moe: bool, shapes: dict[str, tuple[float, float, float]]
    ) -> tuple[int, int]:
        """The GEMM calls Transformer Engine's userbuffer overlap adds to one layer's forward and
        backward beyond one a GEMM (``UserbufferGemm.gemm_calls``). Counted on the sides whose
        GEMMs the overlap runs (``shapes``) and that no CUDA graph captures."""
        d = self.d

        def extra(gemm: str) -> int:
            return d.userbuffer_gemm(gemm).gemm_calls - 1

        forward = backward = 0
        for side, (gemm_in, gemm_out) in {"attention": ("qkv", "proj"), "mlp": ("fc1", "fc2")}.items():
            if f"{side} in" in shapes and not d.graphed(side, is_moe):
                forward += extra(f"{gemm_in}_fprop") + extra(f"{gemm_out}_fprop")
                backward += extra(f"{gemm_out}_dgrad") + extra(f"{gemm_in}_dgrad")
        return forward, backward

    def amax_reductions(
        self, is_moe: bool, shapes: dict[str, tuple[float, float, float]]
    ) -> tuple[float, float]:
        """Seconds of FP8 current scaling's amax all-reduces over TP in one pass of a layer, its
        attention side's and its MLP side's (``Derived.fp8_amax_reduced_over_tp``): one a side
        each way, the gathered input's in the forward and the output gradient's in the backward,
        four bytes between the amax kernel and the cast that waits for it, at NCCL's latency.
        Transformer Engine's quantizer issues them from C++, with none of the Python around the
        activations' collectives that ``COLLECTIVE_LAUNCH_S`` stands for: priced at that constant
        too, its rule (``benchmarks/fit_collective_launch.py``) moved it to 80 us at a worse
        optimum and the tune sets lost three top-1 hits (docs/plan.md, "FP8 current scaling's
        amax reductions"). A side counts where its GEMMs are Transformer Engine's plain column-
        and row-parallel pair (``shapes``) or a MoE layer's shared experts; MLA's projections
        and the routed experts' grouped GEMMs are left out."""
        d = self.d
        if not d.fp8_amax_reduced_over_tp:
            return 0.0, 0.0
        amax = collective(Op.ALL_REDUCE, 4, Group(d.tp), self.net, self.gpu.name).seconds  # fp32
        shared = is_moe and bool(d.model.moe_shared_expert_intermediate_size)
        return amax * ("attention in" in shapes), amax * ("mlp in" in shapes or shared)

    def attention_widths(self) -> tuple[float, float, float, float]:
        """Elements per token of the query, key, value and output of the core attention on one
        TP rank (multi-latent attention's keys and values up-projected per head, Megatron-Core
        ``multi_latent_attention.py``)."""
        d, m = self.d, self.d.model
        heads = m.num_attention_heads / d.tp
        if m.multi_latent_attention:
            qk = m.qk_head_dim + m.qk_pos_emb_head_dim
            return heads * qk, heads * qk, heads * m.v_head_dim, heads * m.v_head_dim
        kv = d.query_groups_per_tp_rank * d.kv_channels
        return heads * d.kv_channels, kv, kv, heads * d.kv_channels

    def cp_exchange(self, attn_fwd: float) -> tuple[float, float]:
        """Forward and backward seconds of one layer's CP exchanges beyond what its attention
        hides, by ``cp_comm_type`` (Transformer Engine d0067d0 ``context_parallel.py``):

        - a ring (``p2p``; across the second hierarchical group of ``a2a+p2p``): ring - 1 steps
          of the rank's K/V chunk, each behind one block's attention; the backward passes K/V
          and their gradients, twice the bytes;
        - all-to-all (``a2a``; inside the first group of ``a2a+p2p``): Q, K and V each by one
          ``all_to_all_single`` before the attention and the output after, which the attention
          waits for; the backward the output's gradient, then Q's, K's and V's: the same four;
        - ``all_gather``: K and V gathered whole before the attention, which waits; the backward
          gathers them again and reduce-scatters their gradients.

        Each exchange also costs its launch, except inside a CUDA graph."""
        d = self.d
        if d.cp == 1:
            return 0.0, 0.0
        widths = self.attention_widths()
        k, v = widths[1], widths[2]
        launch = 0.0 if d.graphed("attention", is_moe=False) else K.COLLECTIVE_LAUNCH_S
        exchanged = 0.0
        if (a2a := d.cp_all_to_all_size) > 1:
            heads = Group(a2a, stride=d.tp)
            exchanged = sum(all_to_all(BF16 * self.tokens * w, heads, self.net) + launch for w in widths)
        if d.model.cp_comm_type == "all_gather":
            group = Group(d.cp, stride=d.tp)

            def whole(op: Op) -> float:
                return sum(
                    collective(op, BF16 * self.tokens * d.cp * w, group, self.net, self.gpu.name).seconds
                    + launch
                    for w in (k, v)
                )

            gather = whole(Op.ALL_GATHER)
            return gather, gather + whole(Op.REDUCE_SCATTER)
        ring = 0.0
        if (size := d.cp_ring_size) > 1:
            crosses = d.tp * d.cp > self.net.gpus_per_nvlink_domain
            step = send_recv(BF16 * self.tokens * (k + v), crosses, self.net)
            ring = max(0.0, (size - 1) * step - attn_fwd) + (size - 1) * launch
        return exchanged + ring, exchanged + 2 * ring

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
        sizes = {True: gathered_input_bytes(d), False: BF16 * self.tokens * peft.dim}
        ops = {"all_gather": Op.ALL_GATHER, "reduce_scatter": Op.REDUCE_SCATTER, "all_reduce": Op.ALL_REDUCE}
        fwd = bwd = mlp_fwd = 0.0
        for adapter in adapters_in_layer(d, is_moe):
            for c in adapter_collectives(d, adapter):
                if c.op == "all_to_all":
                    # each rank sends (t-1)/t of its [s/CP, b, h/t]: the bytes of an all-gather
                    # whose output is that slice
                    op, nbytes = Op.ALL_GATHER, sizes[True] / group.size
                else:
                    op, nbytes = ops[c.op], sizes[c.activation]
                seconds = collective(op, nbytes, group, self.net, self.gpu.name).seconds
                seconds = adapter.copies * (seconds + K.COLLECTIVE_LAUNCH_S)
                if c.backward:
                    bwd += seconds
                else:
                    fwd += seconds
                    if adapter.target in ("linear_fc1", "linear_fc2"):
                        mlp_fwd += seconds
        return fwd, bwd, mlp_fwd

    def userbuffer_overlap(
        self, shapes: dict[str, tuple[float, float, float]], elements: float
    ) -> dict[str, _Overlapped]:
        """Transformer Engine's userbuffer GEMM+collective overlap of one layer's attention and
        MLP sides, each GEMM as ``Derived.userbuffer_gemm`` configures it (TransformerEngine
        d0067d0 ``module/base.py`` ``initialize_ub``; ``cpp_extensions`` ``CommOverlap`` and
        ``CommOverlapP2P``): the input-side all-gathers (qkv and fc1 forward, proj and fc2 data
        gradients) by ring exchange, the GEMM split in TP chunks each waiting for its slice; the
        output side's forward reduce-scatter (proj, fc2) pipelined over its chunks, the last
        chunk's exposed, or by ring exchange, each chunk's partial sum sent on while the next
        is computed, the last send and the sum of the received chunks exposed; the input
        side's data-gradient GEMM beside its input's gather for the weight gradient and that
        GEMM beside the data gradient's reduce-scatter, in bulk. An overlapped GEMM runs
        without the SMs its communication takes where it leaves them (``margin_sms``), and each
        chunk boundary costs the GPU ``UB_CHUNK_DEVICE_S``. A side
        whose GEMMs are not the plain pair (MLA's projections, MoE experts) keeps its
        collectives exposed."""
        d, t = self.d, self.d.tp
        gather = collective(
            Op.ALL_GATHER, (1 if d.tp_gathers_fp8 else BF16) * elements, Group(t), self.net, self.gpu.name
        ).seconds
        scatter = collective(Op.REDUCE_SCATTER, BF16 * elements, Group(t), self.net, self.gpu.name).seconds

        def slowed(gemm: str) -> float:
            return 1 / (1 - d.userbuffer_gemm(gemm).margin_sms / K.UB_REFERENCE_SMS)

        def ring_gather(gemm: str, m: float, n: float, k: float) -> tuple[float, float]:
            chunk = self.gemm(m / t, n, k, casts_weight=False) * slowed(gemm)
            whole = self.gemm(m, n, k, casts_weight=False)
            boundaries = (t - 1) * K.UB_CHUNK_DEVICE_S
            return t * chunk - whole + boundaries, (t - 1) * max(0.0, gather / (t - 1) - chunk)

        def reduce_scatter(gemm: str, m: float, n: float, k: float) -> tuple[float, float]:
            overlap = d.userbuffer_gemm(gemm)
            splits = overlap.splits
            chunk = self.gemm(m / splits, n, k, casts_weight=False) * slowed(gemm)
            extra = (
                splits * chunk - self.gemm(m, n, k, casts_weight=False) + (splits - 1) * K.UB_CHUNK_DEVICE_S
            )
            if overlap.method == "pipeline":
                step = scatter / splits
                return extra, step + (splits - 1) * max(0.0, step - chunk)
            # ring exchange: t - 1 sends of a partial chunk, the last one exposed, then the
            # received chunks summed into the output (t read, one written)
            step = scatter / (t - 1)
            summed = (t + 1) * BF16 * (m / t) * n / self.hbm
            return extra, step + (t - 2) * max(0.0, step - chunk) + summed

        def bulk(side: str, m: float, n: float, k: float) -> tuple[float, float]:
            dgrad = self.gemm(m, n, k, casts_weight=False)
            wgrad = 0.0 if self.frozen else dgrad
            dgrad_slowed, wgrad_slowed = slowed(f"{side}_dgrad"), slowed(f"{side}_wgrad")
            exposed = max(0.0, gather - dgrad * dgrad_slowed) + max(0.0, scatter - wgrad * wgrad_slowed)
            return dgrad * (dgrad_slowed - 1) + wgrad * (wgrad_slowed - 1), exposed

        sides = {}
        for side, (gemm_in, gemm_out) in {"attention": ("qkv", "proj"), "mlp": ("fc1", "fc2")}.items():
            if f"{side} in" not in shapes:
                sides[side] = _Overlapped(0.0, gather + scatter, 0.0, gather + scatter)
                continue
            m_in, n_in, k_in = shapes[f"{side} in"]
            m_out, n_out, k_out = shapes[f"{side} out"]
            (gather_extra, gather_exposed), (scatter_extra, scatter_exposed) = (
                ring_gather(f"{gemm_in}_fprop", m_in, n_in, k_in),
                reduce_scatter(f"{gemm_out}_fprop", m_out, n_out, k_out),
            )
            # the output side's data gradient (M, K, N) gathers by ring; the input side's in bulk
            (dgrad_extra, dgrad_exposed), (bulk_extra, bulk_exposed) = (
                ring_gather(f"{gemm_out}_dgrad", m_out, k_out, n_out),
                bulk(gemm_in, m_in, k_in, n_in),
            )
            sides[side] = _Overlapped(
                gather_extra + scatter_extra,
                gather_exposed + scatter_exposed,
                dgrad_extra + bulk_extra,
                dgrad_exposed + bulk_exposed,
            )
        return sides

    def replayed(self, d: Derived, lt: LayerPrice, is_moe: bool) -> tuple[float, float, bool]:
        """What a selective recompute replays in one layer's backward (megatron-core 0.19.2
        ``transformer/transformer_layer.py``: ``core_attn`` and ``mlp``/``moe``/``shared_experts``
        under ``tensor_parallel.checkpoint``, which runs the module's forward again, Python and
        launches included; ``layernorm`` and ``moe_act`` under ``CheckpointWithoutOutput``;
        ``mla_up_proj``): its device seconds, its host seconds (the replayed modules' share of
        the layer's launch work, ``RECOMPUTE_HOST_SHARE``, and a MoE block's dispatcher and
        sequential experts), and whether the replay makes the host wait (a MoE block's dispatch
        runs again). ``d`` is the job's: the recompute modules are its own."""
        mods = d.recompute_modules
        device = host = 0.0
        syncs = False
        if "core_attn" in mods:
            device += lt.attn_fwd
            host += K.RECOMPUTE_HOST_SHARE["core_attn"] * self.floor.layer_fwd_s
        if ("mlp" in mods and not is_moe) or ("moe" in mods and is_moe):
            device += lt.mlp_fwd
            host += K.RECOMPUTE_HOST_SHARE["mlp"] * self.floor.layer_fwd_s
            if is_moe:
                host += lt.host_fwd - self.floor.layer_fwd_s  # the dispatcher and experts, again
                syncs = lt.syncs
        elif "shared_experts" in mods and is_moe:
            device += lt.shared_fwd
        if "layernorm" in mods:
            device += lt.norms_fwd
            host += K.RECOMPUTE_HOST_SHARE["layernorm"] * self.floor.layer_fwd_s
        if "moe_act" in mods and is_moe:
            device += lt.activation_fwd
        if "mla_up_proj" in mods:
            device += lt.up_proj_fwd
        return device * self.kernel_factor, host, syncs

    # --- the rest of a chunk ---------------------------------------------------------------

    def embedding(self) -> tuple[float, float]:
        """The word embedding's lookup, forward; backward, PyTorch's dense embedding gradient:
        a zeroed ``[vocab / TP, h]`` gradient the rows are added into (the add into the main
        gradient is DDP's, :meth:`grad_accumulation`)."""
        h = self.d.model.hidden_size
        fwd = 2 * self.act * self.tokens * h / self.hbm
        rows = self.d.padded_vocab_size / self.d.tp
        bwd = 0.0 if self.frozen else (self.act * rows * h + 2 * self.act * self.tokens * h) / self.hbm
        return fwd, bwd

    def output_and_loss(self) -> tuple[float, float, float]:
        """The final norm, the output layer and the loss of one microbatch: forward, backward,
        and the output layer's weight gradient (part of the backward)."""
        d = self.d
        h, vocab = d.model.hidden_size, d.padded_vocab_size / d.tp
        norm_fwd, norm_bwd = self.norm(self.tokens_res * h)
        out = self.unquantized_gemm(self.tokens, vocab, h)
        wgrad = 0.0 if self.frozen else out
        if d.cross_entropy == "unfused":
            # Megatron's VocabParallelCrossEntropy, forward and backward from the measured table,
            # split by the bytes each moves per logit (K.CROSS_ENTROPY_FORWARD_SHARE)
            both = self.eager.cross_entropy.seconds(self.tokens * vocab) * self.hbm_ratio
            loss_fwd, loss_bwd = (
                both * K.CROSS_ENTROPY_FORWARD_SHARE,
                both * (1 - K.CROSS_ENTROPY_FORWARD_SHARE),
            )
        else:
            # a fused kernel: about three fp32 passes over the logits each way (unmeasured)
            loss_fwd = loss_bwd = 3 * 4 * self.tokens * vocab / self.hbm
        f = self.kernel_factor
        return (norm_fwd + out + loss_fwd) * f, (norm_bwd + out + wgrad + loss_bwd) * f, wgrad * f

    def mtp_layer(self, lt: LayerPrice) -> tuple[Piece, Piece, float]:
        """One multi-token-prediction layer (megatron-core 0.19.2
        ``transformer/multi_token_prediction.py``): the embedding of the shifted tokens, its and
        the hidden states' norms, their concatenation projected back to the hidden size
        (``eh_proj``, column-parallel, its output gathered over TP), a transformer layer
        (``lt``, the decoder's last layer's kind), the final norm, the output layer and the loss
        on the shifted labels, and the acceptance count's argmax over the logits. Forward and
        backward pieces, and the TP collectives of both (exposed)."""
        d = self.d
        h, vocab = d.model.hidden_size, d.padded_vocab_size / d.tp
        emb_fwd, emb_bwd = self.embedding()
        norm_fwd, norm_bwd = self.norm(self.tokens_res * h)
        proj = self.gemm(self.tokens, h / d.tp, 2 * h)
        proj_wgrad = 0.0 if self.frozen else proj
        concat = 2 * self.act * self.tokens_res * 2 * h / self.hbm
        out_fwd, out_bwd, _ = self.output_and_loss()
        argmax = self.act * self.tokens * vocab / self.hbm
        f = self.kernel_factor
        fwd = (emb_fwd + 2 * norm_fwd + concat + proj + argmax) * f + lt.fwd + out_fwd
        bwd = (emb_bwd + 2 * norm_bwd + concat + proj + proj_wgrad) * f + lt.bwd + out_bwd
        comm = 0.0
        if d.tp > 1:
            # the projection's input gathered (SP) and its output gathered over TP; backward,
            # the input gradient reduce-scattered (all-reduced without SP) and the SP scatter's
            # gradient gathered
            group = Group(d.tp)
            wide, narrow = BF16 * self.tokens * 2 * h, BF16 * self.tokens * h
            gathered = collective(Op.ALL_GATHER, narrow, group, self.net, self.gpu.name).seconds
            if d.sequence_parallel:
                comm += collective(Op.ALL_GATHER, wide, group, self.net, self.gpu.name).seconds
                comm += collective(Op.REDUCE_SCATTER, wide, group, self.net, self.gpu.name).seconds
                comm += 2 * gathered
            else:
                comm += collective(Op.ALL_REDUCE, wide, group, self.net, self.gpu.name).seconds + gathered
            comm += 4 * K.COLLECTIVE_LAUNCH_S
        extra = K.MTP_EXTRA_HOST_LAYERS * self.floor.layer_fwd_s
        forward = Piece(lt.host_fwd + extra, fwd, lt.syncs)
        backward = Piece(lt.host_bwd + self.floor.backward_factor * extra, bwd)
        return forward, backward, comm + lt.tp_fwd + lt.tp_bwd

    def grad_accumulation(self, d: Derived, params: float) -> float:
        """DDP's backward hook adding ``params`` parameters' gradients into their main gradient,
        once per microbatch: the gradient read in the parameters' dtype, the main gradient read
        and written in its own (megatron-core 0.19.2 ``_make_backward_post_hook``). ``d`` is the
        job's: its gradient buffer's dtype follows its sharding."""
        per_param = DTYPE_BYTES[d.param_dtype] + 2 * DTYPE_BYTES[d.grad_dtype]
        return params * per_param / (self.hbm * K.GRAD_ACCUMULATION_HBM_SHARE)


def unfused_score_bytes(act: int, fused_kernel: bool, softmax_dtype: str, dropout: bool) -> tuple[int, int]:
    """Bytes the unfused attention moves per score element (batch x heads x s x s) around its
    GEMMs, forward and backward (megatron-core 0.19.2 ``fusions/fused_softmax.py``,
    ``FusedScaleMaskSoftmax``, and ``transformer/dot_product_attention.py``), with scores in the
    activation dtype (``act`` bytes):

    - the fused kernel (``scaled_upper_triang_masked_softmax_cuda``): the scores written by
      ``baddbmm``, read and the probabilities written by the kernel, read by the value GEMM;
      backward, the probabilities' gradient written and the probabilities read (value
      gradient), the kernel's two reads and one write, and the scores' gradient read by the two
      GEMMs: 4 and 7 elements of ``act`` bytes;
    - the torch path: the scores written, cast to fp32 where the softmax runs in fp32 (read,
      write 4), the causal mask applied in place (``masked_fill_``: read, the mask's byte,
      write), the softmax (read, write), cast back (read, write), read by the value GEMM;
      backward, each step's gradient: the casts, the softmax's (gradient and output read,
      one written), the mask's and the GEMMs' reads;
    - attention dropout on the probabilities (``torch.nn.Dropout``) reads them and writes them
      and its mask, and its backward reads the gradient and mask and writes one.
    """
    drop_fwd = drop_bwd = 2 * act + 1 if dropout else 0
    if fused_kernel:
        return 4 * act + drop_fwd, 7 * act + drop_bwd
    soft = 4 if softmax_dtype == "fp32" else act
    cast = act + soft if soft != act else 0  # one cast: read one dtype, write the other
    fwd = act + cast + (2 * soft + 1) + 2 * soft + cast + drop_fwd + act
    bwd = act + act + drop_bwd + cast + 3 * soft + (2 * soft + 1) + cast + 2 * act
    return fwd, bwd


@dataclass(frozen=True)
class _Overlapped:
    """One side of a layer under userbuffer overlap, against its plain GEMMs and collectives."""

    extra_fwd: float  # longer GEMMs: split in chunks, or on fewer SMs
    exposed_fwd: float  # communication the GEMMs do not hide
    extra_bwd: float
    exposed_bwd: float
