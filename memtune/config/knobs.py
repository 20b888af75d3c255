"""The knobs of a training layout as one frozen, hashable value: what ``memtune plan`` enumerates.

A :class:`Knobs` is read from a job (``Derived.knobs``) or built by the planner, and applied to a
job by ``Derived.with_knobs``; every fact that follows from the knobs (data-parallel sizes,
microbatches, sequence parallelism in effect, the layers full recompute replays, the
distributed optimizer in effect, ...) is a property of :class:`~memtune.config.derived.Derived`,
never computed from the knobs by hand. A piece of computation that depends on only some knobs
declares them as a :class:`KnobSubset` next to its code, and caches key by ``subset.key(knobs)``
(``memtune/plan/fast.py``).

Built values are validated (as torchtitan's ``ParallelDims`` is): a value no job can hold raises
:class:`~memtune.errors.InputError`. Combinations Megatron refuses (SP at TP 1, VPP without PP)
are knobs all the same; ``memtune check`` refuses them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any

from memtune.errors import InputError

if TYPE_CHECKING:
    from memtune.config.derived import Derived

RECOMPUTE_GRANULARITIES = (None, "selective", "full")
RECOMPUTE_METHODS = ("block", "uniform")
SHARDINGS = ("ddp", "distopt", "fsdp")
FSDP_STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
# Megatron-FSDP strategies that shard gradients, and so keep unsharded gradient buckets while a
# chunk runs backward (estimate/core.py, ``_with_fsdp_buckets``).
FSDP_GRADIENT_SHARDING = ("optim_grads", "optim_grads_params")
SPLITS = ("even", "accounted", "uneven", "layout")


@dataclass(frozen=True)
class Recompute:
    """Activation recomputation: Megatron's ``recompute_granularity``, ``recompute_modules``,
    ``recompute_method`` and ``recompute_num_layers``."""

    granularity: str | None = None
    """None (nothing recomputed), ``selective`` or ``full``."""
    modules: tuple[str, ...] = ()
    """Selective: the modules recomputed (Megatron's default is ``core_attn``); empty otherwise."""
    layers: int = 0
    """Full: ``recompute_num_layers`` (layers per checkpoint under ``uniform``, checkpointed
    layers per chunk under ``block``); 0 otherwise."""
    method: str = "block"
    """Full: ``block`` or ``uniform``; ``block`` otherwise."""

    def __post_init__(self) -> None:
        full = self.granularity == "full"
        if (
            self.granularity not in RECOMPUTE_GRANULARITIES
            or self.method not in RECOMPUTE_METHODS
            or (self.modules and self.granularity != "selective")
            or (full and self.layers < 1)
            or (not full and (self.layers or self.method != "block"))
        ):
            raise InputError(
                f"recompute knob {self!r}: granularity must be one of none, selective, full; modules only "
                "with selective; layers >= 1 and method block or uniform only with full"
            )

    def label(self) -> str:
        if self.granularity is None:
            return "none"
        if self.granularity == "selective":
            return "sel:" + "+".join(self.modules)
        return f"full:{self.layers}" if self.method == "block" else f"full-uniform:{self.layers}"


@dataclass(frozen=True)
class Knobs:
    """One parallel layout and its memory knobs (Megatron-Core's key names in each docstring)."""

    tp: int
    """``tensor_model_parallel_size``."""
    pp: int
    """``pipeline_model_parallel_size``."""
    vpp: int
    """Virtual stages per pipeline rank (``virtual_pipeline_model_parallel_size``, 1 without)."""
    cp: int
    """``context_parallel_size``."""
    ep: int
    """``expert_model_parallel_size``."""
    etp: int
    """Expert tensor-parallel size in effect (``expert_tensor_parallel_size``, else TP)."""
    mbs: int
    """``micro_batch_size``."""
    sp: bool
    """``sequence_parallel`` as set; ``Derived.sequence_parallel`` says whether it is in effect."""
    recompute: Recompute
    """Activation recomputation."""
    sharding: str
    """``ddp`` (neither the distributed optimizer nor Megatron-FSDP), ``distopt`` (the distributed
    optimizer) or ``fsdp`` (Megatron-FSDP with ``fsdp_strategy``)."""
    offload: float
    """``optimizer_offload_fraction`` with ``optimizer_cpu_offload``; 0 without optimizer offload."""
    act_offload: int
    """``cpu_offloading_num_layers`` with ``cpu_offloading``; 0 without."""
    regather: bool
    """LoRA's ``sequence_parallel_input_regather``; False without LoRA."""
    split: str = "even"
    """``accounted`` when the embedding and the loss count as layers in the pipeline split
    (``account_for_embedding_in_pipeline_split`` and ``..._loss_...``); ``uneven`` with explicit
    first/last stage sizes (``first_stage_layers``, ``last_stage_layers``); ``layout`` with an
    explicit ``pipeline_layout``; else ``even``."""
    fsdp_strategy: str = "optim_grads_params"
    """Megatron-FSDP's ``data_parallel_sharding_strategy`` when ``sharding`` is ``fsdp`` (the
    planner enumerates ``optim_grads_params``); ``optim_grads_params`` otherwise."""
    first_stage_layers: int = 0
    """``num_layers_in_first_pipeline_stage`` with split ``uneven`` (0: not set)."""
    last_stage_layers: int = 0
    """``num_layers_in_last_pipeline_stage`` with split ``uneven`` (0: not set)."""
    pipeline_layout: str | None = None
    """``pipeline_model_parallel_layout`` in Megatron's shorthand with split ``layout``; None otherwise."""

    def __post_init__(self) -> None:
        # One test on the common path: the planner builds a Knobs per candidate.
        if not (
            min(self.tp, self.pp, self.vpp, self.cp, self.ep, self.etp, self.mbs) >= 1
            and self.sharding in SHARDINGS
            and 0.0 <= self.offload <= 1.0
            and self.act_offload >= 0
            and self.split in SPLITS
            and self.fsdp_strategy in FSDP_STRATEGIES
            and (self.sharding == "fsdp" or self.fsdp_strategy == "optim_grads_params")
            and ((self.first_stage_layers or self.last_stage_layers) > 0) == (self.split == "uneven")
            and min(self.first_stage_layers, self.last_stage_layers) >= 0
            and (self.pipeline_layout is not None) == (self.split == "layout")
        ):
            raise InputError(self._problem())

    def _problem(self) -> str:
        sizes = {f: getattr(self, f) for f in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs")}
        bad = [f"{name} {value}" for name, value in sizes.items() if value < 1]
        if bad:
            return f"layout knobs: parallel sizes and the micro-batch must be >= 1, got {', '.join(bad)}"
        if self.sharding not in SHARDINGS:
            return f"layout knobs: sharding must be one of {', '.join(SHARDINGS)}, got {self.sharding!r}"
        if not 0.0 <= self.offload <= 1.0:
            return f"layout knobs: the optimizer offload fraction must be in [0, 1], got {self.offload}"
        if self.act_offload < 0:
            return f"layout knobs: activation-offload layers must be >= 0, got {self.act_offload}"
        if self.split not in SPLITS:
            return f"layout knobs: split must be one of {', '.join(SPLITS)}, got {self.split!r}"
        if min(self.first_stage_layers, self.last_stage_layers) < 0 or (
            (self.first_stage_layers or self.last_stage_layers) > 0
        ) != (self.split == "uneven"):
            return (
                "layout knobs: first/last stage layers must be >= 0, and one of them > 0 exactly with split "
                f"uneven; got {self.first_stage_layers}/{self.last_stage_layers} with {self.split}"
            )
        if (self.pipeline_layout is not None) != (self.split == "layout"):
            return f"layout knobs: a pipeline layout goes with split layout exactly, got {self.split}"
        return (
            f"layout knobs: fsdp_strategy must be one of {', '.join(FSDP_STRATEGIES)}, and differ from "
            f"optim_grads_params only with sharding fsdp; got {self.fsdp_strategy!r} with {self.sharding}"
        )

    # Cached: cache keys read them (``KnobSubset.key``) for every candidate the planner estimates.
    @cached_property
    def pipelined(self) -> bool:
        """More than one pipeline stage: stages send and receive activations."""
        return self.pp > 1

    @cached_property
    def fsdp_gradient_sharding(self) -> str | None:
        """The Megatron-FSDP strategy when it shards gradients (a chunk's backward then holds
        unsharded gradient buckets), else None."""
        if self.sharding == "fsdp" and self.fsdp_strategy in FSDP_GRADIENT_SHARDING:
            return self.fsdp_strategy
        return None

    def settings(self, base: Derived) -> list[tuple[str, str, Any]]:
        """(section, key, value) of every key these knobs set on the job of ``base``: the
        pipeline's dtype follows its weights'; TP communication overlap stays as the job sets
        it where the layout has sequence parallelism over a TP group, off elsewhere; with CP,
        the exchange its attention can take (``Derived.cp_comm_type_for_attention``) and a
        hierarchical exchange's group sizes (``Derived.hierarchical_cp_sizes``)."""
        job, r = base.job, self.recompute
        full = r.granularity == "full"
        fsdp = self.sharding == "fsdp"
        out: list[tuple[str, str, Any]] = [
            ("model", "tensor_model_parallel_size", self.tp),
            ("model", "pipeline_model_parallel_size", self.pp),
            ("model", "virtual_pipeline_model_parallel_size", self.vpp if self.vpp > 1 else None),
            ("model", "context_parallel_size", self.cp),
            (
                "model",
                "cp_comm_type",
                base.cp_comm_type_for_attention if self.cp > 1 else job.model.cp_comm_type,
            ),
            ("model", "hierarchical_context_parallel_sizes", base.hierarchical_cp_sizes(self.cp)),
            ("model", "sequence_parallel", self.sp),
            # TP communication overlap needs sequence parallelism over a TP group (check SEQ010):
            # the job's own setting where a layout can run it, off where it cannot
            ("model", "tp_comm_overlap", job.model.tp_comm_overlap and self.sp and self.tp > 1),
            ("model", "pipeline_dtype", base.param_dtype),
            ("model", "account_for_embedding_in_pipeline_split", self.split == "accounted"),
            ("model", "account_for_loss_in_pipeline_split", self.split == "accounted"),
            ("model", "num_layers_in_first_pipeline_stage", self.first_stage_layers or None),
            ("model", "num_layers_in_last_pipeline_stage", self.last_stage_layers or None),
            ("model", "pipeline_model_parallel_layout", self.pipeline_layout),
            ("model", "recompute_granularity", r.granularity),
            ("model", "recompute_method", r.method if full else None),
            ("model", "recompute_num_layers", r.layers if full else None),
            ("model", "recompute_modules", list(r.modules) if r.granularity == "selective" else None),
            ("model", "cpu_offloading", self.act_offload > 0),
            ("model", "cpu_offloading_num_layers", self.act_offload),
            ("train", "micro_batch_size", self.mbs),
            ("ddp", "use_distributed_optimizer", self.sharding == "distopt"),
            ("optimizer", "use_distributed_optimizer", self.sharding == "distopt"),
            ("ddp", "use_megatron_fsdp", fsdp),
            ("ddp", "data_parallel_sharding_strategy", self.fsdp_strategy if fsdp else "no_shard"),
            ("ddp", "overlap_param_gather", self.sharding != "ddp"),
            ("optimizer", "optimizer_cpu_offload", self.offload > 0),
            ("optimizer", "optimizer_offload_fraction", self.offload if self.offload > 0 else 1.0),
            ("optimizer", "use_precision_aware_optimizer", self.offload > 0),
        ]
        if job.model.num_moe_experts:
            out += [
                ("model", "expert_model_parallel_size", self.ep),
                ("model", "expert_tensor_parallel_size", self.etp),
            ]
        if job.peft is not None:
            out.append(("peft", "sequence_parallel_input_regather", self.regather))
        return out

    def label(self, moe: bool = False) -> str:
        """``TP2 PP4 VPP2 EP8 MBS1 SP``: sizes of 1 left out, but EP always for an MoE ``moe`` model."""
        parts = [f"TP{self.tp}", f"PP{self.pp}"]
        if self.vpp > 1:
            parts.append(f"VPP{self.vpp}")
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1 or moe:
            parts.append(f"EP{self.ep}")
        if self.etp != self.tp:
            parts.append(f"ETP{self.etp}")
        parts.append(f"MBS{self.mbs}")
        if self.sp:
            parts.append("SP")
        if self.split == "accounted":
            parts.append("(embedding+loss as layers)")
        elif self.split == "uneven":
            first = self.first_stage_layers or "-"
            last = self.last_stage_layers or "-"
            parts.append(f"(first/last stage {first}/{last} layers)")
        elif self.split == "layout":
            parts.append(f"(layout {self.pipeline_layout})")
        return " ".join(parts)


KNOB_NAMES = frozenset(f.name for f in fields(Knobs)) | {"pipelined", "fsdp_gradient_sharding"}


class KnobSubset:
    """The knobs one piece of computation depends on (besides the job's architecture, which is
    the same for every layout of one job); ``key(knobs)`` is the tuple of their values."""

    def __init__(self, *names: str) -> None:
        unknown = sorted(set(names) - KNOB_NAMES)
        if unknown or len(names) < 2:
            raise ValueError(f"KnobSubset needs two or more of {sorted(KNOB_NAMES)}, got {names}")
        self.names = names
        self.key: Callable[[Knobs], tuple[Any, ...]] = operator.attrgetter(*names)

    def __or__(self, other: KnobSubset) -> KnobSubset:
        return KnobSubset(*self.names, *(n for n in other.names if n not in self.names))

    def __repr__(self) -> str:
        return f"KnobSubset{self.names}"
