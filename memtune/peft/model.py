"""The one LoRA model: which adapters a job has, their shapes on one rank, whether each can
re-gather its sequence-parallel input, and what re-gathering saves.

``memtune.check`` (the PFT rules, SEQ004), ``memtune.estimate`` and the torch implementation in
``memtune.peft`` all read these facts from here. Pure and torch-free: it imports
``memtune.config`` only.

Placement follows Megatron-Bridge's ``LoRA`` transform (docs/peft.md, "Layout"):

- a column-parallel base (``linear_qkv``, ``linear_fc1``) gets LoRA-A ``[dim/t, in]`` (A's rank
  dimension is split and its output gathered) and LoRA-B ``[out/t, dim]``;
- a row-parallel base (``linear_proj``, ``linear_fc2``) gets LoRA-A ``[dim, in/t]`` (its
  output all-reduced) and LoRA-B ``[out/t, dim]`` (its output gathered);
- ``t`` is the tensor-parallel size, or the expert tensor-parallel size for routed experts;
- routed experts run as separate linears per local expert without grouped GEMM (one adapter
  each); with Transformer Engine's grouped GEMM one adapter is shared by the rank's local experts;
  the legacy grouped GEMM without Transformer Engine has no linear modules, so no adapters;
- shared experts are ordinary TP-sharded linears (their adapters are not expert adapters).

Re-gather (docs/peft.md, "Re-gather"): under TP + SP a column-parallel adapter's default path
gathers the sequence-sharded norm output to the full local sequence and LoRA-A keeps that
gathered ``[s, b, h]`` tensor until backward. Re-gathering keeps the local ``[s/t, b, h]``
shard instead. Megatron-Core's frozen base linears keep no input, so that shard is the
adapter's own: the saving is ``2·s·b·h·(1-1/t)`` bytes per adapter per microbatch in flight
(``s`` per CP rank), less one shared gather buffer of ``2·s·b·h`` bytes per rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    # Annotations only: the measurement subprocess imports this module where pydantic (which
    # memtune.config needs) may be absent.
    from memtune.config.derived import Derived

COLUMN_TARGETS = ("linear_qkv", "linear_fc1")
ROW_TARGETS = ("linear_proj", "linear_fc2")
ACTIVATION_BYTES = 2  # 16-bit activations, as the estimator assumes throughout

LayerKind = Literal["dense", "moe"]
AdapterKind = Literal["dense", "routed_expert", "shared_expert"]

# Why an adapter cannot re-gather. Config-level reasons first (the order in which they are
# tried, first one wins), then the ones only a running model can tell.
ROW_PARALLEL = "the adapter is row-parallel"
TP_IS_ONE = "sequence-parallel communication is disabled: tensor parallel size is one"
SP_OFF = "sequence-parallel communication is disabled"
EXPERT = "expert adapters never receive the flag"
A2A = "all-to-all adapters use a separate path"
CPU_OFFLOAD = "CPU activation offload is enabled"
CUDA_GRAPHS = "CUDA graphs are enabled"
FULL_RECOMPUTE = "full-layer activation recompute already covers the adapter"
MLP_RECOMPUTE = "selective MLP recompute already covers linear_fc1"
A_FROZEN = "the LoRA-A weight is frozen"
NOT_IDENTITY = "the adapter activation is not identity"
NO_GRAD = "inference or no-grad forward (nothing is kept for backward)"


@dataclass(frozen=True)
class Adapter:
    """One kind of LoRA adapter: the adapter on ``target`` in every layer of ``layer_kind``.

    Shapes are the weights one rank holds (rows x columns, as ``nn.Linear`` stores them).
    """

    target: str
    label: str  # how messages name it: the target, with the layer or expert kind where needed
    kind: AdapterKind
    layer_kind: LayerKind
    parallel: Literal["column", "row"]
    in_features: int  # of the whole base linear
    out_features: int
    split: int  # the TP (or expert TP) size both weights are split over
    copies: int  # adapters of this kind per layer on one rank (local experts)
    a_shape: tuple[int, int]
    b_shape: tuple[int, int]
    regather_blocker: str | None  # why it cannot re-gather; None: it would

    @property
    def params(self) -> int:
        """Parameters of this kind in one layer on one rank."""
        return self.copies * (self.a_shape[0] * self.a_shape[1] + self.b_shape[0] * self.b_shape[1])

    @property
    def is_expert(self) -> bool:
        """Megatron's DDP keeps routed-expert parameters in the expert buffers (sharded over expert DP)."""
        return self.kind == "routed_expert"


