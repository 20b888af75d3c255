"""The step of a job exactly as configured: every chunk's kernels priced from measured tables,
its collectives on the declared fabric, and the iteration simulated in Megatron-Core's order.

``predict_step(derived)`` reads only :class:`~memtune.config.derived.Derived` (and the job's
own settings through it): nothing is switched on that the job did not ask for. Per chunk of
each pipeline stage and per microbatch it prices

- a layer's kernels and collectives, and the other pieces one parallel shape prices
  (``memtune/perf/layer.py``: measured kernel tables, the core attention by the kernel that
  runs it, NCCL-tuned collectives on the declared fabric);
- a chunk's passes (:func:`_chunk_passes`): its layers, the embedding and its gradient, the
  final norm, output layer and loss, multi-token-prediction layers, recompute's replays (their
  kernels and their host work), the host copies of activation offload it does not hide
  (``memtune/perf/offload.py``), and the host's work per layer, pass and microbatch (Python and
  kernel launches, ``memtune/perf/constants.py``), with the points where the host waits for the
  GPU (MoE dispatch);
- a chunk's data-parallel work (:meth:`StepPricer.with_data_parallel`): DDP's per-microbatch
  gradient add into the main gradient, and the collectives of its sharding strategy
  (``memtune/perf/sharding.py``);
- a stage's work once per step (:meth:`StepPricer.step_parts`): zeroing the gradient buffers,
  DDP's gradient scaling, and the optimizer step (Adam from its measured kernel, Megatron's work
  around it per parameter and per tensor, the offloaded share over the host link);

then ``memtune/perf/simulate.py`` places the passes (the host running ahead of the GPU until it
waits for it; communication hidden only where the job's settings make Megatron hide it) and the
step, bubble and per-stage idle come out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from memtune.catalog.gpus import GPU, get_gpu
from memtune.config.derived import DTYPE_BYTES, Chunk, Derived
from memtune.config.knobs import KnobSubset
from memtune.errors import InputError
from memtune.limits import MAX_ESTIMATE_SIMULATED_OPERATIONS, MAX_SIMULATED_OPERATIONS
from memtune.perf import constants as K
from memtune.perf.collectives import Group, Op, collective, pipeline_crosses_domain, send_recv
from memtune.perf.layer import TABLES_MACHINE, LayerPrice, Machine, Piece, ShapePricer
from memtune.perf.offload import activation_offload_s, optimizer_offload_s
from memtune.perf.sharding import chunk_work, exposed
from memtune.perf.simulate import ChunkWork, Overlap, Simulated, StageWork, simulate

BF16 = 2
Value = TypeVar("Value")
# What every step prediction rests on, in a line each (shown by `memtune fix`).
STEP_MODEL_NOTES = (
    "kernels from measured GEMM, expert, attention and eager-kernel tables (H100, H200), interpolated",
    "collectives as NCCL's ring/tree alpha-beta costs on the declared cluster.network fabric",
    "the iteration simulated in Megatron-Core's order; communication hidden only where the job's settings do",
    "host work per layer, pass, microbatch and step fitted to tune runs (H200); the host runs ahead "
    "of the GPU until it waits for it",
    "balanced MoE routing; model TFLOP/s counts 3x forward FLOPs without recompute (Megatron's convention)",
)


@dataclass(frozen=True)
class StepParts:
    """A stage's work once per step outside its passes, in seconds."""

    zero_grad_s: float  # zero_grad_buffer: the gradient buffers set to zero before the passes
    finalize_s: float  # finalize_model_grads: DDP scales the gradients by 1/DP before reducing
    optimizer_s: float  # optimizer.step(): gradient norm and clipping, Adam, the copy back

    @property
    def total_s(self) -> float:
        return self.zero_grad_s + self.finalize_s + self.optimizer_s


@dataclass(frozen=True)
class StepPrediction:
    step_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    simulated: Simulated
    unmeasured: tuple[str, ...]  # what the prediction took from assumptions instead of measurements
    stage_step_parts: tuple[StepParts, ...] = ()  # per stage: its share of Simulated.stage_optimizer_s


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


