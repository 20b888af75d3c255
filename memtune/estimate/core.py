"""The estimate of one rank's peak: model state + in-flight activations + the worst transient.

For each pipeline rank the peak is the larger of two moments:

- forward/backward: every in-flight microbatch's activations are alive and the chunk being run
  adds its worst working set, found by walking its autograd units forward and back;
- the optimizer step, when activations are gone but the step's temporaries exist.

Everything here is a pure function of the configuration; rendering lives elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from memtune.config.derived import DTYPE_BYTES, Chunk, Derived
from memtune.estimate import activations as act
from memtune.estimate.flavour import Flavour, flavour_of
from memtune.estimate.params import ParamCounts, chunk_params, chunk_transformer_layer_params
from memtune.estimate.peft import AdapterParams, adapter_params, apply_lora
from memtune.estimate.schedule import in_flight
from memtune.estimate.state import ModelState, fsdp_gathered, model_state
from memtune.peft.model import regather_buffer_bytes
from memtune.units import MiB

CUBLAS_WORKSPACE = 32 * MiB  # per (thread, stream) on Hopper and Blackwell, inside the allocator


@dataclass(frozen=True)
class EstimateOptions:
    """Inputs that are not part of the training configuration."""

    moe_routing_imbalance: float = 1.0  # tokens the hottest expert rank gets / the balanced share


@dataclass
class ChunkActivations:
    """One microbatch of one model chunk: what it keeps, and its worst working set beyond that."""

    saved: act.Saved
    layers: int
    extra: float  # peak of (alive - kept) over the chunk's forward and backward

    @property
    def total(self) -> float:
        return self.saved.total


@dataclass(frozen=True)
class Segment:
    """A stretch of a chunk that autograd treats as one unit: a layer, a checkpointed group of
    layers, the embedding or the output layer with the loss."""

    kept: float  # bytes it keeps from its forward until its backward
    replayed: float  # bytes it holds during its backward (more than kept when recomputed)
    fwd_extra: float  # working set beyond ``kept`` while its forward runs
    bwd_extra: float  # working set beyond ``replayed`` while its backward runs
    bwd_residue: float = 0.0  # left allocated after its backward until the chunk's backward ends


def worst_extra(segments: list[Segment]) -> float:
    """Walk one microbatch's forward then backward; return the peak of alive minus all kept."""
    total = sum(seg.kept for seg in segments)
    worst, before = 0.0, 0.0
    for seg in segments:
        worst = max(worst, before + seg.kept + seg.fwd_extra - total)
        before += seg.kept
    residue = 0.0
    for i in reversed(range(len(segments))):
        before -= segments[i].kept
        worst = max(worst, before + segments[i].replayed + segments[i].bwd_extra + residue - total)
        residue += segments[i].bwd_residue
    return worst


@dataclass
class RankEstimate:
    pp_rank: int
    layers: int
    in_flight: dict[int, int]
    state: ModelState
    activations: float
    transient: float
    peak_phase: str  # "forward/backward" or "optimizer step"
    modules: dict[str, float] = field(default_factory=dict)  # activation bytes by tensor, all in-flight

    @property
    def peak_bytes(self) -> int:
        return round(self.state.total + self.activations + self.transient)

    @property
    def host_bytes(self) -> int:
        """Host memory this rank's training state takes (optimizer CPU offload)."""
        return round(self.state.host)

    @property
    def host_pinned_bytes(self) -> int:
        return round(self.state.host_pinned)


def layer_saved(d: Derived, x: act.Dims, fl: Flavour, index: int, options: EstimateOptions) -> act.Saved:
    saved = act.transformer_layer(d, x, fl, d.moe_layer_pattern[index], options.moe_routing_imbalance)
    apply_lora(d, x, fl, saved, d.moe_layer_pattern[index])
    return saved