def _shapes(parallel: str, dim: int, fan_in: int, fan_out: int, split: int) -> tuple[tuple[int, int], ...]:
    if parallel == "column":
        return (dim // split, fan_in), (fan_out // split, dim)
    return (dim, fan_in // split), (fan_out // split, dim)


@dataclass(frozen=True)
class RegatherFacts:
    """What decides whether one adapter can re-gather: read from a config (``regather_blocker``)
    or from a running model (``memtune.peft.lora``)."""

    target: str
    kind: AdapterKind
    tp: int
    sequence_parallel: bool
    shared_expert_overlap: bool = False
    a2a: bool = False
    cpu_activation_offload: bool = False
    cuda_graphs: bool = False
    full_recompute: bool = False
    mlp_recompute: bool = False


def first_blocker(f: RegatherFacts) -> str | None:
    """The first reason, in Megatron-Bridge's order, that the adapter cannot re-gather; None if it can."""
    if f.target in ROW_TARGETS:
        return ROW_PARALLEL
    if f.tp == 1:
        return TP_IS_ONE
    if not f.sequence_parallel:
        return SP_OFF
    if f.kind == "routed_expert":
        return EXPERT
    if f.kind == "shared_expert" and f.shared_expert_overlap:
        # Overlapped shared experts gather their input themselves; the base linear's
        # sequence-parallel communication is off, so the adapter's is too.
        return SP_OFF
    if f.a2a:
        return A2A
    if f.cpu_activation_offload:
        return CPU_OFFLOAD
    if f.cuda_graphs:
        return CUDA_GRAPHS
    if f.full_recompute:
        return FULL_RECOMPUTE
    if f.target == "linear_fc1" and f.mlp_recompute:
        return MLP_RECOMPUTE
    return None


def regather_blocker(d: Derived, target: str, kind: AdapterKind) -> str | None:
    """The first config-level reason the adapter cannot re-gather its input, or None."""
    m = d.model
    return first_blocker(
        RegatherFacts(
            target=target,
            kind=kind,
            tp=d.tp,
            sequence_parallel=d.sequence_parallel,
            shared_expert_overlap=m.moe_shared_expert_overlap,
            a2a=d.job.peft is not None and d.job.peft.a2a_experimental,
            cpu_activation_offload=m.cpu_offloading and m.cpu_offloading_activations,
            cuda_graphs=d.cuda_graphs,
            full_recompute=m.recompute_granularity == "full",
            mlp_recompute="mlp" in d.recompute_modules,
        )
    )


def _label(d: Derived, target: str, kind: AdapterKind) -> str:
    if kind == "routed_expert":
        return f"{target} (routed experts)"
    if kind == "shared_expert":
        return f"{target} (shared experts)"
    if d.is_moe and target in ("linear_fc1", "linear_fc2"):
        return f"{target} (dense layers)"
    return target


def _routed_expert_copies(d: Derived) -> int:
    m = d.model
    if not m.moe_grouped_gemm:
        return d.local_experts
    return 1 if d.transformer_engine else 0


def adapters(d: Derived) -> tuple[Adapter, ...]:
    """Every adapter kind the job's LoRA creates (empty without ``peft``)."""
    peft = d.job.peft
    if peft is None:
        return ()
    m, h, dim = d.model, d.model.hidden_size, peft.dim
    gate = d.fc1_width_factor
    layer_kinds: list[LayerKind] = []
    if not all(d.moe_layer_pattern):
        layer_kinds.append("dense")
    if any(d.moe_layer_pattern):
        layer_kinds.append("moe")

    # (target, kind, layer kind, fan_in, fan_out, split, copies)
    found: list[tuple[str, AdapterKind, LayerKind, int, int, int, int]] = []
    for layer_kind in layer_kinds:
        if m.multi_latent_attention:
            attn_out = m.num_attention_heads * m.v_head_dim
        else:
            attn_out = m.num_attention_heads * d.kv_channels
            qkv = (m.num_attention_heads + 2 * d.num_query_groups) * d.kv_channels
            found.append(("linear_qkv", "dense", layer_kind, h, qkv, d.tp, 1))
        found.append(("linear_proj", "dense", layer_kind, attn_out, h, d.tp, 1))
        if layer_kind == "dense":
            f = d.ffn_hidden_size
            found.append(("linear_fc1", "dense", layer_kind, h, gate * f, d.tp, 1))
            found.append(("linear_fc2", "dense", layer_kind, f, h, d.tp, 1))
            continue
        copies, f = _routed_expert_copies(d), d.moe_ffn_hidden_size
        if copies:
            found.append(("linear_fc1", "routed_expert", layer_kind, h, gate * f, d.etp, copies))
            found.append(("linear_fc2", "routed_expert", layer_kind, f, h, d.etp, copies))
        if m.moe_shared_expert_intermediate_size:
            f = m.moe_shared_expert_intermediate_size
            found.append(("linear_fc1", "shared_expert", layer_kind, h, gate * f, d.tp, 1))
            found.append(("linear_fc2", "shared_expert", layer_kind, f, h, d.tp, 1))

    out = []
    for target, kind, layer_kind, fan_in, fan_out, split, copies in found:
        if target not in peft.target_modules:
            continue
        parallel: Literal["column", "row"] = "column" if target in COLUMN_TARGETS else "row"
        a_shape, b_shape = _shapes(parallel, dim, fan_in, fan_out, split)
        out.append(
            Adapter(
                target=target,
                label=_label(d, target, kind),
                kind=kind,
                layer_kind=layer_kind,
                parallel=parallel,
                in_features=fan_in,
                out_features=fan_out,
                split=split,
                copies=copies,
                a_shape=a_shape,
                b_shape=b_shape,
                regather_blocker=regather_blocker(d, target, kind),
            )
        )
    return tuple(out)


def adapters_in_layer(d: Derived, is_moe_layer: bool) -> tuple[Adapter, ...]:
    kind: LayerKind = "moe" if is_moe_layer else "dense"
    return tuple(a for a in adapters(d) if a.layer_kind == kind)


def regathers(d: Derived, adapter: Adapter) -> bool:
    """Whether the adapter re-gathers in this job (asked for and eligible)."""
    peft = d.job.peft
    return peft is not None and peft.sequence_parallel_input_regather and adapter.regather_blocker is None


@dataclass(frozen=True)
class AdapterCollective:
    """One TP collective an adapter runs per microbatch, on the compute stream."""

    backward: bool  # in the backward pass (else the forward)
    # an all-to-all moves [s/CP, b, h/t] from each rank, a 1/t share of the activation
    op: Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]
    activation: bool  # of a [s/CP, b, h] activation (``gathered_input_bytes``); else of LoRA-A's output


def adapter_collectives(d: Derived, adapter: Adapter) -> tuple[AdapterCollective, ...]:
    """The TP collectives one adapter of ``adapter``'s kind runs per microbatch, as
    Megatron-Bridge's ``ParallelLinearAdapter`` runs them (``memtune/peft/modules.py`` alike).

    Column adapter: LoRA-A's output is gathered over its split rank dimension (its gradient
    all-reduced). Under SP its input is gathered over the sequence, the gradient reduce-scattered
    back, unless it arrives gathered (``input_arrives_gathered``: Transformer Engine's
    gathered layernorm output, an overlapped shared expert's input); one that re-gathers gathers its shard itself, again
    in the backward, and reduce-scatters the gradient. Without SP the input gradient is
    all-reduced. Row adapter: LoRA-A's partial output is all-reduced (its gradient too), LoRA-B's
    output gathered to the full width and, under SP, the gradient of its sequence shard gathered;
    with ``a2a_experimental`` under SP, LoRA-B's hidden-sharded output goes to its sequence shard
    by one all-to-all, and its gradient back by another (``all2all_hp2sp``).
    Routed experts' adapters leave their TP communication to the token dispatcher: none here.
    """
    if adapter.split <= 1 or adapter.kind == "routed_expert":
        return ()
    c = AdapterCollective
    sp = d.sequence_parallel
    if adapter.parallel == "row":
        out = [c(False, "all_reduce", False), c(True, "all_reduce", False)]
        if d.lora_row_all_to_all:
            return (*out, c(False, "all_to_all", True), c(True, "all_to_all", True))
        out.append(c(False, "all_gather", True))
        return (*out, c(True, "all_gather", True)) if sp else tuple(out)
    out = [c(False, "all_gather", False), c(True, "all_reduce", False)]
    if not sp:
        out.append(c(True, "all_reduce", True))
    elif regathers(d, adapter):
        out += [c(False, "all_gather", True), c(True, "all_gather", True), c(True, "reduce_scatter", True)]
    elif not input_arrives_gathered(d, adapter):
        out += [c(False, "all_gather", True), c(True, "reduce_scatter", True)]
    return tuple(out)


def input_arrives_gathered(d: Derived, adapter: Adapter) -> bool:
    """A column adapter whose input is already gathered over the sequence when it gets it: a
    dense layer's under ``Derived.lora_input_gathered_by_te``, an overlapped shared expert's
    (its base linear receives the gathered input)."""
    if adapter.kind == "shared_expert":
        return d.model.moe_shared_expert_overlap
    return adapter.kind == "dense" and d.lora_input_gathered_by_te


def gathered_input_bytes(d: Derived) -> int:
    """The full-sequence input of a column-parallel linear, per microbatch: ``2·(s/CP)·b·h`` bytes."""
    return ACTIVATION_BYTES * d.model.seq_length // d.cp * d.micro_batch_size * d.model.hidden_size


def kept_input_bytes(d: Derived, adapter: Adapter) -> float:
    """Bytes of input a dense or shared-expert column adapter keeps for LoRA-A's weight gradient,
    per microbatch.

    Megatron-Core's frozen base linears keep no input (``linear_with_frozen_weight``), so this is
    the adapter's own: the gathered full-sequence input on the default path under SP, the local
    ``1/t`` shard when it re-gathers, the whole input without SP. Zero inside selective ``mlp``
    recompute for ``linear_fc1`` (the checkpoint keeps its own input) and for overlapped shared
    experts (their base linear receives the gathered input).
    """
    if adapter.parallel != "column" or adapter.kind == "routed_expert":
        return 0.0
    if adapter.target == "linear_fc1" and "mlp" in d.recompute_modules:
        return 0.0
    if adapter.kind == "shared_expert" and d.model.moe_shared_expert_overlap:
        return 0.0
    if regathers(d, adapter):
        return gathered_input_bytes(d) / d.tp
    return float(gathered_input_bytes(d))


def regather_saving_bytes(d: Derived, adapter: Adapter) -> float:
    """What turning re-gather on saves for this adapter per microbatch in flight (0 if it cannot
    re-gather): the gathered input less the shard it keeps instead, ``2·(s/CP)·b·h·(1-1/t)``.

    Re-gathering also needs a gather buffer of ``2·(s/CP)·b·h`` bytes once per rank (Megatron's
    global memory buffer, which frozen base linears do not otherwise allocate):
    ``regather_buffer_bytes``.
    """
    if adapter.regather_blocker is not None:
        return 0.0
    return gathered_input_bytes(d) * (1 - 1 / d.tp)


def regather_buffer_bytes(d: Derived) -> int:
    """The one gather buffer re-gathering adapters share (0 when none re-gathers)."""
    return gathered_input_bytes(d) if any(regathers(d, a) for a in adapters(d)) else 0


def inputs_sp_leaves_whole(d: Derived) -> list[str]:
    """Column linears of a dense layer whose input sequence parallelism does not shard in a LoRA
    job with SP on (``d``): frozen base linears keep no input at all, and an adapter that does
    not re-gather keeps its input gathered to the full sequence. Only an adapter that
    re-gathers keeps a ``1/t`` shard, as a trainable linear would."""
    if d.job.peft is None:
        return []
    positions = ["linear_fc1"] if d.model.multi_latent_attention else ["linear_qkv", "linear_fc1"]
    regathering = {a.target for a in adapters_in_layer(d, False) if a.kind == "dense" and regathers(d, a)}
    return [p for p in positions if p not in regathering]


@dataclass(frozen=True)
class AdapterParams:
    """LoRA parameters one rank holds, split the way Megatron's DDP buffers split them."""

    dense: float = 0.0
    expert: float = 0.0

    @property
    def total(self) -> float:
        return self.dense + self.expert

    def __add__(self, other: AdapterParams) -> AdapterParams:
        return AdapterParams(self.dense + other.dense, self.expert + other.expert)


def adapter_params(d: Derived, layers: tuple[int, ...]) -> AdapterParams:
    """LoRA parameters one rank holds for the decoder ``layers``."""
    dense = expert = 0.0
    per_kind = {kind: adapters_in_layer(d, kind) for kind in (False, True)}
    for i in layers:
        for a in per_kind[d.moe_layer_pattern[i]]:
            if a.is_expert:
                expert += a.params
            else:
                dense += a.params
    return AdapterParams(dense, expert)


def regather_facts(
    target: str, kind: AdapterKind, tp: int, sequence_parallel: bool, config: Any, a2a: bool
) -> RegatherFacts:
    """The facts ``first_blocker`` needs, read from a running linear and its Megatron config
    (``a2a``: the LoRA's own ``a2a_experimental``)."""
    granularity = getattr(config, "recompute_granularity", None)
    modules: Iterable[str] = getattr(config, "recompute_modules", None) or ()
    graphs = getattr(config, "cuda_graph_impl", "none") not in (None, "none") or getattr(
        config, "enable_cuda_graph", False
    )
    return RegatherFacts(
        target=target,
        kind=kind,
        tp=tp,
        sequence_parallel=sequence_parallel,
        shared_expert_overlap=bool(getattr(config, "moe_shared_expert_overlap", False)),
        a2a=a2a,
        cpu_activation_offload=bool(
            getattr(config, "cpu_offloading", False) and getattr(config, "cpu_offloading_activations", False)
        ),
        cuda_graphs=bool(graphs),
        full_recompute=granularity == "full",
        mlp_recompute=granularity == "selective" and "mlp" in modules,
    )


def runtime_blocker(facts: RegatherFacts, a_trainable: bool, identity: bool, grad_mode: bool) -> str | None:
    """Config-level reasons first (memtune/peft/model.py), then what only the running model tells."""
    if facts.target in ROW_TARGETS:
        return first_blocker(facts)
    if not a_trainable:
        return A_FROZEN
    reason = first_blocker(facts)
    if reason is not None:
        return reason
    if not identity:
        return NOT_IDENTITY
    if not grad_mode:
        return NO_GRAD
    return None
