"""Ordered fixes, cheapest first, in the field's decision order (docs/fix-order.md):
allocator setting → LoRA+SP input re-gather → selective recompute → distributed optimizer / more
PP → CPU offload (PP = 1 only) → more TP. With a job config the fixes respect its constraints
and quote the exact key; with the estimator they say what each saves on the most-loaded rank.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memtune.config import LoadedJob, derive
from memtune.config.allocator import is_true
from memtune.config.changes import Change, allocator_option_change, expandable_segments_changes, with_changes
from memtune.config.schema import JobConfig
from memtune.diagnose.classify import Verdict, significant
from memtune.diagnose.detectors import RESUME_FIRST_STEP, RESUME_PHASES
from memtune.diagnose.evidence import (
    CAPACITY,
    CONFIGURATION,
    FRAGMENTATION,
    HOST_OOM,
    NOT_OOM,
    OUTSIDE_PYTORCH,
)
from memtune.diagnose.sizes import gib
from memtune.errors import InputError
from memtune.fix.changes import estimate_job, ladder
from memtune.fix.search import FixResult, find_fixes, saving
from memtune.units import GiB

# The GPU catalogue holds the total a device reports (cudaMemGetInfo; memtune/catalog/data/gpus.yaml),
# the figure an OOM message prints; a gap past 2% means the log came from another GPU.
GPU_CAPACITY_TOLERANCE = 0.02


@dataclass(frozen=True)
class Fix:
    title: str
    changes: tuple[str, ...]  # exact settings: "section.key=value" config keys or "export VAR=value"
    why: str
    cost: str  # throughput / effort cost, in words
    saves_bytes: int | None = None  # on the failing (most-loaded) rank, when known
    saves_note: str = ""
    fallback: bool = False  # only if the fixes before it are not enough

    @property
    def overrides(self) -> list[str]:
        """The changes that are memtune config keys (they can be re-estimated)."""
        return [c for c in self.changes if not c.startswith("export ") and "." in c.split("=", 1)[0]]


def _alloc_conf(job: JobConfig | None, option: str, value: str) -> str:
    return str(allocator_option_change(derive(job) if job else None, option, value))


def _graphs_on(job: JobConfig | None) -> bool:
    return bool(job and derive(job).cuda_graphs)


def allocator_fix(job: JobConfig | None, verdict: Verdict) -> Fix | None:
    if verdict.expandable.on:
        return None
    recovers = verdict.numbers.unallocated if (verdict.numbers and verdict.label == FRAGMENTATION) else None
    if job and job.env.use_nccl_ub:
        return Fix(
            "Cap block splitting (expandable segments are not an option with NCCL user buffers)",
            (_alloc_conf(job, "max_split_size_mb", "512"),),
            "env.use_nccl_ub=true rules out expandable segments (torch.cuda.MemPool); max_split_size_mb keeps "
            "large blocks whole so they can be reused",
            "small; more cudaMalloc calls",
        )
    if job is None:
        changes = [_alloc_conf(None, "expandable_segments", "True")]
    else:
        changes = [str(c) for c in expandable_segments_changes(derive(job)) or ()]
    why = "the allocator grows segments in place instead of stranding free pieces"
    if job is None:
        why += " (not with use_nccl_ub; with CUDA graphs also set NCCL_GRAPH_REGISTER=0)"
    elif _graphs_on(job):
        why += "; NCCL_GRAPH_REGISTER=0 because CUDA graphs are on (Megatron-Core's guard)"
    note = "recovers up to the reserved-but-unallocated memory" if recovers else ""
    return Fix(
        "Turn on expandable segments", tuple(changes), why, "none (zero throughput cost)", recovers, note
    )


def _capacity_ladder(job: JobConfig | None) -> list[Fix]:
    """The shared model of remedies (memtune/fix/changes.py), each admitted by the gate for
    advice, quoted with the job's keys; without a config no change holds for every job, so the
    advice is to give one."""
    if job is not None:
        return [Fix(r.title, tuple(str(c) for c in r.changes), r.why, r.cost) for r in ladder(job)]
    return [
        Fix(
            "Give the job's config (--config) for the changes that fit it",
            (),
            "which remedies Megatron accepts for this job, what each saves and what it costs depend on its "
            "layout, recompute, optimizer and model: memtune fix CONFIG --oom-log LOG ranks them",
            "none",
        )
    ]


def _outside_fixes(job: JobConfig | None, verdict: Verdict) -> list[Fix]:
    kinds = {v.root.failure.kind for v in verdict.ranks}
    n = verdict.numbers
    fixes = []
    if kinds & {"nccl_oom", "nccl_cuda_error", "narrative_nccl"}:
        fixes.append(
            Fix(
                "Shrink NCCL's own buffers",
                (
                    "export NCCL_NVLS_ENABLE=0",
                    "export NCCL_BUFFSIZE=2097152",
                    "export TORCH_NCCL_AVOID_RECORD_STREAMS=1",
                ),
                "NCCL allocates per-channel, per-peer buffers outside PyTorch, per communicator, at its first "
                "collective",
                "small",
            )
        )
    if (n and n.private_pools and significant(n, n.private_pools)) or verdict.phase == "CUDA-graph capture":
        fixes.append(
            Fix(
                "Narrow or drop CUDA graphs",
                ("model.cuda_graph_impl=none",) if job is None or _graphs_on(job) else (),
                "graph private pools stay reserved for the graphs' lifetime",
                "the graphs' speed-up",
            )
        )
    others_hold = (
        n is not None
        and (outside := n.outside_allocator) is not None
        and significant(n, outside)
        and (bool(sum(n.other_processes.values())) or n.nvml_unreliable)
    )
    if others_hold or kinds & {"cuda_runtime_oom"}:
        fixes.append(
            Fix(
                "Free the GPU from other processes",
                (),
                "another process (a stray rank, a colocated inference engine, a leftover job) holds device "
                "memory: check nvidia-smi on the failing node",
                "none",
            )
        )
    return fixes


_CONFIG_FIXES = {
    "pp_cpu_offload": Fix(
        "Drop CPU offloading or pipeline parallelism",
        ("model.cpu_offloading=false",),
        "CPU activation offload needs pipeline_model_parallel_size = 1",
        "none",
    ),
    "graphs_cpu_offload": Fix(
        "Drop CPU offloading or CUDA graphs",
        ("model.cpu_offloading=false",),
        "CPU offloading cannot run inside CUDA graphs",
        "none",
    ),
    "nccl_ub_expandable": Fix(
        "Drop expandable segments (NCCL user buffers are on)",
        ("env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False",),
        "torch < 2.11 MemPool does not support expandable segments; or set env.use_nccl_ub=false",
        "none",
    ),
    "pool_expandable": Fix(
        "Drop expandable segments for the pool / IPC user",
        ("env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False",),
        "memory pools and CUDA IPC sharing do not support expandable segments",
        "none",
    ),
    "graph_register_assert": Fix(
        "Set NCCL_GRAPH_REGISTER=0",
        ("env.NCCL_GRAPH_REGISTER=0",),
        "CUDA graphs with expandable segments need NCCL graph registration off",
        "none",
    ),
    "narrative_configuration": Fix(
        "Set NCCL_GRAPH_REGISTER=0",
        ("env.NCCL_GRAPH_REGISTER=0",),
        "CUDA graphs with expandable segments need NCCL graph registration off",
        "none",
    ),
    "allocator_conf_error": Fix(
        "Fix PYTORCH_CUDA_ALLOC_CONF",
        (),
        "an unknown key or an out-of-range value (max_split_size_mb must be ≥ 20); "
        "backend:cudaMallocAsync ignores the native options",
        "none",
    ),
    "triton_smem": Fix(
        "Smaller Triton tiles",
        (),
        "lower the kernel's BLOCK sizes or num_stages (or its autotune configs); this is per-SM shared "
        "memory, no allocator or parallelism setting changes it",
        "kernel speed",
    ),
    "garbage_size": Fix(
        "Find the corrupt size",
        (),
        "a request above 1 EB comes from a bad shape or from a collective that failed earlier: "
        "look for the first error on any rank",
        "none",
    ),
}

_HOST_FIXES = [
    Fix(
        "Stop offloading to host memory",
        ("model.cpu_offloading=false", "optimizer.optimizer_cpu_offload=false"),
        "offloaded activations, optimizer state and pinned buffers live in host RAM",
        "more GPU memory",
    ),
    Fix(
        "Load and save checkpoints without full copies per rank",
        (),
        "each rank materialising the full state multiplies host memory by ranks per node",
        "none",
    ),
    Fix(
        "Fewer processes or data-loader workers per node",
        (),
        "every rank and worker holds its own copy of the dataset index and CUDA host allocations",
        "throughput",
    ),
]


def advise(verdict: Verdict, loaded: LoadedJob | None = None) -> list[Fix]:
    job = loaded.job if loaded else None
    label = verdict.label
    if label is None:
        return []
    if label in (CONFIGURATION, NOT_OOM):
        kinds = [v.root.failure.kind for v in verdict.ranks if v.label == label]
        fixes = list(dict.fromkeys(_CONFIG_FIXES[k] for k in kinds if k in _CONFIG_FIXES))
    elif label == HOST_OOM:
        fixes = list(_HOST_FIXES)
    else:
        # The allocator setting recovers stranded memory only: it leads for fragmentation and
        # cannot help a real shortage, so it is not offered there.
        fixes = [f for f in [allocator_fix(job, verdict)] if f] if label == FRAGMENTATION else []
        if label in (OUTSIDE_PYTORCH, CAPACITY):  # a shortage: first free what graphs or other holders keep
            fixes = _outside_fixes(job, verdict) + fixes
        fixes += _capacity_ladder(job)
        if label == FRAGMENTATION and fixes and fixes[0].title.startswith("Turn on"):
            fixes = fixes[:1] + [replace(f, fallback=True) for f in fixes[1:]]
    fixes += _version_fixes(job)
    if verdict.phase in RESUME_PHASES and label in (CAPACITY, FRAGMENTATION, OUTSIDE_PYTORCH):
        fixes = _resume_fixes(job, verdict.phase) + fixes
    return with_savings(fixes, loaded) if loaded else fixes


def _resume_row(job: JobConfig) -> tuple[int, int, int] | None:
    """(pipeline rank, training peak, resume load peak) of the rank whose load peaks highest."""
    try:
        est = estimate_job(job)
    except InputError:
        return None
    rows = [(r.pp_rank, r.peak_bytes, resume.load_bytes) for r in est.ranks if (resume := est.resume(r))]
    return max(rows, key=lambda row: row[2]) if rows else None


def _resume_fixes(job: JobConfig | None, phase: str) -> list[Fix]:
    """A resume OOM (docs/resume.md): inside load_checkpoint, loading the weights without the
    optimizer state avoids its rebuilt copy (the estimator says how much); in the first
    iteration after it, a garbage collection frees copies reference cycles keep past the load."""
    if phase == RESUME_FIRST_STEP:
        if job is not None and job.train.manual_gc:
            return []
        return [
            Fix(
                "Collect garbage before the first step after the resume",
                ("train.manual_gc=true",),
                "with --manual-gc Megatron collects once before training, freeing checkpoint-load copies that "
                "reference cycles keep; the estimate's first iteration after a resume is the training peak",
                "none",
                saves_note="not estimated: the estimator models no copies left after the load",
            )
        ]
    note = ""
    if job is not None and not derive(job).resumes:
        # The log shows the resume the config does not state: estimate the job as resuming.
        job = with_changes(job, [Change("checkpoint.load", "the log's checkpoint")])
        note = " (the config sets no checkpoint.load; estimated as resuming)"
    if job is not None and not derive(job).optimizer_loaded_at_resume:
        return []
    why = (
        "the load holds the optimizer's state a second time where Transformer Engine's FusedAdam rebuilds it "
        "in load_state_dict, and a gated linear_fc1 rebuilt from its halves; without the optimizer state only "
        "the weights load"
    )
    row = _resume_row(job) if job is not None else None
    saves = None
    if job is not None and row is not None:
        pp_rank, training, load = row
        why += (
            f"; the estimate's resume row{note}: pipeline rank {pp_rank} needs {gib(load)} to load,"
            f" {gib(training)} to train"
        )
        after = _resume_row(with_changes(job, [Change("checkpoint.load_optim", False)]))
        saves = load - after[2] if after else None
    return [
        Fix(
            "Resume without loading the optimizer state",
            ("checkpoint.load_optim=false",),
            why,
            "Adam's moments restart from zero, and the learning-rate scheduler's state is not loaded either "
            "(Megatron-LM and Megatron-Bridge read it in the same branch of load_checkpoint), so its warm-up "
            "and decay restart; Megatron-LM's --no-load-optim",
            saves,
            "estimated, on the resume row" if saves is not None else "",
        )
    ]


def _version_fixes(job: JobConfig | None) -> list[Fix]:
    allocator = derive(job).allocator if job else None
    if (
        allocator
        and allocator.source is None
        and allocator.alloc_conf_ignored
        and is_true(allocator.alloc_conf.get("expandable_segments"))
    ):
        conf = ",".join(f"{k}:{v}" for k, v in allocator.alloc_conf.items())
        return [
            Fix(
                "Use the old variable name before torch 2.11",
                (f"env.PYTORCH_CUDA_ALLOC_CONF={conf}",),
                "torch 2.9.1 ignores PYTORCH_ALLOC_CONF=expandable_segments:True for CUDA, and Megatron's "
                "guards read only PYTORCH_CUDA_ALLOC_CONF",
                "none",
            )
        ]
    return []


def with_savings(fixes: list[Fix], loaded: LoadedJob) -> list[Fix]:
    """Add to each fix that changes config keys what it saves on the failing rank, as ``fix``
    quotes it (``memtune.fix.search.saving``: the judged peak, training, checkpoint load or save)."""
    try:
        before = estimate_job(loaded.job)
    except InputError:
        return fixes
    result = []
    for fix in fixes:
        if (
            fix.saves_bytes is None
            and not fix.saves_note
            and any(not k.startswith("env.") for k in fix.overrides)
        ):
            try:
                after = estimate_job(with_changes(loaded.job, [Change.parse(o) for o in fix.overrides]))
                fix = replace(fix, saves_bytes=saving(before, after), saves_note="estimated")
            except InputError as exc:
                fix = replace(fix, saves_note=f"not estimated: {exc.problems[0]}")
        if fix.saves_note == "estimated" and fix.saves_bytes is not None and fix.saves_bytes <= 0:
            continue  # the estimator says this change does not lower this job's peak
        result.append(fix)
    return result


def ranked_fixes(loaded: LoadedJob | None, verdict: Verdict) -> FixResult | None:
    """The ranked fixes ``fix --oom-log`` prints, for a job given beside the logs and a shortage
    of GPU memory (capacity or fragmentation) in training; None otherwise, or where the checks refuse the job (diagnose's own
    advice then says why): what ``diagnose --config`` and a failed ``run --config`` print in place
    of the field's ladder, so one failure gets one answer."""
    if loaded is None or verdict.label not in (CAPACITY, FRAGMENTATION) or verdict.phase in RESUME_PHASES:
        # memory held outside PyTorch (NCCL's buffers, graph pools, other processes) and an OOM at
        # checkpoint load (load without the optimizer state, fewer shards at once) get diagnose's
        # own advice, which fix's menu of training changes lacks
        return None
    try:
        return fixes_for_failure(loaded.job, verdict)
    except InputError:
        return None


def fixes_for_failure(job: JobConfig, verdict: Verdict | None, headroom: int = 0) -> FixResult:
    """The ranked fixes for ``job`` after a failure diagnose read as ``verdict`` (None: no logs).

    ``memtune fix --oom-log``, ``memtune diagnose --config`` and ``memtune run --config`` (when
    the run fails) all print this list (:func:`ranked_fixes`), so one failure gets one answer."""
    if verdict is None:
        return find_fixes(job, headroom=headroom)
    n = verdict.numbers
    short = max(0, n.requested - n.free) if n and n.requested is not None and n.free is not None else 0
    result = find_fixes(job, verdict.label == FRAGMENTATION, min_saving=short, headroom=headroom)
    capacity = result.before.capacity_bytes
    if n and n.total and abs(n.total - capacity) > GPU_CAPACITY_TOLERANCE * capacity:
        gpu = result.before.gpu.name
        result.warnings.append(
            f"the log's GPU has {n.total / GiB:.2f} GiB, the config's {gpu} {capacity / GiB:.2f} GiB: "
            "the figures are for the config's GPU (set cluster.gpu to the one that ran)"
        )
    return result
