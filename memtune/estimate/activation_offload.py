"""Fine-grained activation offloading (``model.fine_grained_activation_offloading``), modeled
from megatron-core 0.19.2's source (``pipeline_parallel/fine_grained_activation_offload.py`` and
the modules that call it), and checked against runs of it on the local spec (``aoff-`` in
benchmarks/measured/; the Transformer Engine spec's groups come from the source alone).

Each module named in ``offload_modules`` opens a *group* in every transformer layer: the tensors
autograd saves inside the module (never parameters) are copied at the group's end (its commit)
to pinned host tensors and their device copies freed, except tensors of fewer than
``min_offloaded_tensor_size`` elements, which stay. A group exists only where its module does:
``attn_norm`` needs a separate input norm (the local spec, or multi-latent attention; the
Transformer Engine spec fuses it into the QKV linear, whose group then holds the norm's input),
``mlp_norm`` a separate pre-MLP norm (local spec, or an MoE layer), ``expert_fc1``, ``moe_act``
and ``fused_group_mlp`` the grouped-GEMM experts, and ``core_attn`` an attention that is not
checkpointed.

After the first (warm-up) iteration, which offloads every group:

- the last group of each module name in the first microbatch to run backward stays on the
  device, and on the last pipeline stage (where each microbatch's backward follows its forward)
  every microbatch keeps its last group of each name;
- of the groups still eligible in a microbatch (with something to offload), the last
  ``int(n * (1 - activation_offload_fraction))`` in forward order stay on the device.

In backward, each group's start (the end of its backward) reloads the most recently offloaded
group still on the host, whether or not the group itself was offloaded: reloads run ahead by the
number of groups kept on the device, and once a microbatch has nothing left to reload they fetch
the next microbatch's. A group not yet reloaded when needed is reloaded on demand. A reload
issued at a group's start meets neither that module's working set nor its saved tensors, which
autograd has freed by then (measured: counting them made an unfused attention's peak 12% high).

Host: the pinned tensors come from a pool keyed by shape and dtype that only grows; the warm-up
iteration offloads every group of every in-flight microbatch, so the pool holds all of them, each
tensor rounded up to a power of two by PyTorch's caching host allocator. A saved view is copied
at its own size (v, a view of the QKV output, copies v alone but frees the whole output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.estimate import activations as act
from memtune.estimate.flavour import Flavour

# The order in which one layer opens (start) and closes (commit) its groups in forward.
_LAYER_EVENTS = (
    ("start", "attn_norm"),
    ("start", "qkv_linear"),
    ("commit", "qkv_linear"),
    ("start", "core_attn"),
    ("commit", "core_attn"),
    ("start", "attn_proj"),
    ("commit", "attn_proj"),
    ("commit", "attn_norm"),
    ("start", "mlp_norm"),
    ("start", "expert_fc1"),
    ("commit", "expert_fc1"),
    ("start", "moe_act"),
    ("commit", "moe_act"),
    ("start", "fused_group_mlp"),
    ("commit", "fused_group_mlp"),
    ("commit", "mlp_norm"),
)

# Multi-latent attention's QKV group. Counted on the H200 (docs/preflight.md): its input, saved
# by the query's and the latent's down projections, and the latent norm's input go to the host;
# the up projections' inputs and outputs leave the device with them but are never copied.
_MLA_QKV = (
    "linear_q_down_proj.input",
    "q_layernorm.input",
    "linear_q_up_proj.input",
    "kv_layernorm.input",
    "linear_kv_up_proj.input",
    "q_up.output",
    "kv_up.output",
)
_MLA_QKV_NOT_COPIED = ("linear_q_up_proj.input", "linear_kv_up_proj.input", "q_up.output", "kv_up.output")
_EXPERT_ACTIVATION = (
    "experts.fc1_output",
    "experts.activation_gate",
    "experts.activation_linear",
    "experts.relu_output",
    "experts.probs_scaled_input",
)


@dataclass(frozen=True)
class Group:
    """One module's group in one layer."""

    name: str
    layer: int  # position of the layer among the chunk's offloadable layers
    tensors: dict[str, float]  # device bytes it can move to the host, by the layer's tensor name
    host_copy: float = 0.0  # bytes it copies to the host while another module keeps the device copy
    pinned: float = 0.0  # pinned host bytes of its copies, each rounded up to a power of two

    @property
    def device(self) -> float:
        return sum(self.tensors.values())


