"""The memory remedies memtune knows, as config changes: the one menu ``memtune fix`` searches
and ``diagnose``'s advice quotes.

A :class:`Remedy` is a titled set of :class:`~memtune.config.changes.Change` that Megatron
accepts as one change (Megatron-FSDP with its checkpoint format and environment; more pipeline
stages with the pipeline dtype), with its family, why it saves memory, what it costs in time and
what it costs beyond throughput. :func:`menu` lists every remedy that applies to a job, family by
family in the field's order of preference (docs/fix-order.md); whether Megatron accepts it and
whether memtune check calls it useless is the gate's to say (``memtune.check.admit``), what it
saves the estimator's and what it costs the step model's.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.check import admit, gate
from memtune.config.changes import Change, expandable_segments_changes, with_changes
from memtune.config.derived import Derived, derive
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, estimate
from memtune.peft.model import adapters

# The field's order of preference (lower first); fix breaks ties in predicted cost with it.
FAMILIES = (
    "allocator",
    "manual-gc",
    "lora-regather",
    "selective-recompute",
    "optimizer-precision",
    "distributed-optimizer",
    "pipeline",
    "fsdp",
    "context-parallel",
    "expert-parallel",
    "micro-batch",
    "optimizer-offload",
    "full-recompute",
    "activation-offload",
    "tensor-parallel",
)

# Megatron-Core's selective recompute modules in its order (transformer_config.py ``recompute_modules``).
SELECTIVE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")


@dataclass(frozen=True)
class Remedy:
    family: str
    title: str
    changes: tuple[Change, ...]
    why: str  # how it saves memory
    cost: str  # what it costs in time, in words (the step model gives the figure)
    side_effects: tuple[str, ...] = ()  # what it costs beyond throughput


def allocator_remedy(job: JobConfig) -> Remedy | None:
    """Expandable segments (with NCCL graph registration off under CUDA graphs); none when they
    are on, or beside NCCL user buffers, which Megatron-Core refuses with them (check ENV001)."""
    changes = expandable_segments_changes(derive(job))
    if not changes:
        return None
    why = "the allocator grows segments in place instead of stranding free pieces"
    if len(changes) > 1:
        why += "; NCCL_GRAPH_REGISTER=0 because CUDA graphs are on (Megatron-Core's guard)"
    return Remedy("allocator", "Turn on expandable segments", changes, why, "none (zero throughput cost)")


def menu(job: JobConfig) -> list[Remedy]:
    """Every remedy for ``job``, family by family in the field's order."""
    d = derive(job)
    found: list[Remedy] = []
    for family in (
        _allocator,
        _manual_gc,
        _lora_regather,
        _selective,
        _optimizer_precision,
        _distributed_optimizer,
        _pipeline,
        _fsdp,
        _context_parallel,
        _expert_parallel,
        _micro_batch,
        _optimizer_offload,
        _full_recompute,
        _layer_wise_offload,
        _fine_grained_offload,
        _tensor_parallel,
    ):
        found += family(job, d)
    return found


def ladder(job: JobConfig) -> list[Remedy]:
    """One remedy per family, the first of the menu's that the gate admits, in the field's order
    (the allocator excluded: it answers fragmentation only, which the caller knows)."""
    rungs: dict[str, Remedy] = {}
    for remedy in menu(job):
        if remedy.family in rungs or remedy.family == "allocator":
            continue
        try:
            admitted = admit(with_changes(job, remedy.changes), job)
        except InputError:
            continue
        if admitted.refusal is None:
            rungs[remedy.family] = remedy
    return list(rungs.values())


def _allocator(job: JobConfig, d: Derived) -> list[Remedy]:
    remedy = allocator_remedy(job)
    return [remedy] if remedy else []


def _manual_gc(job: JobConfig, d: Derived) -> list[Remedy]:
    """Megatron-LM's --manual-gc where optimizer offload leaves the replaced first optimizer's
    device copies to Python's collector (estimate/state.py): one collection before training."""
    if not job.optimizer.optimizer_cpu_offload or job.train.manual_gc:
        return []
    return [
        Remedy(
            "manual-gc",
            "Collect garbage before training (--manual-gc)",
            (Change("train.manual_gc", True),),
            "frees the fp32 device copies of the offloading optimizer Megatron-Core builds first and replaces",
            "none (one collection at start; periodic ones only with manual_gc_interval)",
        )
    ]


