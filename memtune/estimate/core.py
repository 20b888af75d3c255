"""The estimate of one rank's peak: model state + in-flight activations + the worst transient.

For each pipeline rank the peak is the larger of two moments:

- the first backward of the steady 1F1B phase, when every in-flight microbatch's activations
  are alive and the module being run forward or backward adds its working memory;
- the optimizer step, when activations are gone but the step's temporaries exist.

Everything here is a pure function of the configuration; rendering lives elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtune.config.derived import Chunk, Derived
from memtune.estimate import activations as act
from memtune.estimate.flavour import Flavour, flavour_of
from memtune.estimate.params import ParamCounts, chunk_params
from memtune.estimate.peft import adapter_activations, adapter_params
from memtune.estimate.schedule import in_flight
from memtune.estimate.state import ModelState, model_state

CUBLAS_WORKSPACE = 32 * 2**20  # one per (handle, stream) on Hopper and Blackwell, inside the allocator


@dataclass(frozen=True)
class EstimateOptions:
    """Inputs that are not part of the training configuration."""

    moe_routing_imbalance: float = 1.0  # tokens the hottest expert rank gets / the balanced share


@dataclass
class ChunkActivations:
    """One microbatch of one model chunk: what it keeps and its worst working set."""

    saved: act.Saved
    layers: int

    @property
    def total(self) -> float:
        return self.saved.total


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


def layer_saved(d: Derived, x: act.Dims, fl: Flavour, index: int, options: EstimateOptions) -> act.Saved:
    saved = act.transformer_layer(d, x, fl, d.moe_layer_pattern[index], options.moe_routing_imbalance)
    for name, nbytes in adapter_activations(d, x, d.moe_layer_pattern[index]).items():
        saved.add(name, nbytes)
    return saved


def chunk_activations(d: Derived, chunk: Chunk, options: EstimateOptions) -> ChunkActivations:
    """Activations of one microbatch in one chunk, with full recompute and offload applied."""
    x, fl, m = act.dims_of(d), flavour_of(d), d.model
    layers = [layer_saved(d, x, fl, i, options) for i in chunk.layers]
    layers += [layer_saved(d, x, fl, chunk.layers[-1] if chunk.layers else 0, options) for _ in range(chunk.mtp_layers)]
    saved = act.Saved()
    full = m.recompute_granularity == "full"
    k = m.recompute_num_layers or 1
    if full and m.recompute_method == "uniform":
        groups = [layers[i : i + k] for i in range(0, len(layers), k)]
        for group in groups:
            saved.add("recompute.checkpoint_inputs", act.layer_input(x) / (d.tp if m.distribute_saved_activations else 1))
            # Backward replays one whole group: its full activations exist at once.
            replay = sum(layer.total for layer in group)
            saved.bwd_transient = max(saved.bwd_transient, replay + max(layer.bwd_transient for layer in group))
            saved.fwd_transient = max(saved.fwd_transient, max(layer.fwd_transient for layer in group))
    else:
        checkpointed = min(k, len(layers)) if full else 0
        offloaded = min(m.cpu_offloading_num_layers, len(layers)) if m.cpu_offloading and m.cpu_offloading_activations else 0
        for i, layer in enumerate(layers):
            if i < checkpointed:
                saved.add("recompute.checkpoint_inputs", act.layer_input(x))
                saved.bwd_transient = max(saved.bwd_transient, layer.total + layer.bwd_transient)
                saved.fwd_transient = max(saved.fwd_transient, layer.fwd_transient)
            elif i < offloaded:
                # Offloaded layers leave only the layer in transfer on the device.
                saved.fwd_transient = max(saved.fwd_transient, layer.total + layer.fwd_transient)
                saved.bwd_transient = max(saved.bwd_transient, layer.total + layer.bwd_transient)
            else:
                saved.merge(layer, "decoder.")
    if chunk.has_embedding:
        saved.merge(act.embedding(d, x))
    if chunk.has_output:
        saved.merge(act.output_and_loss(d, x))
    elif d.pp > 1 and fl.pipeline_outputs_kept:
        # The schedule keeps each sent output for backward unless it deallocates it.
        saved.add("pipeline.output_tensor", act.layer_input(x))
    return ChunkActivations(saved=saved, layers=len(chunk.layers))


def persistent_buffers(d: Derived, fl: Flavour) -> float:
    """Workspaces that, once allocated, stay: the cuBLAS workspace and Megatron's global buffer.

    Megatron's global memory buffer is one bf16 tensor grown to the largest request: the
    sequence-parallel all-gather of a linear's input, or the unfused attention's score matrix.
    """
    x = act.dims_of(d)
    largest = 0.0
    if x.sp:
        largest = act.BF16 * x.tokens * x.hidden
    if not fl.flash_attention:
        heads = d.model.num_attention_heads / d.tp
        largest = max(largest, act.BF16 * x.mbs * heads * x.seq * x.seq)
    return CUBLAS_WORKSPACE + largest


def rank_estimate(d: Derived, pp_rank: int, options: EstimateOptions) -> RankEstimate:
    chunks = d.chunks[pp_rank]
    fl = flavour_of(d)
    local = sum((chunk_params(d, c) for c in chunks), ParamCounts())
    adapters = sum(adapter_params(d, c.layers) for c in chunks)
    state = model_state(d, local, adapters, sum(len(c.layers) for c in chunks))
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
        worst_transient = max(worst_transient, acts.saved.fwd_transient, acts.saved.bwd_transient)
    buffers = persistent_buffers(d, fl)
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