@dataclass
class Variant:
    """One microbatch's offload under one policy: device bytes moved per layer and the extra
    device bytes at the worst moment of each layer's forward and backward.

    A layer's backward has two kinds of moment. While a module's backward runs, its tensors
    are on the device (kept, reloaded ahead or reloaded on demand) beside the layer's own
    working set (``bwd_extra``). When it has finished, autograd has freed its saved tensors and
    the group's start marker reloads the next group: the layer's working set is gone, and so
    are the tensors of the groups it kept on the device (``bwd_after_extra``, net of them)."""

    offloaded: list[dict[str, float]]  # per layer, device bytes on the host by tensor name
    fwd_extra: list[float]
    bwd_extra: list[float]
    bwd_after_extra: list[float]
    after_backward: float = 0.0  # reloaded bytes still on the device when the layers' backward ends

    @property
    def total(self) -> float:
        return sum(sum(layer.values()) for layer in self.offloaded)


@dataclass
class ChunkOffload:
    """A chunk's offload: the microbatch that keeps the most on the device (the first to run
    backward, or any on the last stage), the others, and pinned host bytes per microbatch."""

    first: Variant
    other: Variant
    first_pipelined: Variant  # ``first`` while a later microbatch waits for its backward
    other_pipelined: Variant
    host_pinned: float = 0.0
    groups: list[Group] = field(default_factory=list)


@dataclass(frozen=True)
class SavedPart:
    """One tensor autograd saves under a layer's tensor name: the device bytes its offload
    frees, the bytes its host copy takes and its element count (what the size threshold reads)."""

    device: float
    host: float
    numel: float


def _saved_parts(d: Derived, fl: Flavour, name: str, nbytes: float) -> list[SavedPart]:
    """The tensors behind one saved-tensor name of a layer (activations.py names them).

    ``core_attention.qkv`` is the QKV projection's output, kept alive by the view of it that
    the attention saves as v: offloading that view copies only v, frees the whole output, and
    the threshold reads v's size. Multi-latent attention saves q, k and v as tensors of their
    own, and both its down projections save its input, copied twice. Norm statistics are one
    (RMSNorm) or two (LayerNorm) fp32 tensors.
    """
    m = d.model
    width = DTYPE_BYTES[d.activation_dtype]
    if name.endswith("core_attention.qkv"):
        x = act.dims_of(d)
        heads = m.num_attention_heads / d.tp
        if m.multi_latent_attention:
            qk = m.qk_head_dim + m.qk_pos_emb_head_dim
            widths = (heads * qk, heads * qk, heads * m.v_head_dim)
            return [SavedPart(width * x.tokens * w, width * x.tokens * w, x.tokens * w) for w in widths]
        value_heads = d.query_groups_per_tp_rank if fl.flash_attention else heads
        value = x.tokens * value_heads * d.kv_channels
        return [SavedPart(nbytes, width * value, value)]
    if m.multi_latent_attention and name.endswith("linear_q_down_proj.input"):
        return [SavedPart(nbytes, nbytes, nbytes / width), SavedPart(0.0, nbytes, nbytes / width)]
    if m.multi_latent_attention and name.endswith(_MLA_QKV_NOT_COPIED):
        return [SavedPart(nbytes, 0.0, nbytes / width)]
    if name.endswith(".stats"):
        count = 2 if m.normalization == "LayerNorm" else 1
        return [SavedPart(nbytes / count, nbytes / count, nbytes / count / act.FP32)] * count
    size: float = act.FP32 if name.endswith("softmax_lse") else width
    if fl.fp8_activations and name.endswith(".input") and "layernorm" not in name:
        size = 1
    elif fl.transformer_engine and not m.multi_latent_attention:
        # the fused attention's own copies (Derived.attention_saved_input/output_bytes wide)
        if name.endswith(("core_attention.q", "core_attention.k", "core_attention.v")):
            size = d.attention_saved_input_bytes
        elif name.endswith("core_attention.output"):
            size = d.attention_saved_output_bytes
    return [SavedPart(nbytes, nbytes, nbytes / size)]