def _lora_regather(job: JobConfig, d: Derived) -> list[Remedy]:
    if (
        job.peft is None
        or job.peft.sequence_parallel_input_regather
        or all(a.regather_blocker is not None for a in adapters(d))
    ):
        return []
    return [
        Remedy(
            "lora-regather",
            "Re-gather LoRA adapter inputs under sequence parallelism",
            (Change("peft.sequence_parallel_input_regather", True),),
            "the adapters stop keeping their own full-sequence copy of the input",
            "all-gathers of the adapters' inputs again in backward",
        )
    ]


def _selective(job: JobConfig, d: Derived) -> list[Remedy]:
    """Each module Megatron-Core can recompute for this model, added to what the job recomputes
    (``memtune fix`` then tries the admitted ones together). Not for a job under full recompute,
    which keeps less already."""
    if job.model.recompute_granularity == "full":
        return []
    current = selective_modules(job)
    return [selective_remedy(current | {m}) for m in d.recomputable_modules if m not in current]


def selective_modules(job: JobConfig) -> set[str]:
    """The modules a job recomputes selectively (none under full recompute or none)."""
    return set(derive(job).recompute_modules) if job.model.recompute_granularity == "selective" else set()


def selective_remedy(modules: set[str]) -> Remedy:
    ordered = [m for m in SELECTIVE_MODULES if m in modules]
    return Remedy(
        "selective-recompute",
        "Selective recompute of " + ", ".join(ordered),
        (
            Change("model.recompute_granularity", "selective"),
            Change("model.recompute_modules", ordered),
            Change("model.recompute_method", None),
            Change("model.recompute_num_layers", None),
        ),
        "replays these modules in backward instead of keeping what they save",
        "their forward again",
    )


def _optimizer_precision(job: JobConfig, d: Derived) -> list[Remedy]:
    """Adam's moments in bf16 through Megatron's precision-aware optimizer (Megatron-Bridge's
    memory-tuning guide, step 3); it needs the distributed optimizer (check OPT007)."""
    opt = job.optimizer
    if opt.optimizer != "adam" or (opt.exp_avg_dtype == "bf16" and opt.exp_avg_sq_dtype == "bf16"):
        return []
    return [
        Remedy(
            "optimizer-precision",
            "Adam moments in bf16 (precision-aware optimizer)",
            (
                *_distributed_optimizer_changes(),
                Change("optimizer.use_precision_aware_optimizer", True),
                Change("optimizer.exp_avg_dtype", "bf16"),
                Change("optimizer.exp_avg_sq_dtype", "bf16"),
            ),
            "keeps Adam's two moments in 2 bytes instead of 4",
            "about nothing",
            ("a numerical choice: check the loss curve and that no step is skipped",),
        )
    ]


def _distributed_optimizer_changes() -> tuple[Change, ...]:
    return (
        Change("ddp.use_distributed_optimizer", True),
        Change("optimizer.use_distributed_optimizer", True),
    )


def _distributed_optimizer(job: JobConfig, d: Derived) -> list[Remedy]:
    if d.use_distributed_optimizer or d.dp * d.cp == 1:
        return []
    return [
        Remedy(
            "distributed-optimizer",
            "Distributed optimizer",
            _distributed_optimizer_changes(),
            "shards optimizer state and main weights across data-parallel ranks",
            "a reduce-scatter and an all-gather in place of the all-reduce",
        )
    ]


def _pipeline_dtype(job: JobConfig, d: Derived) -> tuple[Change, ...]:
    # Megatron-Core refuses PP > 1 without it (check PAR006).
    return () if job.model.pipeline_dtype is not None else (Change("model.pipeline_dtype", d.param_dtype),)


def _dp_after(d: Derived, tp: int, pp: int, cp: int) -> str:
    return f"DP {d.dp} → {max(1, d.world_size // (tp * pp * cp))} at this GPU count"