def model_flops_per_token(d: Derived) -> float:
    """Forward FLOPs per token of the whole model (active experts only), at TP = CP = 1: what
    model TFLOP/s counts (Megatron's convention: 3x this per trained token, recompute not counted)."""
    m = d.model
    h, seq = m.hidden_size, m.seq_length
    gate = d.fc1_width_factor
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
# in order: a layer's kernels and collectives, the embedding, the output layer and the loss, an
# MTP layer (``ShapePricer``; under LoRA the adapters' collectives also depend on recompute,
# re-gather and activation offload, ``peft/model.py`` regather_blocker); a chunk's forward and
# backward pass; what one TP rank of a chunk holds and its tensors (``estimate/params.py``); a
# chunk's work with its per-microbatch gradient add and data-parallel collectives (the gradient
# buffer's dtype follows the sharding); the layers of every chunk of every stage
# (``Derived.chunks``, and the layers activation offload picks). Where the host waits for the
# pipeline's exchanges (PP, VPP) is the schedule's (``overlap_of``). A price that comes to read
# another knob must add it here.
SHAPE_KNOBS = KnobSubset("tp", "cp", "mbs", "sp", "ep", "etp")
ADAPTER_KNOBS = KnobSubset("recompute", "regather", "act_offload")
PASS_KNOBS = SHAPE_KNOBS | KnobSubset("vpp", "recompute", "act_offload", "regather")
PARAMS_KNOBS = KnobSubset("tp", "ep", "etp")
CHUNK_WORK_KNOBS = PASS_KNOBS | KnobSubset("pp", "sharding", "fsdp_strategy")
LAYOUT_KNOBS = Derived.CHUNK_KNOBS | KnobSubset("pp", "act_offload")
SEND_KNOBS = KnobSubset("tp", "cp", "mbs", "sp", "pp")  # the boundary tensor and who is next

# What a chunk's passes and parameters depend on besides the knobs: its layers' kinds, whether
# it holds the embedding and the output layer, its MTP layers, and its first layer where
# layer-wise activation offload picks layers by index.
ChunkSignature = tuple[tuple[bool, ...], bool, bool, int, int]


@dataclass(frozen=True)
class _Shapes:
    """What one tensor/context/expert-parallel shape prices: each layer kind, the embedding, the
    final norm with the output layer and the loss, and an MTP layer."""

    pricer: ShapePricer
    kinds: dict[bool, LayerPrice]  # by is_moe
    embedding: tuple[float, float]  # forward, backward
    output: tuple[float, float, float]  # forward, backward, the output layer's weight gradient
    mtp: tuple[Piece, Piece, float] | None  # forward, backward, TP collectives; None without MTP


@dataclass(frozen=True)
class _ChunkParams:
    """What one TP rank of a chunk holds (``estimate/params.py``)."""

    dense: float  # dense and replicated parameters
    expert: float
    hooked: float  # whose gradient DDP's backward hook adds into the main gradient (_hooked_params)
    # the tensors' sizes in each gradient buffer (dense, expert), in reverse registration order
    sizes: tuple[tuple[float, ...], tuple[float, ...]]


@dataclass(frozen=True)
class _Layout:
    """The chunks of a pipeline layout: each distinct stage's chunks with their signatures, and
    which distinct stage each pipeline rank is."""

    distinct: tuple[tuple[tuple[Chunk, ChunkSignature], ...], ...]
    rank_of: tuple[int, ...]  # per pipeline rank, its index in ``distinct``


@dataclass(frozen=True)
class Priced:
    """A layout's stages as the simulation takes them."""

    stages: list[StageWork]  # ranks that build the same chunks share one tuple of ChunkWork
    num_microbatches: int
    group: int  # microbatch_group_size_per_vp_stage
    overlap: Overlap
    unmeasured: tuple[str, ...]
    step_parts: tuple[StepParts, ...] = ()  # per rank; empty without the data-parallel work