def _pow2(nbytes: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(nbytes, 1))))


def _module_tensors(d: Derived, fl: Flavour, name: str, saved: act.Saved, is_moe: bool) -> list[str] | None:
    """The layer's tensor names a module's group saves; None where the group does not exist."""
    m = d.model
    te, mla = fl.transformer_engine, m.multi_latent_attention
    attention = "self_attention."
    if name == "attn_norm":
        return ["input_layernorm.input", "input_layernorm.stats"] if d.separate_input_norm else None
    if name == "qkv_linear":
        if mla:
            return [attention + t for t in _MLA_QKV]
        names = [attention + "linear_qkv.input", attention + "q_layernorm.input"]
        # The Transformer Engine spec's LayerNormLinear keeps the norm's input and statistics.
        return names if d.separate_input_norm else ["input_layernorm.input", "input_layernorm.stats", *names]
    if name == "core_attn":
        if "core_attn" in d.recompute_modules:
            return None  # the checkpointed attention bypasses the offload context
        return [t for t in saved.tensors if t.startswith(attention + "core_attention.")]
    if name == "attn_proj":
        return [attention + "linear_proj.input"]
    if name == "mlp_norm":
        return ["pre_mlp_layernorm.input", "pre_mlp_layernorm.stats"] if not te or is_moe else None
    if not is_moe or not m.moe_grouped_gemm:
        return None  # only the grouped-GEMM experts open these groups
    if name == "expert_fc1":
        return ["mlp.experts.input"]
    if name == "moe_act":
        return ["mlp." + t for t in _EXPERT_ACTIVATION]
    return [t for t in saved.tensors if t.startswith("mlp.experts.")]  # fused_group_mlp


def layer_groups(d: Derived, fl: Flavour, saved: act.Saved, is_moe: bool, layer: int) -> list[Group]:
    """The groups one layer opens, in forward start order, with what each can move."""
    wanted = set(d.model.offload_modules or ())
    minimum = d.model.min_offloaded_tensor_size
    groups = []
    for kind, name in _LAYER_EVENTS:
        if kind != "start" or name not in wanted:
            continue
        names = _module_tensors(d, fl, name, saved, is_moe)
        if names is None:
            continue
        tensors, pinned, host_copy = {}, 0.0, 0.0
        for tensor in names:
            nbytes = saved.tensors.get(tensor, 0.0)
            if not nbytes:
                continue
            moved = [part for part in _saved_parts(d, fl, tensor, nbytes) if part.numel >= minimum]
            if moved:
                tensors[tensor] = sum(part.device for part in moved)
                pinned += sum(_pow2(part.host) for part in moved if part.host)
        if name == "core_attn" and fl.flash_attention and tensors:
            # The flash kernel also keeps its output, the view linear_proj keeps as its input:
            # copied to the host, but the device copy stays for linear_proj.
            x = act.dims_of(d)
            heads = d.model.num_attention_heads / d.tp
            width = d.model.v_head_dim if d.model.multi_latent_attention else d.kv_channels
            output = x.activation_bytes * x.tokens * heads * width
            if (
                "self_attention.core_attention.output" not in saved.tensors
                and output / x.activation_bytes >= minimum
            ):
                host_copy = output
                pinned += _pow2(output)
        groups.append(Group(name, layer, tensors, host_copy, pinned))
    return groups


def _policy(groups: list[Group], fraction: float, margin: bool, last_stage: bool) -> list[bool]:
    """Which groups (in start order) one microbatch offloads in steady state."""
    offload = [True] * len(groups)
    last_of_name = {g.name: i for i, g in enumerate(groups)}
    if margin:
        for i in last_of_name.values():
            offload[i] = False
    eligible = [i for i, g in enumerate(groups) if offload[i] and g.device + g.host_copy > 0]
    disabled = int(len(eligible) * (1 - fraction))
    for i in eligible[len(eligible) - disabled :] if disabled else []:
        offload[i] = False
    if last_stage:
        # Its backward comes next: the last group of each name is not worth the round trip.
        for i in last_of_name.values():
            offload[i] = False
    return offload


