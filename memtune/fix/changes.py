"""The memory remedies memtune knows, as config changes: what ``diagnose``'s advice lists and what
``memtune fix`` searches, in one place.

A :class:`Remedy` is a titled set of :class:`~memtune.config.changes.Change` with its family, why
it saves memory and what it costs in words. :func:`ladder` gives one rung per family in the
field's order of preference (docs/fix-order.md): allocator setting -> LoRA input re-gather -> selective recompute -> distributed optimizer /
more pipeline stages -> CPU offload -> more tensor parallelism. :func:`options` widens each family
to the variants ``memtune fix`` estimates. :func:`peak_after` re-estimates a job with a remedy
applied, for the saving both commands quote.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import derive
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, estimate
from memtune.peft.model import adapters

EXPANDABLE = "expandable_segments:True"

# The field's order of preference (lower first); fix breaks ties in predicted cost with it.
FAMILIES = (
    "allocator",
    "manual-gc",
    "lora-regather",
    "selective-recompute",
    "distributed-optimizer",
    "pipeline",
    "fsdp",
    "optimizer-offload",
    "full-recompute",
    "activation-offload",
    "tensor-parallel",
)


@dataclass(frozen=True)
class Remedy:
    family: str
    title: str
    changes: tuple[Change, ...]
    why: str
    cost: str

    @property
    def preference(self) -> int:
        return FAMILIES.index(self.family)


def alloc_conf_change(job: JobConfig | None, option: str) -> Change:
    """The job's allocator settings in effect with ``option`` set, under the name Megatron's
    guards read (``PYTORCH_CUDA_ALLOC_CONF``, docs/allocator.md S2)."""
    current = dict(derive(job).allocator.options) if job else {}
    key, _, value = option.partition(":")
    current[key] = value
    return Change("env.PYTORCH_CUDA_ALLOC_CONF", ",".join(f"{k}:{v}" for k, v in current.items()))


def allocator_remedy(job: JobConfig) -> Remedy | None:
    """Expandable segments (with NCCL graph registration off under CUDA graphs); none with NCCL
    user buffers, which Megatron-Core refuses beside expandable segments (check ENV001)."""
    if job.env.use_nccl_ub or derive(job).allocator.expandable_segments:
        return None
    changes = [alloc_conf_change(job, EXPANDABLE)]
    graphs = derive(job).cuda_graphs
    if graphs and job.env.NCCL_GRAPH_REGISTER != "0":
        changes.append(Change("env.NCCL_GRAPH_REGISTER", "0"))
    why = "the allocator grows segments in place instead of stranding free pieces"
    if graphs:
        why += "; NCCL_GRAPH_REGISTER=0 because CUDA graphs are on (Megatron-Core's guard)"
    return Remedy(
        "allocator", "Turn on expandable segments", tuple(changes), why, "none (zero throughput cost)"
    )


def manual_gc_remedy(job: JobConfig) -> Remedy | None:
    """Megatron-LM's --manual-gc where optimizer offload leaves the replaced first optimizer's
    device copies to Python's collector (estimate/state.py): one collection before training."""
    if not job.optimizer.optimizer_cpu_offload or job.train.manual_gc:
        return None
    return Remedy(
        "manual-gc",
        "Collect garbage before training (--manual-gc)",
        (Change("train.manual_gc", True),),
        "frees the fp32 device copies of the offloading optimizer Megatron-Core builds first and replaces",
        "none (one collection at start; periodic ones only with manual_gc_interval)",
    )


def _pipeline_dtype(job: JobConfig) -> tuple[Change, ...]:
    # Megatron-Core refuses PP > 1 without it (check PAR006).
    if job.model.pipeline_dtype is not None:
        return ()
    return (Change("model.pipeline_dtype", derive(job).param_dtype),)


def passes_checks(job: JobConfig, changes: tuple[Change, ...]) -> bool:
    """Whether ``job`` with ``changes`` passes every error-level check: the checks know every
    layout rule (uneven and accounted stages, VPP), so only what they accept is proposed."""
    try:
        gate(with_changes(job, changes))
    except InputError:
        return False
    return True