def _pipeline(job: JobConfig, d: Derived) -> list[Remedy]:
    found = []
    for pp in (2 * d.pp, 4 * d.pp):
        if job.model.num_layers % pp or d.world_size % (d.tp * pp * d.cp):
            continue
        changes = [Change("model.pipeline_model_parallel_size", pp), *_pipeline_dtype(job, d)]
        if d.vpp > 1 and (job.model.num_layers // pp) % d.vpp:
            changes.append(Change("model.virtual_pipeline_model_parallel_size", None))
        found.append(
            Remedy(
                "pipeline",
                f"{pp} pipeline stages",
                tuple(changes),
                "each rank holds fewer layers",
                f"{_dp_after(d, d.tp, pp, d.cp)}, and a longer bubble",
            )
        )
    return found


def _fsdp(job: JobConfig, d: Derived) -> list[Remedy]:
    """Megatron-FSDP as Megatron-LM and Megatron-Bridge accept it: with the distributed optimizer
    they force on, the fsdp_dtensor checkpoint format (checks OPT012, OPT014) and without
    ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (check OPT013)."""
    if d.megatron_fsdp or d.dp * d.cp == 1:
        return []
    changes = [
        Change("ddp.use_megatron_fsdp", True),
        Change("ddp.data_parallel_sharding_strategy", "optim_grads_params"),
        *_distributed_optimizer_changes(),
        Change("checkpoint.ckpt_format", "fsdp_dtensor"),
    ]
    side_effects = [
        "checkpoints are written as fsdp_dtensor, which torch_dist checkpoints do not interchange with"
    ]
    if d.resumes and d.resume_format != "fsdp_dtensor":
        side_effects.append(f"the {d.resume_format} checkpoint this job resumes must be converted first")
    if job.env.CUDA_DEVICE_MAX_CONNECTIONS == "1" and d.stack != "megatron-core":
        changes.append(Change("env.CUDA_DEVICE_MAX_CONNECTIONS", None))
        if d.tp > 1 or d.cp > 1:
            side_effects.append(
                "CUDA_DEVICE_MAX_CONNECTIONS unset: TP/CP communication loses its one-queue ordering"
            )
    return [
        Remedy(
            "fsdp",
            "Megatron-FSDP (shard weights, gradients and optimizer state)",
            tuple(changes),
            "every data-parallel rank keeps 1/DP of the model state",
            "weight all-gathers and gradient reduce-scatters every micro-batch",
            tuple(side_effects),
        )
    ]


def _context_parallel(job: JobConfig, d: Derived) -> list[Remedy]:
    """CP at twice and four times the job's, with the exchange Transformer Engine allows the
    job's attention: a sliding window or an offset softmax (GPT-OSS) cannot take the ring
    (check SEQ007, SEQ008), so such a job's CP exchanges heads all-to-all; a hierarchical
    exchange grows its ring."""
    m = job.model
    needs_all_to_all = d.cp_comm_type_for_attention != m.cp_comm_type
    remedies = []
    for cp in (2 * d.cp, 4 * d.cp):
        if d.world_size % (d.tp * d.pp * cp):
            continue
        changes = [Change("model.context_parallel_size", cp)]
        exchange = _CP_EXCHANGE[m.cp_comm_type]
        if needs_all_to_all:
            changes.append(Change("model.cp_comm_type", "a2a"))
            exchange = _CP_EXCHANGE["a2a"] + " (the ring has no sliding window or softmax offsets)"
        elif m.cp_comm_type == "a2a+p2p" and m.hierarchical_context_parallel_sizes:
            changes.append(Change("model.hierarchical_context_parallel_sizes", d.hierarchical_cp_sizes(cp)))
        remedies.append(
            Remedy(
                "context-parallel",
                f"Context parallelism {cp}",
                tuple(changes),
                "each rank keeps the activations of 1/CP of the sequence",
                f"{_dp_after(d, d.tp, d.pp, cp)}; {exchange}",
            )
        )
    return remedies


# What CP exchanges in each layer's attention, by cp_comm_type (memtune/perf/layer.py cp_exchange).
_CP_EXCHANGE = {
    "p2p": "K/V exchanged around the ring",
    "a2a": "Q, K, V and the output exchanged all-to-all",
    "all_gather": "K/V gathered whole",
    "a2a+p2p": "Q, K, V all-to-all, then K/V around the ring",
}


def _expert_parallel(job: JobConfig, d: Derived) -> list[Remedy]:
    if not d.is_moe:
        return []
    ep = 2 * d.ep
    if (d.num_experts or 0) % ep:
        return []
    return [
        Remedy(
            "expert-parallel",
            f"Expert parallelism {ep}",
            (Change("model.expert_model_parallel_size", ep),),
            "each rank holds fewer experts",
            "all-to-all dispatch over more ranks",
        )
    ]


def _micro_batch(job: JobConfig, d: Derived) -> list[Remedy]:
    if d.micro_batch_size == 1:
        return []
    half = d.micro_batch_size // 2
    return [
        Remedy(
            "micro-batch",
            f"Micro-batch {half}",
            (Change("train.micro_batch_size", half),),
            "each microbatch keeps half the activations",
            "smaller GEMMs and twice the microbatches",
        )
    ]


def _optimizer_offload(job: JobConfig, d: Derived) -> list[Remedy]:
    if d.dp * d.cp == 1 or job.optimizer.optimizer_cpu_offload:
        return []
    return [
        Remedy(
            "optimizer-offload",
            f"Offload {fraction:.0%} of the optimizer to the CPU",
            (
                *_distributed_optimizer_changes(),
                Change("optimizer.use_precision_aware_optimizer", True),
                Change("optimizer.optimizer_cpu_offload", True),
                Change("optimizer.optimizer_offload_fraction", fraction),
            ),
            "that share of main weights and Adam moments lives in host memory",
            "host transfers and a CPU Adam step",
            ("host memory for that share of the optimizer state",),
        )
        for fraction in (0.25, 0.5, 1.0)
    ]


def _full_recompute(job: JobConfig, d: Derived) -> list[Remedy]:
    """Full recompute of n layers per model chunk, at depths from one layer to the whole chunk."""
    chunk_layers = max(d.layers_per_stage) // d.vpp
    depths = {chunk_layers, max(1, chunk_layers // 2)}
    n = 1
    while n < chunk_layers:
        depths.add(n)
        n *= 2
    current = (job.model.recompute_num_layers or 0) if job.model.recompute_granularity == "full" else 0
    return [
        Remedy(
            "full-recompute",
            f"Full recompute of {n} layer{'s' if n > 1 else ''} per chunk",
            (
                Change("model.recompute_granularity", "full"),
                Change("model.recompute_method", "block"),
                Change("model.recompute_num_layers", n),
                Change("model.recompute_modules", None),
            ),
            "keeps only the recomputed layers' inputs",
            "their forward again",
        )
        for n in sorted(depths)
        if n > current
    ]


def _layer_wise_offload(job: JobConfig, d: Derived) -> list[Remedy]:
    """Layer-wise CPU offload, which Megatron-Core refuses with PP > 1, CUDA graphs or any
    recompute (checks OFF001-OFF003): offered at PP 1 with the job's recompute dropped."""
    m = job.model
    if d.pp > 1 or d.cuda_graphs or m.cpu_offloading or m.fine_grained_activation_offloading:
        return []
    drop_recompute = (
        (
            Change("model.recompute_granularity", None),
            Change("model.recompute_method", None),
            Change("model.recompute_num_layers", None),
            Change("model.recompute_modules", None),
        )
        if m.recompute_granularity is not None
        else ()
    )
    layers = sorted({max(1, m.num_layers // 4), max(1, m.num_layers // 2), m.num_layers - 1})
    return [
        Remedy(
            "activation-offload",
            f"Offload {n} layers' activations to the CPU",
            (
                Change("model.cpu_offloading", True),
                Change("model.cpu_offloading_num_layers", n),
                *drop_recompute,
            ),
            "keeps the offloaded layers' activations in host memory",
            "host copies one layer at a time beside the compute",
            ("pinned host memory for the offloaded activations",),
        )
        for n in layers
        if n > 0
    ]


def _fine_grained_offload(job: JobConfig, d: Derived) -> list[Remedy]:
    """Fine-grained activation offloading: unlike the layer-wise ``cpu_offloading`` it works at
    any PP; Megatron-Bridge also wants Transformer Engine told not to offload weights (OFF009)."""
    m = job.model
    if m.cpu_offloading or m.fine_grained_activation_offloading:
        return []
    te_flag = (
        (Change("env.NVTE_CPU_OFFLOAD_V1", "1"),) if d.fine_grained_offload_needs_te_cpu_offload_v1 else ()
    )
    attention = ["core_attn", "attn_proj"]
    wider = ["qkv_linear", *attention, "mlp_norm"] + (["moe_act"] if d.is_moe else [])
    return [
        Remedy(
            "activation-offload",
            "Fine-grained activation offload of " + ", ".join(modules),
            (
                Change("model.fine_grained_activation_offloading", True),
                Change("model.offload_modules", modules),
                *te_flag,
            ),
            "moves what these modules save for backward to host memory, and back in time for backward",
            "host copies on a side stream, partly hidden behind compute (less with one hardware queue)",
            ("pinned host memory for the offloaded activations",),
        )
        for modules in (attention, wider)
    ]


def _tensor_parallel(job: JobConfig, d: Derived) -> list[Remedy]:
    return [
        Remedy(
            "tensor-parallel",
            f"Tensor parallelism {tp}",
            (Change("model.tensor_model_parallel_size", tp), Change("model.sequence_parallel", True)),
            "splits every layer's weights and activations further",
            f"more TP communication and smaller GEMMs; {_dp_after(d, tp, d.pp, d.cp)}",
        )
        for tp in (2 * d.tp, 4 * d.tp)
        if tp <= job.cluster.gpus_per_node and d.world_size % (tp * d.pp * d.cp) == 0
    ]


def estimate_job(job: JobConfig) -> Estimate:
    return estimate(gate(job))