def chunk_activations(d: Derived, chunk: Chunk, options: EstimateOptions) -> ChunkActivations:
    """Activations of one microbatch in one chunk, with full recompute and offload applied."""
    x, fl, m = act.dims_of(d), flavour_of(d), d.model
    # Layers differ only in being dense or MoE: build each kind once.
    kinds: dict[bool, act.Saved] = {}
    indices = list(chunk.layers) + [chunk.layers[-1] if chunk.layers else 0] * chunk.mtp_layers
    layers = []
    for i in indices:
        moe = d.moe_layer_pattern[i]
        if moe not in kinds:
            kinds[moe] = layer_saved(d, x, fl, i, options)
        layers.append(kinds[moe])
    kept = act.Saved()
    segments: list[Segment] = []
    units: list[int] = []  # transformer layers in each segment, Megatron-FSDP's units
    # The gradient of the residual stream lives through each layer's backward.
    residual_grad = act.layer_input(x)
    if chunk.has_embedding:
        emb = act.embedding(d, x)
        kept.merge(emb)
        # Its backward builds a dense gradient of this rank's embedding rows.
        wgrad = act.BF16 * d.padded_vocab_size / d.tp * x.hidden
        segments.append(Segment(emb.total, emb.total, emb.fwd_transient, wgrad))
        units.append(0)
    offloaded = (
        min(m.cpu_offloading_num_layers, len(layers))
        if m.cpu_offloading and m.cpu_offloading_activations
        else 0
    )
    first_layer = 0
    for group, checkpointed in _layer_groups(d, layers):
        full = sum(layer.total for layer in group)
        fwd = max(layer.fwd_transient for layer in group)
        bwd = max(layer.bwd_transient for layer in group) + residual_grad
        if checkpointed:
            inputs = act.layer_input(x) / (d.tp if m.distribute_saved_activations and not x.sp else 1)
            kept.add("recompute.checkpoint_inputs", inputs)
            segments.append(Segment(inputs, inputs + full, fwd, bwd))
        elif first_layer < offloaded:
            # Offloaded layers leave the device; backward brings one layer back at a time.
            segments.append(Segment(0.0, full, full + fwd, bwd))
        else:
            for layer in group:
                kept.merge(layer, "decoder.")
            segments.append(Segment(full, full, fwd, bwd))
        units.append(len(group))
        first_layer += len(group)
    for _ in range(chunk.mtp_layers):
        mtp = act.mtp_extra(d, x)
        kept.merge(mtp)
        segments.append(Segment(mtp.total, mtp.total, mtp.fwd_transient, mtp.bwd_transient))
        units.append(0)
    if chunk.has_output:
        out = act.output_and_loss(d, x)
        kept.merge(out)
        # A tied output weight is a leaf used twice in this chunk: autograd holds the output
        # layer's weight gradient until the embedding's backward adds its own.
        tied = chunk.has_embedding and m.share_embeddings_and_output_weights
        residue = act.BF16 * d.padded_vocab_size / d.tp * x.hidden if tied else 0.0
        segments.append(Segment(out.total, out.total, out.fwd_transient, out.bwd_transient, residue))
        units.append(0)
    elif d.pp > 1 and fl.pipeline_outputs_kept:
        # The schedule keeps each sent output for backward unless it deallocates it.
        kept.add("pipeline.output_tensor", act.layer_input(x))
        segments.append(Segment(act.layer_input(x), act.layer_input(x), 0.0, 0.0))
        units.append(0)
    if d.fsdp_strategy in ("optim_grads", "optim_grads_params"):
        segments = _with_fsdp_buckets(d, chunk, segments, units)
    extra = worst_extra(segments)
    if d.pp > 1:
        # In backward the gradient received from the next stage and the one being sent to the
        # previous stage exist beside the chunk's activations.
        p2p = (0 if chunk.has_output else 1) + (0 if chunk.has_embedding else 1)
        extra += p2p * act.layer_input(x)
    return ChunkActivations(saved=kept, layers=len(chunk.layers), extra=extra)