def ladder(job: JobConfig) -> list[Remedy]:
    """One remedy per family that applies to ``job``, in the field's order (allocator excluded:
    it is the answer only to fragmentation, which the caller knows)."""
    rungs: list[Remedy] = []
    m = job.model
    d = derive(job)
    if gc := manual_gc_remedy(job):
        rungs.append(gc)
    if (
        job.peft
        and not job.peft.sequence_parallel_input_regather
        and any(a.regather_blocker is None for a in adapters(d))
    ):
        rungs.append(
            Remedy(
                "lora-regather",
                "Re-gather LoRA adapter inputs under sequence parallelism",
                (Change("peft.sequence_parallel_input_regather", True),),
                "the adapters stop keeping their own full-sequence copy of the input",
                "small",
            )
        )
    if m.recompute_granularity is None:
        rungs.append(
            Remedy(
                "selective-recompute",
                "Selective activation recompute",
                (Change("model.recompute_granularity", "selective"),),
                "recomputes attention internals (core_attn) instead of storing them",
                "a few % step time",
            )
        )
    elif m.recompute_granularity == "selective":
        rungs.append(
            Remedy(
                "full-recompute",
                "Full activation recompute",
                (
                    Change("model.recompute_granularity", "full"),
                    Change("model.recompute_method", "uniform"),
                    Change("model.recompute_num_layers", 1),
                ),
                "stores only each layer's input",
                "about a third more step time",
            )
        )
    if not d.use_distributed_optimizer and d.dp > 1:
        rungs.append(
            Remedy(
                "distributed-optimizer",
                "Distributed optimizer",
                (
                    Change("ddp.use_distributed_optimizer", True),
                    Change("optimizer.use_distributed_optimizer", True),
                ),
                "shards optimizer state and main weights across data-parallel ranks",
                "small (overlapped gathers)",
            )
        )
    more_stages = (Change("model.pipeline_model_parallel_size", 2 * d.pp), *_pipeline_dtype(job))
    if passes_checks(job, more_stages):
        cost = "pipeline bubble"
        cost += (
            f"; at a fixed GPU count DP drops {d.dp} → {d.dp // 2}"
            if d.dp >= 2
            else "; needs twice the GPUs (DP is already 1)"
        )
        rungs.append(
            Remedy(
                "pipeline",
                "More pipeline stages",
                more_stages,
                "each rank holds fewer layers",
                cost,
            )
        )
    if d.pp == 1 and not d.cuda_graphs and not m.cpu_offloading:
        keys = [
            Change("model.cpu_offloading", True),
            Change("model.cpu_offloading_num_layers", max(1, d.layers_per_stage[0] // 4)),
        ]
        if m.recompute_granularity is not None:
            # Megatron-Core refuses CPU offloading together with any recompute (check OFF002).
            keys.append(Change("model.recompute_granularity", None))
        rungs.append(
            Remedy(
                "activation-offload",
                "Offload activations to the CPU",
                tuple(keys),
                "keeps the offloaded layers' activations in host memory",
                "large; watch host RAM",
            )
        )
    if 2 * d.tp <= job.cluster.gpus_per_node:
        rungs.append(
            Remedy(
                "tensor-parallel",
                "More tensor parallelism (last resort)",
                (Change("model.tensor_model_parallel_size", 2 * d.tp),),
                "splits every layer's weights and activations further",
                "the highest throughput cost",
            )
        )
    return rungs


def _selective_sets(job: JobConfig) -> list[tuple[str, ...]]:
    """Selective-recompute module sets, cheapest replay first, that exist for this model."""
    d = derive(job)
    m = job.model
    current = set(d.recompute_modules)
    sets: list[tuple[str, ...]] = [("core_attn",), ("core_attn", "layernorm")]
    if d.is_moe and m.moe_grouped_gemm:
        sets.insert(1, ("core_attn", "moe_act"))
    if m.multi_latent_attention:
        sets.append(("core_attn", "layernorm", "mla_up_proj"))
    if not all(d.moe_layer_pattern):
        sets.append(("core_attn", "layernorm", "mlp"))
    if d.is_moe:
        sets.append(("core_attn", "layernorm", "moe"))
    return [s for s in sets if not set(s) <= current or not current]


def options(job: JobConfig) -> list[Remedy]:
    """Every remedy ``memtune fix`` estimates for ``job``, family by family in the field's order."""
    d = derive(job)
    m = job.model
    out: list[Remedy] = []
    alloc = allocator_remedy(job)
    if alloc:
        out.append(alloc)
    for rung in ladder(job):
        # the variants below cover these families (the ladder's TP rung is "Tensor parallelism 2TP")
        if rung.family not in (
            "selective-recompute",
            "full-recompute",
            "pipeline",
            "activation-offload",
            "tensor-parallel",
        ):
            out.append(rung)
    if m.recompute_granularity != "full":
        for modules in _selective_sets(job):
            out.append(
                Remedy(
                    "selective-recompute",
                    "Selective recompute of " + ", ".join(modules),
                    (
                        Change("model.recompute_granularity", "selective"),
                        Change("model.recompute_modules", list(modules)),
                        Change("model.recompute_method", None),
                        Change("model.recompute_num_layers", None),
                    ),
                    "replays these modules in backward instead of keeping what they save",
                    "their forward again",
                )
            )
    chunk_layers = max(d.layers_per_stage) // d.vpp
    for n in sorted({1, max(1, chunk_layers // 2), chunk_layers}):
        if m.recompute_granularity == "full" and (m.recompute_num_layers or 0) >= n:
            continue
        out.append(
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
        )
    world = d.world_size
    for pp in (2 * d.pp, 4 * d.pp):
        if m.num_layers % pp or world % (d.tp * pp * d.cp):
            continue
        vpp = d.vpp if (m.num_layers // pp) % d.vpp == 0 else 1
        changes = [Change("model.pipeline_model_parallel_size", pp), *_pipeline_dtype(job)]
        if vpp != d.vpp:
            changes.append(Change("model.virtual_pipeline_model_parallel_size", None))
        out.append(
            Remedy(
                "pipeline",
                f"{pp} pipeline stages",
                tuple(changes),
                "each rank holds fewer layers",
                f"DP {d.dp} → {max(1, world // (d.tp * pp * d.cp))} at this GPU count, and a longer bubble",
            )
        )
    if d.dp * d.cp > 1 and d.fsdp_strategy == "no_shard":
        out.append(
            Remedy(
                "fsdp",
                "Megatron-FSDP (shard weights, gradients and optimizer state)",
                (
                    Change("ddp.use_megatron_fsdp", True),
                    Change("ddp.data_parallel_sharding_strategy", "optim_grads_params"),
                    Change("ddp.use_distributed_optimizer", False),
                    Change("optimizer.use_distributed_optimizer", False),
                ),
                "every data-parallel rank keeps 1/DP of the model state",
                "weight all-gathers every micro-batch",
            )
        )
    if d.dp * d.cp > 1 and not job.optimizer.optimizer_cpu_offload:
        for fraction in (0.25, 0.5, 1.0):
            out.append(
                Remedy(
                    "optimizer-offload",
                    f"Offload {fraction:.0%} of the optimizer to the CPU",
                    (
                        Change("ddp.use_distributed_optimizer", True),
                        Change("optimizer.use_distributed_optimizer", True),
                        Change("optimizer.use_precision_aware_optimizer", True),
                        Change("optimizer.optimizer_cpu_offload", True),
                        Change("optimizer.optimizer_offload_fraction", fraction),
                    ),
                    "that share of main weights and Adam moments lives in host memory",
                    "host transfers and a CPU Adam step",
                )
            )
    if d.pp == 1 and not d.cuda_graphs and not m.cpu_offloading:
        for n in sorted({max(1, m.num_layers // 4), max(1, m.num_layers // 2), m.num_layers - 1}):
            keys = [Change("model.cpu_offloading", True), Change("model.cpu_offloading_num_layers", n)]
            if m.recompute_granularity is not None:
                keys.append(Change("model.recompute_granularity", None))
            out.append(
                Remedy(
                    "activation-offload",
                    f"Offload {n} layers' activations to the CPU",
                    tuple(keys),
                    "keeps the offloaded layers' activations in host memory",
                    "PCIe transfers beside compute; watch host RAM",
                )
            )
    if not m.cpu_offloading and not m.fine_grained_activation_offloading:
        out += _fine_grained_offload(job)
    for tp in (2 * d.tp, 4 * d.tp):
        if tp <= job.cluster.gpus_per_node and world % (tp * d.pp * d.cp) == 0:
            out.append(
                Remedy(
                    "tensor-parallel",
                    f"Tensor parallelism {tp}",
                    (Change("model.tensor_model_parallel_size", tp), Change("model.sequence_parallel", True)),
                    "splits every layer's weights and activations further",
                    "more TP communication and smaller GEMMs",
                )
            )
    return out


def _fine_grained_offload(job: JobConfig) -> list[Remedy]:
    """Fine-grained activation offloading: unlike the layer-wise ``cpu_offloading``, which
    Megatron-Core refuses with PP > 1 (megatron/core/transformer/transformer_config.py,
    "no support for Pipeline parallelism with CPU offloading"), it works at any PP."""
    d = derive(job)
    attention = ["core_attn", "attn_proj"]
    wider = ["qkv_linear", *attention, "mlp_norm"] + (["moe_act"] if d.is_moe else [])
    # Megatron-Bridge also wants Transformer Engine told not to offload weights (check OFF009).
    te_flag = (
        (Change("env.NVTE_CPU_OFFLOAD_V1", "1"),) if d.fine_grained_offload_needs_te_cpu_offload_v1 else ()
    )
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
            "host transfers overlapped with compute (not priced by the throughput model); pinned host memory",
        )
        for modules in (attention, wider)
    ]


def estimate_job(job: JobConfig) -> Estimate:
    return estimate(gate(job))


def peak_after(job: JobConfig, changes: tuple[Change, ...] | list[Change]) -> int:
    """The most-loaded rank's peak with ``changes`` applied; raises InputError (with the check
    codes) when the changed job is refused."""
    return estimate_job(with_changes(job, list(changes))).worst.peak_bytes