def _events(groups: list[Group], layers: int) -> list[tuple[str, int]]:
    """Forward start/commit events of the chunk's groups, as (kind, group index)."""
    by_layer: dict[tuple[int, str], int] = {(g.layer, g.name): i for i, g in enumerate(groups)}
    events = []
    for layer in range(layers):
        for kind, name in _LAYER_EVENTS:
            index = by_layer.get((layer, name))
            if index is not None:
                events.append((kind, index))
    return events


def _walk(groups: list[Group], offload: list[bool], layers: int, next_stack: list[float] | None) -> Variant:
    events = _events(groups, layers)
    offloaded: list[dict[str, float]] = [{} for _ in range(layers)]
    for g, moved in zip(groups, offload):
        if moved:
            for name, nbytes in g.tensors.items():
                offloaded[g.layer][name] = offloaded[g.layer].get(name, 0.0) + nbytes
    fwd, bwd, after = [0.0] * layers, [0.0] * layers, [-math.inf] * layers
    # Forward: an offloaded group's tensors are on the device from its start to its commit.
    alive: dict[int, float] = {}
    for kind, i in events:
        if kind == "start" and offload[i]:
            alive[i] = groups[i].device
        fwd[groups[i].layer] = max(fwd[groups[i].layer], sum(alive.values()))
        if kind == "commit":
            alive.pop(i, None)
    stack = [i for kind, i in events if kind == "commit" and offload[i]]
    pending = list(next_stack or [])
    consumed: set[int] = set()
    reloaded: dict[int, float] = {}
    ahead = 0.0  # the next microbatch's groups reloaded early
    freed_kept = [0.0] * layers  # the layer's kept groups whose backward has finished
    for kind, i in reversed(events):
        layer = groups[i].layer
        if kind == "commit":
            bwd[layer] = max(bwd[layer], sum(reloaded.values()) + ahead)
            continue
        # The group's module backward reads its tensors (on demand if not reloaded) ...
        on_demand = groups[i].device if offload[i] and i not in reloaded else 0.0
        bwd[layer] = max(bwd[layer], sum(reloaded.values()) + on_demand + ahead)
        reloaded.pop(i, None)
        consumed.add(i)
        if not offload[i]:
            freed_kept[layer] += groups[i].device
        # ... then its start marker reloads the latest offloaded group still on the host.
        if stack:
            top = stack.pop()
            if top not in consumed:
                reloaded[top] = groups[top].device
        elif pending:
            ahead += pending.pop()
        after[layer] = max(after[layer], sum(reloaded.values()) + ahead - freed_kept[layer])
    return Variant(offloaded, fwd, bwd, after, sum(reloaded.values()) + ahead)


def chunk_offload(
    d: Derived, fl: Flavour, layers: list[tuple[act.Saved, bool]], last_stage: bool
) -> ChunkOffload:
    """The offload of one chunk's offloadable layers, given as (saved tensors, is MoE) in order."""
    groups = [g for index, (saved, moe) in enumerate(layers) for g in layer_groups(d, fl, saved, moe, index)]
    fraction = d.model.activation_offload_fraction
    count = len(layers)
    if last_stage:
        # The first microbatch of the schedule, or any later one: whichever keeps more.
        candidates = [_policy(groups, fraction, True, True), _policy(groups, fraction, False, True)]
        first = max(candidates, key=lambda o: -sum(g.device for g, moved in zip(groups, o) if moved))
        other = candidates[1]
    else:
        first = _policy(groups, fraction, True, False)
        other = _policy(groups, fraction, False, False)
    events = _events(groups, count)
    next_stack = [groups[i].device for kind, i in events if kind == "commit" and other[i]]
    return ChunkOffload(
        first=_walk(groups, first, count, None),
        other=_walk(groups, other, count, None),
        first_pipelined=_walk(groups, first, count, next_stack),
        other_pipelined=_walk(groups, other, count, next_stack),
        host_pinned=sum(g.pinned for g in groups),
        groups=groups,
    )


def kept_on_device(saved: act.Saved, offloaded: dict[str, float]) -> act.Saved:
    """A layer's saved tensors less those its groups moved to the host."""
    kept = act.Saved(fwd_transient=saved.fwd_transient, bwd_transient=saved.bwd_transient)
    for name, nbytes in saved.tensors.items():
        kept.add(name, nbytes - offloaded.get(name, 0.0))
    return kept