def _with_fsdp_buckets(d: Derived, chunk: Chunk, segments: list[Segment], units: list[int]) -> list[Segment]:
    """Megatron-FSDP's unsharded temporary buckets while a chunk runs (megatron-core 0.19.2,
    ``MegatronFSDP`` hooks, ``AllGatherPipeline``, ``GradReducePipeline``).

    A sharded gradient buffer takes each parameter's gradient into an unsharded bucket of its
    group, allocated at the group's first gradient of the backward. A bucket is reduce-scattered
    once all its parameters have gradients and then queued; the queue frees the oldest buckets
    only once it holds more than the communication unit (:meth:`Derived.fsdp_communication_unit`),
    and the rest at the end of the backward. ``optim_grads`` has one group for dense parameters
    and one for routed experts unless ``bucket_size`` splits them, so its buckets stay from the
    output layer's backward to the end. ``optim_grads_params`` makes each transformer layer its
    own group (a unit): a unit is gathered before it runs and released after, the gather
    prefetches further units up to half the communication unit ahead, and after the optimizer
    step every unit is gathered for the next iteration, so the first microbatch's forward finds
    all later layers gathered. The group outside the units reduces at the end of the backward.
    """
    weight_bytes, grad_bytes = DTYPE_BYTES[d.param_dtype], DTYPE_BYTES[d.grad_dtype]
    trainable = 0.0 if d.job.peft is not None else fsdp_gathered(d, chunk_params(d, chunk))
    in_units = fsdp_gathered(d, chunk_transformer_layer_params(d, chunk))
    count = sum(units)
    mean = in_units / count if count else 0.0
    communication = d.fsdp_communication_unit(mean)
    segments = list(segments)
    if d.fsdp_strategy == "optim_grads":
        bucket = d.job.ddp.bucket_size or trainable
        segments[-1] = _first_gradient_bucket(
            d, chunk, segments[-1], grad_bytes * min(trainable, communication + bucket)
        )
        return segments
    outside = max(0.0, trainable - in_units)
    segments[-1] = _first_gradient_bucket(d, chunk, segments[-1], grad_bytes * outside)
    if not count:
        return segments
    prefetched = math.ceil(communication / 2 / mean)
    queued = math.floor(communication / mean) + 1  # reduced buckets kept while the next one fills
    before = 0
    for index, own in enumerate(units):
        after = count - before - own  # units whose backward ran before this segment's
        gathered_bwd = min(own + prefetched, count - after) if own else 0
        segments[index] = replace(
            segments[index],
            fwd_extra=segments[index].fwd_extra + weight_bytes * mean * (count - before),
            bwd_extra=segments[index].bwd_extra
            + weight_bytes * mean * gathered_bwd
            + grad_bytes * mean * (min(after, queued) + own),
        )
        before += own
    return segments


def _first_gradient_bucket(d: Derived, chunk: Chunk, segment: Segment, bucket: float) -> Segment:
    """The last segment's backward allocates a gradient bucket that stays to the end of the
    chunk's backward. On the last stage the output layer's weight gradient is the first: its
    accumulation hook allocates the bucket while that gradient and the input's gradient exist
    and the fp32 softmax is already freed."""
    peak = segment.bwd_extra
    if chunk.has_output:
        x = act.dims_of(d)
        vocab = d.padded_vocab_size / d.tp
        wgrad = act.BF16 * vocab * x.hidden + act.BF16 * x.tokens * x.hidden - act.FP32 * x.tokens * vocab
        peak = max(peak, wgrad + bucket)
    return replace(segment, bwd_extra=peak, bwd_residue=segment.bwd_residue + bucket)


def _layer_groups(d: Derived, layers: list[act.Saved]) -> list[tuple[list[act.Saved], bool]]:
    """Split a chunk's layers into autograd units: (layers, checkpointed).

    Full recompute ``uniform`` checkpoints consecutive groups of ``recompute_num_layers``;
    ``block`` checkpoints the first ``recompute_num_layers`` layers one by one.
    """
    m = d.model
    if m.recompute_granularity != "full":
        return [([layer], False) for layer in layers]
    k = m.recompute_num_layers or 1
    if m.recompute_method == "uniform":
        return [(layers[i : i + k], True) for i in range(0, len(layers), k)]
    return [([layer], i < k) for i, layer in enumerate(layers)]


