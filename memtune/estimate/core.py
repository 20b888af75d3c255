"""The estimate of one rank's peak: model state + in-flight activations + the worst transient.

For each pipeline rank the peak is the larger of two moments:

- forward/backward: every in-flight microbatch's activations are alive and the chunk being run
  adds its worst working set, found by walking its autograd units forward and back;
- the optimizer step, when activations are gone but the step's temporaries exist.

Everything here is a pure function of the configuration; rendering lives elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from memtune.config.derived import DTYPE_BYTES, Chunk, Derived
from memtune.config.knobs import FSDP_GRADIENT_SHARDING, KnobSubset
from memtune.estimate import activation_offload, te
from memtune.estimate import activations as act
from memtune.estimate.flavour import Flavour, flavour_of
from memtune.estimate.params import (
    ParamCounts,
    ParamTensor,
    chunk_param_tensors,
    chunk_params,
    chunk_transformer_layer_params,
)
from memtune.estimate.peft import AdapterParams, adapter_params, apply_lora
from memtune.estimate.schedule import in_flight
from memtune.estimate.state import ModelState, PinnedHostCache, fsdp_gathered, model_state
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
    # Fine-grained activation offloading (``activation_offload``): what the first microbatch to
    # run backward keeps beyond ``saved``, the worst working set while a later microbatch waits
    # for its backward (None: as ``extra``), and pinned host bytes per microbatch.
    offload_margin: float = 0.0
    extra_pipelined: float | None = None
    host_pinned: float = 0.0

    @cached_property
    def total(self) -> float:
        return self.saved.total


class Segment(NamedTuple):
    """A stretch of a chunk that autograd treats as one unit: a layer, a checkpointed group of
    layers, the embedding or the output layer with the loss. (A named tuple: the planner builds
    millions of them.)"""

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
    # Activation bytes by tensor, all in-flight microbatches, at the forward/backward peak (also
    # when the optimizer step sets the rank's peak: what the job's recompute left on the device).
    modules: dict[str, float] = field(default_factory=dict)
    activation_host_pinned: float = 0.0  # pinned host bytes of activation offloading (either kind)
    te_allocations: dict[str, float] = field(default_factory=dict)  # TE's run-long buffers, in transient
    buffers: float = 0.0  # run-long buffers beside state and activations, in transient at either phase
    forward_backward_bytes: int = 0  # the peak during forward/backward, whichever phase sets the peak

    @property
    def peak_bytes(self) -> int:
        return round(self.state.total + self.activations + self.transient)

    @property
    def host_bytes(self) -> int:
        """Host memory this rank takes for training: offloaded optimizer state and activations."""
        return round(self.state.host + self.activation_host_pinned)

    @property
    def host_pinned_bytes(self) -> int:
        return round(self.state.host_pinned + self.activation_host_pinned)


# The knobs each piece below depends on besides the job's architecture and, where it takes one,
# the chunk; memtune/plan/fast.py keys its caches by them.
LAYER_KNOBS = KnobSubset(
    "tp", "cp", "mbs", "sp", "recompute", "act_offload", "regather", "ep", "etp", "pipelined"
)


def layer_saved(d: Derived, x: act.Dims, fl: Flavour, index: int, options: EstimateOptions) -> act.Saved:
    saved = act.transformer_layer(d, x, fl, d.moe_layer_pattern[index], options.moe_routing_imbalance)
    apply_lora(d, x, fl, saved, d.moe_layer_pattern[index])
    return saved


class ChunkParams(NamedTuple):
    """What one TP rank of a chunk holds (``params.chunk_params``), and of that what sits inside
    its transformer layers (``params.chunk_transformer_layer_params``)."""

    chunk: ParamCounts
    in_layers: ParamCounts


# The knobs a chunk's parameter counts depend on besides the chunk.
CHUNK_PARAMS_KNOBS = KnobSubset("tp", "ep", "etp")


def chunk_param_counts(d: Derived, chunk: Chunk) -> ChunkParams:
    return ChunkParams(chunk_params(d, chunk), chunk_transformer_layer_params(d, chunk))


class Assembled(NamedTuple):
    """One microbatch of a chunk before Megatron-FSDP's buckets: what it keeps, its autograd
    units in order, and the transformer layers in each unit (FSDP's units)."""

    kept: act.Saved
    segments: list[Segment]
    units: list[int]


class ChunkAssembly(NamedTuple):
    """A chunk's microbatch assembled: one variant, or under fine-grained activation offloading
    four (the first microbatch to run backward and the others, each with and without a later
    microbatch waiting), with the pinned host bytes per microbatch of either activation offload."""

    variants: tuple[Assembled, ...]
    host_pinned: float
    # What activation offload copies to the host per microbatch, and back for its backward
    # (the step model prices the copies: memtune/perf/offload.py).
    offloaded: float = 0.0


def assemble_chunk(
    d: Derived, chunk: Chunk, options: EstimateOptions, kinds: dict[bool, act.Saved] | None = None
) -> ChunkAssembly:
    """The autograd units of one microbatch in one chunk, with full recompute and offload
    applied (it depends on ``LAYER_KNOBS``).

    ``kinds`` may carry the layers already built for this job's activation shape (the planner
    shares them across chunks); missing kinds are built into it.
    """
    x, fl, m = act.dims_of(d), flavour_of(d), d.model
    # Layers differ only in being dense or MoE: build each kind once.
    kinds = {} if kinds is None else kinds
    indices = list(chunk.layers) + [chunk.layers[-1] if chunk.layers else 0] * chunk.mtp_layers
    layers = []
    for i in indices:
        moe = d.moe_layer_pattern[i]
        if moe not in kinds:
            kinds[moe] = layer_saved(d, x, fl, i, options)
        layers.append(kinds[moe])
    offloaded = min(d.activation_offload_layers, len(layers))
    groups = _layer_groups(d, layers)
    if not (m.fine_grained_activation_offloading and m.offload_modules) or m.cpu_offloading:
        # Layer-wise offload (cpu_offloading) moves its first layers' saved tensors whole.
        only = _assemble(d, chunk, layers, groups, offloaded, None)
        moved = sum(layer.total for layer in layers[:offloaded])
        return ChunkAssembly((only,), layerwise_offload_host_bytes(layers[:offloaded]), moved)
    # Fine-grained offloading: the layers outside full-recompute checkpoints open offload groups.
    position, eligible = 0, []
    for group, checkpointed in groups:
        if not checkpointed:
            eligible += [
                (position + k, d.moe_layer_pattern[indices[position + k]]) for k in range(len(group))
            ]
        position += len(group)
    plan = activation_offload.chunk_offload(
        d, fl, [(layers[p], moe) for p, moe in eligible], last_stage=chunk.has_output
    )
    slots = {p: k for k, (p, _) in enumerate(eligible)}
    variants = (plan.first, plan.other, plan.first_pipelined, plan.other_pipelined)
    return ChunkAssembly(
        tuple(_assemble(d, chunk, layers, groups, offloaded, (slots, v)) for v in variants),
        plan.host_pinned,
        plan.other.total,  # the steady microbatch's groups (the first to run backward keeps more)
    )


def offloaded_per_microbatch(d: Derived, chunk: Chunk) -> float:
    """Bytes a chunk's activation offload (layer-wise or fine-grained) copies to the host per
    microbatch in its forward, and back in its backward; 0 without offload."""
    m = d.model
    if not (m.cpu_offloading or (m.fine_grained_activation_offloading and m.offload_modules)):
        return 0.0
    return assemble_chunk(d, chunk, EstimateOptions()).offloaded


# Megatron-FSDP's gradient buckets join a chunk's working set (``_with_fsdp_buckets``); under
# them the chunk's activations also depend on ``Derived.fsdp_sharded_groups``.
CHUNK_ACTIVATION_KNOBS = LAYER_KNOBS | KnobSubset("fsdp_gradient_sharding", "pipelined")


def chunk_activations(
    d: Derived,
    chunk: Chunk,
    options: EstimateOptions,
    kinds: dict[bool, act.Saved] | None = None,
    params: ChunkParams | None = None,
    assembly: ChunkAssembly | None = None,
) -> ChunkActivations:
    """Activations of one microbatch in one chunk, with full recompute and offload applied.

    ``kinds`` is :func:`assemble_chunk`'s; ``assembly`` may carry the chunk's assembly and
    ``params`` its :func:`chunk_param_counts`, which Megatron-FSDP's gradient buckets read.
    """
    if assembly is None:
        assembly = assemble_chunk(d, chunk, options, kinds)
    if params is None and d.fsdp_strategy in FSDP_GRADIENT_SHARDING:
        params = chunk_param_counts(d, chunk)

    def extra(a: Assembled) -> float:
        segments = a.segments if params is None else _with_fsdp_buckets(d, chunk, a.segments, a.units, params)
        return _chunk_extra(d, chunk, segments)

    if len(assembly.variants) == 1:
        only = assembly.variants[0]
        return ChunkActivations(
            saved=only.kept, layers=len(chunk.layers), extra=extra(only), host_pinned=assembly.host_pinned
        )
    first, other, first_pipelined, other_pipelined = assembly.variants
    return ChunkActivations(
        saved=other.kept,
        layers=len(chunk.layers),
        extra=max(extra(first), extra(other)),
        offload_margin=first.kept.total - other.kept.total,
        extra_pipelined=max(extra(first_pipelined), extra(other_pipelined)),
        host_pinned=assembly.host_pinned,
    )


def layerwise_offload_host_bytes(offloaded: list[act.Saved]) -> float:
    """Pinned host memory of Megatron-Core's layer-wise activation offload for one microbatch
    (PP 1: one microbatch at a time). Transformer Engine's ``get_cpu_offload_context``
    (transformer_engine/pytorch/cpu_offload.py, ``OffloadableLayerState.start_offload``) copies
    each saved tensor of an offloaded layer into ``torch.empty_like(..., pin_memory=True)``: all
    offloaded layers are on the host when the last one's forward ends, each tensor rounded up to
    a power of two by PyTorch's caching host allocator, which keeps the blocks for the next
    microbatch (rounded here per named tensor of a layer)."""
    cache = PinnedHostCache()
    cache.take(nbytes for layer in offloaded for nbytes in layer.tensors.values())
    return float(cache.total)


def _assemble(
    d: Derived,
    chunk: Chunk,
    layers: list[act.Saved],
    groups: list[tuple[list[act.Saved], bool]],
    offloaded: int,
    fine: tuple[dict[int, int], activation_offload.Variant] | None,
) -> Assembled:
    """What one microbatch of a chunk keeps, and its autograd units in order. ``fine`` maps
    layer positions to their slot in a fine-grained offload variant, which moves part of those
    layers' tensors to the host."""
    x = act.dims_of(d)
    kept = act.Saved()
    segments: list[Segment] = []
    units: list[int] = []  # transformer layers in each segment, Megatron-FSDP's units
    if chunk.has_embedding:
        emb = act.embedding(d, x)
        kept.merge(emb)
        # Its backward builds a dense gradient of this rank's embedding rows.
        wgrad = act.BF16 * d.padded_vocab_size / d.tp * x.hidden
        if fine is not None:
            wgrad += fine[1].after_backward  # the next microbatch's groups, already reloaded
        segments.append(Segment(emb.total, emb.total, emb.fwd_transient, wgrad))
        units.append(0)
    _add_layer_segments(d, x, groups, layers, offloaded, fine, kept, segments, units)
    _add_closing_segments(d, x, chunk, kept, segments, units)
    return Assembled(kept, segments, units)


def _add_layer_segments(
    d: Derived,
    x: act.Dims,
    groups: list[tuple[list[act.Saved], bool]],
    layers: list[act.Saved],
    offloaded: int,
    fine: tuple[dict[int, int], activation_offload.Variant] | None,
    kept: act.Saved,
    segments: list[Segment],
    units: list[int],
) -> None:
    """Add the transformer layers' units to ``segments`` and ``units``, and what they keep to ``kept``."""
    m = d.model
    # The gradient of the residual stream lives through each layer's backward.
    residual_grad = act.layer_input(x)
    first_layer = 0
    # Each layer kind's total, and how many more times each kind is kept beyond its first merge:
    # the byte counts are whole numbers, so adding a kind n times equals adding n times it.
    totals = {id(layer): layer.total for layer in layers}
    repeats: dict[int, list[Any]] = {}
    adjusted: dict[
        tuple[int, tuple[tuple[str, float], ...]], act.Saved
    ] = {}  # layers with the same tensors offloaded share one
    for group, checkpointed in groups:
        if fine is not None and not checkpointed and first_layer >= offloaded:
            slot = fine[0][first_layer]
            variant = fine[1]
            group = [_kept_on_device(group[0], variant.offloaded[slot], adjusted, totals)]
            fwd_offload, bwd_offload = variant.fwd_extra[slot], variant.bwd_extra[slot]
            bwd_after_offload = variant.bwd_after_extra[slot]
        else:
            fwd_offload = bwd_offload = 0.0
            bwd_after_offload = -math.inf
        full, fwd, bwd = _group_working_sets(
            group, totals, residual_grad, fwd_offload, bwd_offload, bwd_after_offload
        )
        if checkpointed:
            inputs = act.layer_input(x) / (d.tp if m.distribute_saved_activations and not x.sp else 1)
            kept.add("recompute.checkpoint_inputs", inputs)
            segments.append(Segment(inputs, inputs + full, fwd, bwd))
        elif first_layer < offloaded:
            # Offloaded layers leave the device; backward brings one layer back at a time.
            segments.append(Segment(0.0, full, full + fwd, bwd))
        else:
            for layer in group:
                if id(layer) in repeats:
                    repeats[id(layer)][1] += 1
                else:
                    kept.merge(layer, "decoder.")
                    repeats[id(layer)] = [layer, 0]
            segments.append(Segment(full, full, fwd, bwd))
        units.append(len(group))
        first_layer += len(group)
    for layer, extra in repeats.values():
        if extra:
            kept.merge(layer, "decoder.", times=extra)


def _group_working_sets(
    group: list[act.Saved],
    totals: dict[int, float],
    residual_grad: float,
    fwd_offload: float,
    bwd_offload: float,
    bwd_after_offload: float,
) -> tuple[float, float, float]:
    """A group of layers' saved bytes, and its working sets in forward and in backward."""
    if len(group) == 1:
        full, fwd, bwd = (
            totals[id(group[0])],
            group[0].fwd_transient,
            group[0].bwd_transient + residual_grad,
        )
    else:
        full = sum(totals[id(layer)] for layer in group)
        fwd = max(layer.fwd_transient for layer in group)
        bwd = max(layer.bwd_transient for layer in group) + residual_grad
    if fwd_offload or bwd_offload:
        # Offloaded tensors exist on the device until their group's commit, and reloaded
        # ones (this layer's and those fetched ahead) beside the layer's backward; a reload
        # issued once a module's backward is done no longer meets its working set.
        fwd = fwd + fwd_offload
        bwd = max(bwd + bwd_offload, residual_grad + bwd_after_offload)
    return full, fwd, bwd


def _kept_on_device(
    layer: act.Saved,
    moved: dict[str, float],
    adjusted: dict[tuple[int, tuple[tuple[str, float], ...]], act.Saved],
    totals: dict[int, float],
) -> act.Saved:
    """What ``layer`` keeps once ``moved`` leaves, shared through ``adjusted``, its total in ``totals``."""
    key = (id(layer), tuple(sorted(moved.items())))
    if key not in adjusted:
        adjusted[key] = activation_offload.kept_on_device(layer, moved)
        totals[id(adjusted[key])] = adjusted[key].total
    return adjusted[key]


def _add_closing_segments(
    d: Derived, x: act.Dims, chunk: Chunk, kept: act.Saved, segments: list[Segment], units: list[int]
) -> None:
    """Add the MTP and output layers' units (or the kept sent output's), as ``_add_layer_segments``."""
    fl, m = flavour_of(d), d.model
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


def _chunk_extra(d: Derived, chunk: Chunk, segments: list[Segment]) -> float:
    extra = worst_extra(segments)
    if d.pp > 1:
        # In backward the gradient received from the next stage and the one being sent to the
        # previous stage exist beside the chunk's activations.
        p2p = (0 if chunk.has_output else 1) + (0 if chunk.has_embedding else 1)
        extra += p2p * act.layer_input(act.dims_of(d))
    return extra


def _with_fsdp_buckets(
    d: Derived, chunk: Chunk, segments: list[Segment], units: list[int], params: ChunkParams | None = None
) -> list[Segment]:
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
    params = params or chunk_param_counts(d, chunk)
    trainable = 0.0 if d.job.peft is not None else fsdp_gathered(d, params.chunk)
    in_units = fsdp_gathered(d, params.in_layers)
    count = sum(units)
    mean = in_units / count if count else 0.0
    communication = d.fsdp_communication_unit(mean)
    segments = list(segments)
    if d.fsdp_strategy == "optim_grads":
        bucket = d.bucket_size or trainable
        segments[-1] = _first_gradient_bucket(
            d, chunk, segments[-1], grad_bytes * min(trainable, communication + bucket)
        )
        return segments
    outside = max(0.0, trainable - in_units)
    segments[-1] = _first_gradient_bucket(d, chunk, segments[-1], grad_bytes * outside)
    if not count or not mean:  # no unit is really sharded: nothing to gather per layer
        return segments
    prefetched = math.ceil(communication / 2 / mean)
    queued = math.floor(communication / mean) + 1  # reduced buckets kept while the next one fills
    before = 0
    for index, own in enumerate(units):
        after = count - before - own  # units whose backward ran before this segment's
        gathered_bwd = min(own + prefetched, count - after) if own else 0
        seg = segments[index]
        # Built directly: ``_replace`` costs several times more, on every FSDP candidate's chunks.
        segments[index] = Segment(
            seg.kept,
            seg.replayed,
            seg.fwd_extra + weight_bytes * mean * (count - before),
            seg.bwd_extra
            + weight_bytes * mean * gathered_bwd
            + grad_bytes * mean * (min(after, queued) + own),
            seg.bwd_residue,
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
    return segment._replace(bwd_extra=peak, bwd_residue=segment.bwd_residue + bucket)


def _layer_groups(d: Derived, layers: list[act.Saved]) -> list[tuple[list[act.Saved], bool]]:
    """Split a chunk's layers into autograd units: (layers, checkpointed), as
    ``Derived.full_recompute_groups`` says."""
    groups, start = [], 0
    for size, checkpointed in d.full_recompute_groups(len(layers)):
        groups.append((layers[start : start + size], checkpointed))
        start += size
    return groups


# Re-gathering adapters' buffer: LoRA's eligibility reads recompute and activation offload.
BUFFER_KNOBS = KnobSubset("tp", "sp", "cp", "mbs", "regather", "recompute", "act_offload", "pipelined")


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
    te_own = sum(te.persistent_allocations(d, chunks).values())
    return workspaces + te_own + largest + 2 * receiving * act.layer_input(x)


# The microbatch count (TP, PP, CP and the micro-batch set it) and the activation shape.
DEFERRED_WGRAD_KNOBS = KnobSubset("tp", "pp", "cp", "mbs", "sp")


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


RANK_PARAMS_KNOBS = CHUNK_PARAMS_KNOBS


def rank_params(
    d: Derived, chunks: tuple[Chunk, ...]
) -> tuple[ParamCounts, AdapterParams, ParamCounts, list[list[ParamTensor]]]:
    """A rank's base parameters, LoRA adapters, the base parameters inside transformer layers
    (Megatron-FSDP's units) and its parameter tensors in order (the optimizer offload's walk):
    what :func:`model_state` takes."""
    local = sum((chunk_params(d, c) for c in chunks), ParamCounts())
    adapters = sum((adapter_params(d, c.layers) for c in chunks), AdapterParams())
    units = sum((chunk_transformer_layer_params(d, c) for c in chunks), ParamCounts())
    tensors = [chunk_param_tensors(d, c) for c in chunks]
    return local, adapters, units, tensors


def rank_estimate(
    d: Derived, pp_rank: int, options: EstimateOptions, dp_ranks: tuple[int, int] | None = None
) -> RankEstimate:
    """One pipeline rank; ``dp_ranks`` (its place in the data-parallel x context-parallel and
    expert data-parallel groups) matters only where the state differs between data-parallel
    ranks (see ``state.model_state``); None takes the worst of them."""
    chunks = d.chunks[pp_rank]
    rank = combine(
        pp_rank,
        chunks,
        in_flight(d, pp_rank),
        model_state(d, *rank_params(d, chunks), dp_ranks=dp_ranks),
        [chunk_activations(d, c, options) for c in chunks],
        persistent_buffers(d, flavour_of(d), chunks),
        deferred_wgrad_bytes(d, chunks),
    )
    rank.te_allocations = te.persistent_allocations(d, chunks)
    return rank


def held_and_transient(
    chunks: tuple[Chunk, ...], flight: dict[int, int], per_chunk: list[ChunkActivations], deferred: float
) -> tuple[float, float]:
    """Activations the in-flight microbatches hold (with deferred weight-gradient buffers), and
    the worst working set a chunk adds."""
    held, worst_transient, margin = deferred, 0.0, 0.0
    for chunk, acts in zip(chunks, per_chunk):
        count = flight.get(chunk.vp_stage, 0)
        if count:
            held += count * acts.total
            extra = acts.extra if count == 1 or acts.extra_pipelined is None else acts.extra_pipelined
            worst_transient = max(worst_transient, extra)
            margin = max(margin, acts.offload_margin)
    # Only one microbatch per rank runs backward first and keeps its offload margin.
    return held + margin, worst_transient


def peak_parts(
    state: ModelState, held: float, worst_transient: float, buffers: float
) -> tuple[float, float, str]:
    """(activations, transient, phase) at the rank's peak: forward/backward, or the optimizer
    step when its temporaries outgrow the activations."""
    if state.optimizer_step_transient > held + worst_transient:
        return 0.0, state.optimizer_step_transient + buffers, "optimizer step"
    return held, worst_transient + buffers, "forward/backward"


def combine(
    pp_rank: int,
    chunks: tuple[Chunk, ...],
    flight: dict[int, int],
    state: ModelState,
    per_chunk: list[ChunkActivations],
    buffers: float,
    deferred: float,
    by_module: bool = True,
) -> RankEstimate:
    """A rank's peak from its pieces; ``memtune.plan``'s fast path calls it with cached pieces
    and without the per-module breakdown (``by_module=False`` leaves ``modules`` empty)."""
    held, worst_transient = held_and_transient(chunks, flight, per_chunk, deferred)
    activations, transient, phase = peak_parts(state, held, worst_transient, buffers)
    modules: dict[str, float] = {}
    if by_module:
        for chunk, acts in zip(chunks, per_chunk):
            count = flight.get(chunk.vp_stage, 0)
            if count:
                for name, nbytes in acts.saved.tensors.items():
                    modules[name] = modules.get(name, 0.0) + count * nbytes
        if deferred:
            modules["output_layer.deferred_wgrad_buffers"] = deferred
        margin = max(
            (acts.offload_margin for c, acts in zip(chunks, per_chunk) if flight.get(c.vp_stage)), default=0.0
        )
        if margin:
            modules["fine_grained_offload.kept_by_first_backward"] = margin
    host = sum(flight.get(c.vp_stage, 0) * acts.host_pinned for c, acts in zip(chunks, per_chunk))
    return RankEstimate(
        pp_rank=pp_rank,
        layers=sum(len(c.layers) for c in chunks),
        in_flight=flight,
        state=state,
        activations=activations,
        transient=transient,
        peak_phase=phase,
        modules=modules,
        activation_host_pinned=host,
        buffers=buffers,
        forward_backward_bytes=round(state.total + held + (worst_transient + buffers)),
    )