class StepPricer:
    """Prices the stages of layouts of one job on one GPU in one training loop: per layer its
    kernels and collectives (``ShapePricer``), per chunk its passes and data-parallel work, per
    stage its work once a step. With ``reuse`` (the planner, which prices many layouts of one
    job) each piece is kept under the knobs it depends on (the ``*_KNOBS`` above) and every
    collective under its arguments; the prices are the same. With ``stages_alone`` each stage is
    one rank run alone under PyTorch's fake process group: no pass waits for another stage, no
    collective or pipeline exchange takes time, and the MoE dispatcher's host does not wait on
    its exchanges. ``machine``: the speed of the machine's kernels against the kernel tables'
    (``layer.Machine``)."""

    def __init__(
        self,
        gpu: GPU,
        floor: K.HostFloor,
        reuse: bool = False,
        stages_alone: bool = False,
        machine: Machine = TABLES_MACHINE,
    ) -> None:
        self.gpu, self.floor, self.reuse, self.stages_alone = gpu, floor, reuse, stages_alone
        self.machine = machine
        self._shapes: dict[tuple[object, ...], _Shapes] = {}
        self._passes: dict[tuple[object, ...], ChunkWork] = {}
        self._params: dict[tuple[object, ...], _ChunkParams] = {}
        self._works: dict[tuple[object, ...], ChunkWork] = {}
        self._layouts: dict[tuple[object, ...], _Layout] = {}
        self._collectives: dict[tuple[object, ...], float] = {}
        self._sends: dict[tuple[object, ...], list[float]] = {}

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
        Without ``data_parallel``, the chunks' passes alone: no per-microbatch gradient add, no
        data-parallel collectives, no work once a step (what the planner bounds a layout group
        by, ``memtune/plan/search.py``)."""
        shapes = self.shapes(d)
        layout = self._cached(self._layouts, LAYOUT_KNOBS.key(d.knobs), _layout_of, d)
        staged = [self.stage(d, shapes, chunks, data_parallel) for chunks in layout.distinct]
        parts = tuple(staged[i][1] for i in layout.rank_of) if data_parallel else ()
        sends = self._cached(self._sends, SEND_KNOBS.key(d.knobs), _sends, d)
        priced = Priced(
            [
                StageWork(staged[i][0].chunks, sends[rank], staged[i][0].optimizer_s)
                for rank, i in enumerate(layout.rank_of)
            ],
            d.num_microbatches,
            d.model.microbatch_group_size_per_vp_stage or d.pp,
            overlap_of(d),
            tuple(sorted(shapes.pricer.unmeasured)),
            parts,
        )
        return _alone(priced) if self.stages_alone else priced

    def whole_model(self, d: Derived) -> ChunkWork:
        """The passes of one chunk holding every layer of the model with the embedding, the
        output layer and the loss, at the parallel shape of ``d``, each piece at the least it
        keeps any pass holding it busy: its kernels, or where it makes the host wait for the GPU
        (MoE dispatch), the longer of its kernels and its host work; and the host's work added
        up (``simulate.spread_bound``)."""
        m = d.model
        whole = Chunk(0, 0, tuple(range(m.num_layers)), True, True, d.mtp_num_layers)
        pieces = _chunk_pieces(d, self.shapes(d), self.floor, whole, 1)
        comm = pieces.comm

        # combined 1F1B pairs keep the GPU busy through a dispatcher's sync (_Iteration.place)
        waits = not overlap_of(d).paired

        def least(pass_pieces: list[Piece]) -> float:
            return sum(max(p.host, p.device) if p.syncs and waits else p.device for p in pass_pieces)

        return ChunkWork(
            forward_s=least(pieces.forward),
            backward_s=least(pieces.backward),
            tp_forward_s=comm["tp"],
            tp_backward_s=comm["tp_back"],
            tp_backward_blocking_s=comm["tp_blocking"],
            ep_forward_s=comm["ep"],
            ep_backward_s=comm["ep"],
            forward_host_s=sum(p.host for p in pieces.forward),
            backward_host_s=sum(p.host for p in pieces.backward),
        )

    def shapes(self, d: Derived) -> _Shapes:
        key = SHAPE_KNOBS.key(d.knobs)
        if d.job.peft is not None:
            key += ADAPTER_KNOBS.key(d.knobs)
        exchanges = not self.stages_alone
        return self._cached(self._shapes, key, _shapes_of, d, self.gpu, self.floor, exchanges, self.machine)

    def stage(
        self,
        d: Derived,
        shapes: _Shapes,
        chunks: tuple[tuple[Chunk, ChunkSignature], ...],
        data_parallel: bool,
    ) -> tuple[StageWork, StepParts]:
        """One pipeline rank's chunks and its work once a step (the boundary tensor it sends is
        the rank's own, ``_sends``)."""
        works = []
        held: list[_ChunkParams] = []
        knobs = d.knobs
        params_key, passes_key, work_key = (
            PARAMS_KNOBS.key(knobs),
            PASS_KNOBS.key(knobs),
            CHUNK_WORK_KNOBS.key(knobs),
        )
        for chunk, signature in chunks:
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
                params = self._cached(self._params, (params_key, signature), _params_of, d, chunk)
                held.append(params)
                work = self._cached(
                    self._works,
                    (work_key, signature),
                    self.with_data_parallel,
                    d,
                    shapes,
                    work,
                    params,
                    len(chunk.layers),
                )
            works.append(work)
        if not data_parallel:
            return StageWork(tuple(works), 0.0, 0.0), StepParts(0.0, 0.0, 0.0)
        parts = self.step_parts(d, shapes, held)
        return StageWork(tuple(works), 0.0, parts.total_s), parts

    def with_data_parallel(
        self, d: Derived, shapes: _Shapes, passes: ChunkWork, params: _ChunkParams, layers: int
    ) -> ChunkWork:
        """A chunk's ``passes`` with what data parallelism's wrapper adds to them: DDP's backward
        hook adding the gradients of ``params.hooked`` parameters into the main gradient every
        microbatch (``ShapePricer.grad_accumulation``; the gradient buffer's dtype follows the
        sharding), and the data-parallel collectives of its sharding strategy
        (``memtune/perf/sharding.py``): once a step, or Megatron-FSDP's every microbatch with what
        the passes' compute leaves of them exposed; ``params`` is what one TP rank of the chunk
        holds, in ``layers`` transformer layers."""
        frozen = d.job.peft is not None
        added = shapes.pricer.grad_accumulation(d, params.hooked)
        backward = passes.backward_s + added
        # a piece of the pass like any other (_pass): where the pass makes the host wait, the
        # host's side meets the GPU's at it
        backward_host = passes.backward_host_s + (added if passes.backward_syncs else 0.0)
        adapters = (sum(params.sizes[0]), sum(params.sizes[1])) if frozen else None
        dp = chunk_work(d, d.network, self.gpu.name, params.dense, params.expert, layers, adapters)
        # the collectives hide behind the passes as long as they last: the host's side or the GPU's
        forward_s = max(passes.forward_s, passes.forward_host_s)
        backward_s = max(backward, backward_host)
        dp_fwd = exposed(dp.forward_s, dp.first_gather_s, forward_s) if dp.forward_s else 0.0
        first = dp.first_gather_s if dp.forward_s else 0.0
        dp_bwd = exposed(dp.backward_s, first, backward_s) if dp.backward_s else 0.0
        return replace(
            passes,
            backward_s=backward,
            backward_host_s=backward_host,
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

    def step_parts(self, d: Derived, shapes: _Shapes, chunks: list[_ChunkParams]) -> StepParts:
        """A stage's work once per step, for the rank holding ``chunks``: the gradient buffers
        zeroed (``zero_grad_buffer``), DDP's scaling of them by 1/DP in ``finalize_model_grads``
        (``start_grad_sync``, before the reduction), and the optimizer step
        (:meth:`optimizer`)."""
        pricer = shapes.pricer
        frozen = d.job.peft is not None
        grad_bytes = DTYPE_BYTES[d.grad_dtype]
        if frozen:  # the adapters alone
            trainable = sum(sum(c.sizes[0]) + sum(c.sizes[1]) for c in chunks)
        else:
            trainable = sum(c.dense + c.expert for c in chunks)
        zero = grad_bytes * trainable / pricer.hbm
        finalize = 2 * grad_bytes * trainable / pricer.hbm if d.dp * d.cp > 1 else 0.0
        return StepParts(zero, finalize, self.optimizer(d, shapes, chunks))

    def optimizer(self, d: Derived, shapes: _Shapes, chunks: list[_ChunkParams]) -> float:
        """The optimizer step of the rank holding ``chunks``: Adam's own kernel from the
        measured table, Megatron's work around it per parameter of the rank's shard at HBM speed
        (the gradient norm and clipping, the copy back into the model's weights; fp16's
        unscaling) and per tensor (the local multi-tensor path without Apex or Transformer
        Engine runs a norm, a ``.item()``, and the clipping's and the copy's kernels tensor by
        tensor: megatron-core 0.19.2 ``utils.py local_multi_tensor_l2_norm``/
        ``local_multi_tensor_scale``), and the loop's ``step_s``; the offloaded share over the
        host link and on the CPU (``memtune/perf/offload.py``)."""
        job, pricer = d.job, shapes.pricer
        params, tensors = _shard_tensors(d, chunks)
        host = job.optimizer.optimizer_offload_fraction if job.optimizer.optimizer_cpu_offload else 0.0
        adam_s = pricer.hbm_ratio / pricer.eager.adam_params_per_s[d.adam_kernel]
        around = K.OPTIMIZER_STEP_BYTES_PER_PARAM[d.use_distributed_optimizer]
        if d.param_dtype == "fp16":
            around += K.FP16_UNSCALE_BYTES_PER_PARAM
        seconds = params * (1 - host) * (adam_s + around / pricer.hbm) + self.floor.step_s
        seconds += tensors * K.OPTIMIZER_PER_TENSOR_S[d.adam_kernel]
        if host:
            seconds += optimizer_offload_s(d, params * host)
        return seconds


def _shard_tensors(d: Derived, chunks: list[_ChunkParams]) -> tuple[float, float]:
    """Parameters and parameter tensors the rank's optimizer steps: its shard of the gradient
    buffers under the distributed optimizer or Megatron-FSDP (each buffer, dense and expert,
    laid out in reverse registration order and cut in DP equal ranges; the first range's
    tensors), else all of them. Under LoRA the buffers hold the adapters alone."""
    sharded = d.use_distributed_optimizer or d.fsdp_strategy != "no_shard"
    params = tensors = 0.0
    for buffer, dp in ((0, d.dp * d.cp), (1, d.edp)):
        sizes = [size for c in chunks for size in c.sizes[buffer]]
        total = sum(sizes)
        if not total:
            continue
        end, start, count = total / (dp if sharded else 1), 0.0, 0
        for size in sizes:
            if start >= end:
                break
            count += 1
            start += size
        params += end
        tensors += count
    return params, tensors


def _sends(d: Derived) -> list[float]:
    """Per pipeline rank, the boundary tensor it sends to the next (virtual) stage, over NVLink
    or, where the two stages sit in different NVLink domains (pipeline ranks TP x CP x DP apart),
    the adapters."""
    tokens = d.micro_batch_size * d.model.seq_length / d.cp
    boundary = BF16 * (tokens / d.tp if d.sequence_parallel else tokens) * d.model.hidden_size
    over = {crosses: send_recv(boundary, crosses, d.network) for crosses in (False, True)}
    return [over[pipeline_crosses_domain(rank, d.pp, d.tp * d.cp * d.dp, d.network)] for rank in range(d.pp)]


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


def _params_of(d: Derived, chunk: Chunk) -> _ChunkParams:
    """What one TP rank of ``chunk`` holds: its parameters, those DDP's hook adds every
    microbatch, and its tensors in each gradient buffer."""
    from memtune.estimate.params import chunk_param_tensors, chunk_params

    held = chunk_params(d, chunk)  # memtune/estimate/params.py
    if d.job.peft is not None:
        sizes = _adapter_sizes(d, chunk)
    else:
        tensors = list(reversed(chunk_param_tensors(d, chunk)))
        sizes = (
            tuple(t.numel for t in tensors if not t.expert),
            tuple(t.numel for t in tensors if t.expert),
        )
    hooked = _hooked_params(d, chunk, held.dense + held.replicated + held.expert, held.replicated)
    return _ChunkParams(held.dense + held.replicated, held.expert, hooked, sizes)


def _adapter_sizes(d: Derived, chunk: Chunk) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Under LoRA the gradient buffers hold only the adapters (the base is frozen): each
    adapter's A and B weights of the chunk's layers, dense and routed-expert apart, in reverse
    registration order."""
    from memtune.peft.model import adapters_in_layer

    dense: list[float] = []
    expert: list[float] = []
    for layer in chunk.layers:
        for a in adapters_in_layer(d, d.moe_layer_pattern[layer]):
            pair = [float(a.a_shape[0] * a.a_shape[1]), float(a.b_shape[0] * a.b_shape[1])]
            (expert if a.is_expert else dense).extend(pair * a.copies)
    return tuple(reversed(dense)), tuple(reversed(expert))


def _hooked_params(d: Derived, chunk: Chunk, held: float, replicated: float) -> float:
    """The chunk's parameters whose gradient DDP's backward hook adds into the main gradient
    every microbatch: all trainable ones (``held``), or with the weight gradients accumulated
    inside the GEMMs (``Derived.wgrad_accumulates_in_gemm``) the embeddings, norms and routers."""
    if d.job.peft is not None:
        return 0.0  # the frozen base has no gradient; the adapters' are small
    if not d.wgrad_accumulates_in_gemm:
        return held
    vocab_rows = d.padded_vocab_size * d.model.hidden_size / d.tp
    embeddings = vocab_rows if chunk.has_embedding or chunk.mtp_layers else 0.0
    return replicated + embeddings


def _signature(d: Derived, chunk: Chunk) -> ChunkSignature:
    offloaded_from = chunk.layers[0] if d.activation_offload_layers and chunk.layers else -1
    return (
        tuple(d.moe_layer_pattern[i] for i in chunk.layers),
        chunk.has_embedding,
        chunk.has_output,
        chunk.mtp_layers,
        offloaded_from,
    )


def _shapes_of(d: Derived, gpu: GPU, floor: K.HostFloor, exchanges: bool, machine: Machine) -> _Shapes:
    pricer = ShapePricer(d, gpu, floor, exchanges, machine)
    kinds = {moe: pricer.layer(moe) for moe in set(d.moe_layer_pattern)}
    # an MTP layer's transformer layer is the decoder's last layer's kind
    mtp = pricer.mtp_layer(kinds[d.moe_layer_pattern[-1]]) if d.mtp_num_layers else None
    return _Shapes(pricer, kinds, pricer.embedding(), pricer.output_and_loss(), mtp)


def _pass(pieces: list[Piece]) -> tuple[float, float, bool]:
    """One pass's device seconds, host seconds and whether it makes the host wait. The host
    issues each piece's kernels after its launch work and runs ahead of the GPU, across passes
    too (``simulate.py``), unless a piece makes it wait: then the pass's host and GPU meet at
    each such piece, and its host side is taken as the longer of the two per piece."""
    device = sum(p.device for p in pieces)
    syncs = any(p.syncs for p in pieces)
    host = sum(max(p.host, p.device) for p in pieces) if syncs else sum(p.host for p in pieces)
    return device, host, syncs


@dataclass(frozen=True)
class _Pieces:
    """A chunk's passes for one microbatch, piece by piece, and the collectives they leave exposed."""

    forward: list[Piece]
    backward: list[Piece]
    comm: dict[str, float]  # tp, tp_back, tp_blocking, ep
    output_wgrad: float


def _chunk_passes(
    d: Derived,
    shapes: _Shapes,
    floor: K.HostFloor,
    chunk: Chunk,
    chunks_per_rank: int,
) -> ChunkWork:
    """One microbatch's forward and backward pass through ``chunk`` (:func:`_chunk_pieces`),
    without what data parallelism adds (``StepPricer.with_data_parallel``), with the host copies
    of activation offload the pass does not hide (``memtune/perf/offload.py``)."""
    pieces = _chunk_pieces(d, shapes, floor, chunk, chunks_per_rank)
    comm = pieces.comm
    fwd, fwd_host, fwd_syncs = _pass(pieces.forward)
    bwd, bwd_host, bwd_syncs = _pass(pieces.backward)
    # the host copies of activation offload beyond the pass they hide behind (its longer side)
    offload_fwd, offload_bwd = activation_offload_s(d, chunk, max(fwd, fwd_host), max(bwd, bwd_host))
    return ChunkWork(
        forward_s=fwd + offload_fwd,
        backward_s=bwd + offload_bwd,
        tp_forward_s=comm["tp"],
        tp_backward_s=comm["tp_back"],
        tp_backward_blocking_s=comm["tp_blocking"],
        ep_forward_s=comm["ep"],
        ep_backward_s=comm["ep"],
        output_wgrad_s=pieces.output_wgrad,
        forward_host_s=fwd_host,
        backward_host_s=bwd_host,
        forward_syncs=fwd_syncs,
        backward_syncs=bwd_syncs,
    )


def _chunk_pieces(
    d: Derived, shapes: _Shapes, floor: K.HostFloor, chunk: Chunk, chunks_per_rank: int
) -> _Pieces:
    """The pieces of one microbatch's passes through ``chunk``: its layers' kernels and host
    work (with what recompute replays), the embedding, the final norm, output layer and loss,
    its MTP layers, and the host's own work per microbatch and, under VPP, per chunk pass
    (``VIRTUAL_CHUNK_PASS_S``); the TP and EP collectives each layer leaves exposed."""
    comm = {"tp": 0.0, "tp_back": 0.0, "tp_blocking": 0.0, "ep": 0.0}
    chunk_pass = K.VIRTUAL_CHUNK_PASS_S if chunks_per_rank > 1 else 0.0
    forward = [Piece(floor.microbatch_s / chunks_per_rank + chunk_pass, 0.0)]
    backward = [Piece(chunk_pass, 0.0)]
    if chunk.has_embedding:
        emb_fwd, emb_bwd = shapes.embedding
        forward.append(Piece(0.0, emb_fwd))
        backward.append(Piece(0.0, emb_bwd))
    _layer_passes(d, shapes, chunk, forward, backward, comm)
    out_wgrad = 0.0
    if chunk.has_output:
        out_fwd, out_bwd, out_wgrad = shapes.output
        forward.append(Piece(0.0, out_fwd))
        backward.append(Piece(0.0, out_bwd))
    if chunk.mtp_layers:
        assert shapes.mtp is not None
        mtp_fwd, mtp_bwd, mtp_comm = shapes.mtp
        forward += [mtp_fwd] * chunk.mtp_layers
        backward += [mtp_bwd] * chunk.mtp_layers
        comm["tp_back"] += chunk.mtp_layers * mtp_comm
    if d.whole_step_graphed:
        # a full-iteration CUDA graph replays every pass's kernels with one launch a step: no
        # host work per layer or microbatch, and no host wait inside (Megatron captures only
        # what needs none)
        forward = [Piece(0.0, p.device) for p in forward]
        backward = [Piece(0.0, p.device) for p in backward]
    return _Pieces(forward, backward, comm, out_wgrad)


def _layer_passes(
    d: Derived,
    shapes: _Shapes,
    chunk: Chunk,
    forward: list[Piece],
    backward: list[Piece],
    comm: dict[str, float],
) -> None:
    """The pieces of ``chunk``'s layers, appended to its ``forward`` and ``backward``, and their
    exposed collectives added to ``comm``: each layer's own, with what full recompute (the whole
    layer, its dispatch included) or selective recompute (``ShapePricer.replayed``) replays.
    Layers priced alike are one piece of their count (a pass adds its pieces up, :func:`_pass`)."""
    m = d.model
    replayed = 0
    if m.recompute_granularity == "full":
        replayed = sum(n for n, checkpointed in d.full_recompute_groups(len(chunk.layers)) if checkpointed)
    alike: dict[tuple[bool, bool], int] = {}  # layers by (MoE, replayed whole by full recompute)
    for i, layer in enumerate(chunk.layers):
        key = (d.moe_layer_pattern[layer], i < replayed)
        alike[key] = alike.get(key, 0) + 1
    selective = m.recompute_granularity == "selective"
    modules = d.recompute_modules
    for (is_moe, full), n in alike.items():
        lt = shapes.kinds[is_moe]
        forward.append(Piece(n * lt.host_fwd, n * lt.fwd, lt.syncs))
        back, host, syncs = lt.bwd, lt.host_bwd, False
        if full:
            back, host, syncs = back + lt.fwd, host + lt.host_fwd, lt.syncs
            # the replayed forward runs its layer's TP collectives and dispatch again
            comm["tp_back"] += n * (lt.tp_fwd + lt.ep_fwd)
        if selective:
            device, replay_host, replay_syncs = shapes.pricer.replayed(d, lt, is_moe)
            back, host, syncs = back + device, host + replay_host, syncs or replay_syncs
            if ("mlp" in modules and not is_moe) or ("moe" in modules and is_moe):
                # the replayed MLP or MoE block runs its collectives again
                comm["tp_back"] += n * (lt.mlp_tp_fwd + (lt.ep_fwd if is_moe else 0.0))
        backward.append(Piece(n * host, n * back, syncs))
        comm["tp"] += n * lt.tp_fwd
        comm["tp_back"] += n * lt.tp_bwd
        comm["tp_blocking"] += n * lt.tp_bwd_blocking
        comm["ep"] += n * lt.ep_fwd


def overlap_of(d: Derived) -> Overlap:
    """Which communication the job's settings make Megatron hide, and where the host waits for
    the GPU (``memtune/perf/simulate.py``)."""
    return Overlap(
        overlap_grad_reduce=d.overlap_grad_reduce,
        overlap_param_gather=d.overlap_param_gather,
        align_param_gather=d.align_param_gather,
        deferred_output_wgrad_microbatches=d.deferred_wgrad_microbatches,
        overlap_p2p_comm=d.overlap_p2p_comm,
        single_device_connection=d.one_hardware_queue,
        overlap_moe_expert_parallel_comm=d.model.overlap_moe_expert_parallel_comm,
        delay_wgrad_compute=d.model.delay_wgrad_compute,
        pipeline_syncs_host=d.pipeline_p2p_syncs_host,
    )


def layer_prices(
    d: Derived, gpu: GPU | None = None, floor: K.HostFloor | None = None
) -> dict[bool, LayerPrice]:
    """Each layer kind's price for one microbatch (``True``: MoE, ``False``: dense), as
    :func:`predict_step` prices them: what a bound on the step can add up."""
    pricer = StepPricer(gpu or get_gpu(d.job.cluster.gpu), floor or K.MEGATRON_LM_LOOP)
    return dict(pricer.shapes(d).kinds)


def predict_step(
    d: Derived,
    gpu: GPU | None = None,
    floor: K.HostFloor | None = None,
    record_events: bool = False,
    pricer: StepPricer | None = None,
    max_passes: int = MAX_SIMULATED_OPERATIONS,
    stages_alone: bool = False,
) -> StepPrediction:
    """Predicted step of the job of ``d`` as configured, on its GPU (or ``gpu``), in a training
    loop with host floor ``floor`` (Megatron-LM's unless told); ``record_events`` keeps the
    simulated passes for a Gantt chart. ``pricer`` (the planner's, reusing prices across the
    layouts of one job) gives the same prediction. ``stages_alone`` runs each stage as one rank
    measured alone under PyTorch's fake process group (``StepPricer``; a given ``pricer`` says
    so itself)."""
    gpu, floor = gpu or get_gpu(d.job.cluster.gpu), floor or K.MEGATRON_LM_LOOP
    pricer = pricer or StepPricer(gpu, floor, stages_alone=stages_alone)
    return predict_priced(d, pricer.price(d), record_events, max_passes)


def _alone(priced: Priced) -> Priced:
    """``priced`` with each stage run alone under PyTorch's fake process group."""
    stages = [
        replace(stage, chunks=tuple(_without_communication(w) for w in stage.chunks), send_s=0.0)
        for stage in priced.stages
    ]
    return replace(priced, stages=stages, overlap=replace(priced.overlap, stages_alone=True))


def _without_communication(work: ChunkWork) -> ChunkWork:
    """A chunk's work under PyTorch's fake process group: its collectives take no time."""
    return replace(
        work,
        tp_forward_s=0.0,
        tp_backward_s=0.0,
        tp_backward_blocking_s=0.0,
        ep_forward_s=0.0,
        ep_backward_s=0.0,
        grad_reduce_s=0.0,
        param_gather_s=0.0,
        dp_forward_exposed_s=0.0,
        dp_backward_exposed_s=0.0,
    )


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
        stage_step_parts=priced.step_parts,
    )