def persistent_buffers(d: Derived, fl: Flavour, chunks: tuple[Chunk, ...]) -> float:
    """Buffers that, once allocated, stay for the whole run.

    - cuBLAS workspaces: one per (thread, stream); forward GEMMs run on the main thread and
      backward GEMMs on autograd's device thread, so two. Transformer Engine's GEMMs take their
      own workspace of the same size on top (allocated once through PyTorch).
    - Megatron's global memory buffer: one bf16 tensor grown to the largest request, the
      sequence-parallel all-gather of a linear's input or the unfused attention's scores.
    - Pipeline receive buffers: a chunk that takes its input from the previous stage keeps a
      received activation and a received gradient (measured: 2 layer inputs per such chunk).
    """
    x = act.dims_of(d)
    receiving = sum(1 for c in chunks if not c.has_embedding) if d.pp > 1 else 0
    largest = 0.0
    if x.sp:
        # Frozen base linears (LoRA) gather into fresh tensors; only re-gathering adapters use it.
        largest = act.BF16 * x.tokens * x.hidden if d.job.peft is None else regather_buffer_bytes(d)
    if not fl.flash_attention:
        heads = d.model.num_attention_heads / d.tp
        largest = max(largest, act.BF16 * x.mbs * heads * x.seq * x.seq)
    workspaces = (3 if fl.transformer_engine else 2) * CUBLAS_WORKSPACE
    return workspaces + largest + 2 * receiving * act.layer_input(x)


def deferred_wgrad_bytes(d: Derived, chunks: tuple[Chunk, ...]) -> float:
    """With ``defer_embedding_wgrad_compute`` the last stage keeps, for every deferred
    microbatch, the logits gradient and the output layer's input until the schedule's end; at
    the peak ``Derived.deferred_wgrad_buffers_at_peak`` of them exist beside a later
    microbatch's working set."""
    if not d.deferred_wgrad_microbatches or not any(c.has_output for c in chunks):
        return 0.0
    x = act.dims_of(d)
    per_microbatch = (
        act.BF16 * x.tokens * d.padded_vocab_size / d.tp + act.BF16 * x.residual_tokens * x.hidden
    )
    return d.deferred_wgrad_buffers_at_peak * per_microbatch


def rank_estimate(d: Derived, pp_rank: int, options: EstimateOptions) -> RankEstimate:
    chunks = d.chunks[pp_rank]
    fl = flavour_of(d)
    local = sum((chunk_params(d, c) for c in chunks), ParamCounts())
    adapters = sum((adapter_params(d, c.layers) for c in chunks), AdapterParams())
    units = sum((chunk_transformer_layer_params(d, c) for c in chunks), ParamCounts())
    state = model_state(d, local, adapters, units)
    flight = in_flight(d, pp_rank)
    per_chunk = [chunk_activations(d, c, options) for c in chunks]
    held = 0.0
    modules: dict[str, float] = {}
    worst_transient = 0.0
    for chunk, acts in zip(chunks, per_chunk):
        count = flight.get(chunk.vp_stage, 0)
        if not count:
            continue
        held += count * acts.total
        for name, nbytes in acts.saved.tensors.items():
            modules[name] = modules.get(name, 0.0) + count * nbytes
        worst_transient = max(worst_transient, acts.extra)
    deferred = deferred_wgrad_bytes(d, chunks)
    if deferred:
        held += deferred
        modules["output_layer.deferred_wgrad_buffers"] = deferred
    buffers = persistent_buffers(d, fl, chunks)
    training_peak = held + worst_transient
    if state.optimizer_step_transient > training_peak:
        return RankEstimate(
            pp_rank=pp_rank,
            layers=sum(len(c.layers) for c in chunks),
            in_flight=flight,
            state=state,
            activations=0.0,
            transient=state.optimizer_step_transient + buffers,
            peak_phase="optimizer step",
            modules={},
        )
    return RankEstimate(
        pp_rank=pp_rank,
        layers=sum(len(c.layers) for c in chunks),
        in_flight=flight,
        state=state,
        activations=held,
        transient=worst_transient + buffers,
        peak_phase="forward/backward",
        modules=modules,
    )
