"""ENV: CUDA graphs and the allocator / NCCL environment."""

from __future__ import annotations

from memtune.check.context import Context
from memtune.check.finding import ERROR, INFO, WARNING, Hit
from memtune.check.registry import Applies, rule
from memtune.config.allocator import TORCH_READS_PYTORCH_ALLOC_CONF
from memtune.config.changes import expandable_segments_changes
from memtune.config.versions import format_version
from memtune.numbers import cut, echo
from memtune.units import gib, human

# torch 2.11 lets custom-allocator pools (NCCL user buffers) fall back to plain segments
# instead of raising.
TORCH_MEMPOOL_FALLBACK = (2, 11, 0)

NCCL_GRAPH_REGISTER_MESSAGE = (
    "Setting NCCL_GRAPH_REGISTER=0 to avoid illegal memory access when using CUDA Graph with "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
)
GRAPHS_FORBID_EXPANDABLE_MESSAGE = (
    "expandable_segments:True may not be safe when using CUDA Graphs with some specific parallel settings. "
    "The training may crash with illegal memory access."
)

# Every option torch's CUDA allocator parser accepts, 2.x through main (2026).
KNOWN_ALLOCATOR_OPTIONS = frozenset(
    {
        "backend",
        "expandable_segments",
        "max_split_size_mb",
        "max_non_split_rounding_mb",
        "roundup_power2_divisions",
        "garbage_collection_threshold",
        "release_lock_on_cudamalloc",
        "pinned_use_cuda_host_register",
        "pinned_use_hip_host_register",
        "pinned_num_register_threads",
        "pinned_use_background_threads",
        "graph_capture_record_stream_reuse",
        "per_process_memory_fraction",
        "throw_on_cudamalloc_oom",
        "large_segment_size_mb",
        "pinned_reserve_segment_size_mb",
        "pinned_max_round_threshold_mb",
        "pinned_max_cached_size_mb",
    }
)
# Options of the native caching allocator that the cudaMallocAsync backend ignores.
NATIVE_ONLY_OPTIONS = (
    "expandable_segments",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
)


def _graph_guard(c: Context) -> str | None:
    """Which Megatron-Core guard checks expandable segments for this CUDA-graph setup.

    "register": 0.16+ requires NCCL_GRAPH_REGISTER=0 (TE graphs; local graphs too in 0.16-0.18
    below compute capability 10). "forbid": 0.14-0.15 forbid expandable segments with any graph.
    """
    if not c.cuda_graphs:
        return None
    impl = c.model.cuda_graph_impl
    if (0, 14, 0) <= c.mcore < (0, 16, 0):
        return "forbid"
    if c.mcore >= (0, 16, 0):
        if impl == "transformer_engine":
            return "register"
        if impl == "local" and c.mcore < (0, 19, 0) and not c.blackwell_or_newer:
            return "register"
    return None


def _graph_register_on(c: Context) -> bool:
    return c.job.env.NCCL_GRAPH_REGISTER != "0"


@rule("ENV001", "expandable-with-nccl-ub", ERROR, applies=Applies("torch", until=TORCH_MEMPOOL_FALLBACK))
def expandable_with_nccl_ub(c: Context) -> Hit | None:
    """Expandable segments with NCCL user-buffer registration on torch before 2.11.

    ## What it does
    Flags `env.use_nccl_ub: true` with `expandable_segments:True` in `PYTORCH_CUDA_ALLOC_CONF`
    when `env.torch_version` is below 2.11.

    ## Why it matters
    NCCL user buffers live in a `torch.cuda.MemPool` with NCCL's allocator, which these torch
    releases cannot combine with expandable segments; Megatron-Core raises a `RuntimeError` at
    start-up.

    ## Example
    ```yaml
    env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True", use_nccl_ub: true, torch_version: "2.9.1"}
    ```

    ## Fix
    Drop `use_nccl_ub` (keep expandable segments, the better memory fix), or drop
    `expandable_segments:True`.
    """
    if not c.job.env.use_nccl_ub or not c.expandable_in_cuda_alloc_conf:
        return None
    return Hit(
        message=f"env.use_nccl_ub=true with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True on torch {format_version(c.torch)}",
        fix="set env.use_nccl_ub=false, or remove expandable_segments:True",
        upstream="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is currently not supported with nccl_ub due to "
        "compatibility issue with torch.cuda.MemPool API.",
    )


@rule(
    "ENV002",
    "expandable-ignored-by-nccl-ub-pool",
    WARNING,
    applies=Applies("torch", since=TORCH_MEMPOOL_FALLBACK),
)
def expandable_ignored_by_nccl_ub_pool(c: Context) -> Hit | None:
    """Expandable segments with NCCL user buffers on torch 2.11+: the buffer pool does not expand.

    ## What it does
    Flags `env.use_nccl_ub: true` with expandable segments on torch 2.11 or newer.

    ## Why it matters
    Newer torch no longer raises: pools with a custom allocator silently fall back to fixed
    segments, so the user-buffer pool fragments as without expandable segments, and NCCL's
    allocator over-allocates for multicast granularity. Megatron-Bridge's memory-tuning guide
    treats the pair as incompatible.

    ## Example
    ```yaml
    env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True", use_nccl_ub: true, torch_version: "2.11.0"}
    ```

    ## Fix
    Decide per job: NCCL user buffers for communication speed, or expandable segments for memory.
    """
    if not c.job.env.use_nccl_ub or not c.expandable_segments:
        return None
    return Hit(
        message=f"env.use_nccl_ub=true with expandable_segments:True on torch {format_version(c.torch)}: "
        "the NCCL user-buffer pool silently runs without expandable segments",
        fix="drop env.use_nccl_ub if memory is the constraint, or accept the non-expandable pool",
    )


@rule("ENV003", "graphs-expandable-need-graph-register-off", ERROR)
def graphs_expandable_need_graph_register_off(c: Context) -> Hit | None:
    """CUDA graphs with expandable segments need `NCCL_GRAPH_REGISTER=0` (megatron-core 0.16+).

    ## What it does
    Flags `expandable_segments:True` in `PYTORCH_CUDA_ALLOC_CONF` with `cuda_graph_impl:
    transformer_engine` (and, on megatron-core 0.16–0.18 below Blackwell, `local`) when
    `NCCL_GRAPH_REGISTER` is not `0`.

    ## Why it matters
    NCCL registers graph-captured buffers, and expandable segments remap pages under it: the
    result is illegal memory access. Megatron-Core asserts at start-up.

    ## Example
    ```yaml
    model: {cuda_graph_impl: transformer_engine}
    env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
    ```

    ## Fix
    Export `NCCL_GRAPH_REGISTER=0` (Megatron-Bridge's performance launchers do).
    """
    if _graph_guard(c) != "register" or not c.expandable_in_cuda_alloc_conf or not _graph_register_on(c):
        return None
    register = c.job.env.NCCL_GRAPH_REGISTER
    setting = f"NCCL_GRAPH_REGISTER={register}" if register else "NCCL_GRAPH_REGISTER not set"
    return Hit(
        message=f"model.cuda_graph_impl={c.model.cuda_graph_impl} with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        f"and {setting}",
        fix="set env.NCCL_GRAPH_REGISTER=0",
        upstream=NCCL_GRAPH_REGISTER_MESSAGE,
    )


@rule(
    "ENV004",
    "graphs-forbid-expandable",
    ERROR,
    applies=Applies("megatron-core", since=(0, 14, 0), until=(0, 16, 0)),
)
def graphs_forbid_expandable(c: Context) -> Hit | None:
    """CUDA graphs with expandable segments on megatron-core 0.14–0.15.

    ## What it does
    Flags any `cuda_graph_impl` with `expandable_segments:True` in `PYTORCH_CUDA_ALLOC_CONF`
    when `env.megatron_core_version` is 0.14 or 0.15.

    ## Why it matters
    These releases forbid the pair outright (from 0.16, `NCCL_GRAPH_REGISTER=0` makes it safe);
    Megatron asserts at start-up.

    ## Example
    ```yaml
    model: {cuda_graph_impl: local}
    env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True", megatron_core_version: "0.15.0"}
    ```

    ## Fix
    Drop expandable segments or CUDA graphs, or upgrade to megatron-core 0.16+ and set
    `NCCL_GRAPH_REGISTER=0`.
    """
    if _graph_guard(c) != "forbid" or not c.expandable_in_cuda_alloc_conf:
        return None
    return Hit(
        message=f"model.cuda_graph_impl={c.model.cuda_graph_impl} with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        f"on megatron-core {format_version(c.mcore)}",
        fix="remove expandable_segments:True or set model.cuda_graph_impl=none (or upgrade to megatron-core >= 0.16)",
        upstream=GRAPHS_FORBID_EXPANDABLE_MESSAGE,
    )


@rule("ENV005", "graph-guard-bypassed-by-pytorch-alloc-conf", WARNING)
def graph_guard_bypassed(c: Context) -> Hit | None:
    """Expandable segments set through `PYTORCH_ALLOC_CONF` slip past Megatron's CUDA-graph guard.

    ## What it does
    Flags the ENV003/ENV004 combination when expandable segments come only from the newer
    `PYTORCH_ALLOC_CONF` (which torch 2.11+ reads).

    ## Why it matters
    Megatron's guard reads only `PYTORCH_CUDA_ALLOC_CONF`, so it stays silent while the allocator
    still runs with expandable segments under CUDA graphs — the illegal-memory-access hazard the
    guard exists to prevent, now surfacing mid-run instead of at start-up.

    ## Example
    ```yaml
    model: {cuda_graph_impl: transformer_engine}
    env: {PYTORCH_ALLOC_CONF: "expandable_segments:True"}
    ```

    ## Fix
    Set `NCCL_GRAPH_REGISTER=0` (megatron-core 0.16+), or drop expandable segments or graphs.
    """
    guard = _graph_guard(c)
    if guard is None or c.expandable_in_cuda_alloc_conf or not c.expandable_segments:
        return None
    if guard == "register" and not _graph_register_on(c):
        return None
    return Hit(
        message=f"model.cuda_graph_impl={c.model.cuda_graph_impl} with PYTORCH_ALLOC_CONF=expandable_segments:True: "
        "Megatron reads only PYTORCH_CUDA_ALLOC_CONF, so its CUDA-graph guard is bypassed",
        fix="set env.NCCL_GRAPH_REGISTER=0"
        if guard == "register"
        else "remove expandable_segments:True or the CUDA graphs",
    )


@rule(
    "ENV006",
    "pytorch-alloc-conf-ignored",
    WARNING,
    applies=Applies("torch", until=TORCH_READS_PYTORCH_ALLOC_CONF),
)
def pytorch_alloc_conf_ignored(c: Context) -> Hit | None:
    """`PYTORCH_ALLOC_CONF` on a torch that does not apply it to the CUDA allocator.

    ## What it does
    Flags `env.PYTORCH_ALLOC_CONF` when `env.torch_version` is below 2.11.

    ## Why it matters
    The name is new (torch 2.9); torch 2.9.1 silently ignores it for the CUDA allocator
    (pytorch#183387, fixed in 2.11) and older releases do not know it. Your allocator settings —
    typically `expandable_segments:True`, the first-line fragmentation fix — never take effect.

    ## Example
    ```yaml
    env: {PYTORCH_ALLOC_CONF: "expandable_segments:True", torch_version: "2.9.1"}
    ```

    ## Fix
    Use `PYTORCH_CUDA_ALLOC_CONF` (read by every torch release and by Megatron's guards).
    """
    if not c.job.env.PYTORCH_ALLOC_CONF:
        return None
    return Hit(
        message=f"env.PYTORCH_ALLOC_CONF={c.job.env.PYTORCH_ALLOC_CONF!r} is not applied by torch {format_version(c.torch)} "
        f"(needs >= {format_version(TORCH_READS_PYTORCH_ALLOC_CONF)})",
        fix=f"set PYTORCH_CUDA_ALLOC_CONF={c.job.env.PYTORCH_ALLOC_CONF} instead",
    )


@rule("ENV007", "async-backend-ignores-options", WARNING)
def async_backend_ignores_options(c: Context) -> Hit | None:
    """Caching-allocator options with the `cudaMallocAsync` backend.

    ## What it does
    Flags `backend:cudaMallocAsync` together with options of the native caching allocator
    (`expandable_segments`, `max_split_size_mb`, `roundup_power2_divisions`, ...).

    ## Why it matters
    The async backend ignores them silently: no expandable segments, no split limits — and no
    memory snapshots or history for diagnosis either.

    ## Example
    ```yaml
    env: {PYTORCH_CUDA_ALLOC_CONF: "backend:cudaMallocAsync,expandable_segments:True"}
    ```

    ## Fix
    Drop `backend:cudaMallocAsync` to use the native allocator's options, or drop the options.
    """
    options = c.alloc_options
    ignored = [k for k in NATIVE_ONLY_OPTIONS if k in options]
    if options.get("backend") != "cudaMallocAsync" or not ignored:
        return None
    return Hit(
        message=f"backend:cudaMallocAsync ignores {', '.join(ignored)}",
        fix="remove backend:cudaMallocAsync, or remove the native-allocator options",
    )


@rule("ENV008", "allocator-config-read-once", INFO)
def allocator_config_read_once(c: Context) -> Hit | None:
    """Allocator settings are read once, when CUDA's caching allocator starts.

    ## What it does
    Notes every config that sets `PYTORCH_CUDA_ALLOC_CONF` or `PYTORCH_ALLOC_CONF`.

    ## Why it matters
    torch reads the variable at the first CUDA allocation (`backend:` even earlier, when torch is
    imported). Setting `os.environ[...]` in the training script after anything touched the GPU
    has no effect, and the run quietly uses the defaults.

    ## Example
    ```yaml
    env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"}
    ```

    ## Fix
    Export it in the launch environment (sbatch script, container env, torchrun wrapper).
    `memtune measure` records the settings actually in effect.
    """
    if not c.read_alloc_confs:
        return None
    names = " and ".join(c.read_alloc_confs)
    return Hit(
        message=f"{names} is read once, when the CUDA allocator initialises",
        fix="export it in the job's launch environment, not from Python after torch has touched the GPU",
    )


@rule("ENV009", "full-recompute-with-cuda-graphs", ERROR)
def full_recompute_with_cuda_graphs(c: Context) -> Hit | None:
    """Full activation recompute with per-layer CUDA graphs (version-dependent).

    ## What it does
    Flags `recompute_granularity: full` with `cuda_graph_impl` `local` or `transformer_engine`
    (megatron-core 0.16+), or with any CUDA graph (up to 0.15).

    ## Why it matters
    Recomputing a captured layer would replay it outside the graph; Megatron raises at start-up.
    From 0.16 only full-iteration graphs support it.

    ## Example
    ```yaml
    model: {cuda_graph_impl: transformer_engine, recompute_granularity: full,
            recompute_method: uniform, recompute_num_layers: 1}
    ```

    ## Fix
    Use selective recompute, or `cuda_graph_impl: full_iteration` (0.16+).
    """
    if c.model.recompute_granularity != "full" or not c.cuda_graphs:
        return None
    impl = c.model.cuda_graph_impl
    if c.mcore >= (0, 16, 0):
        if impl == "full_iteration":
            return None
        upstream = "full recompute is only supported with full iteration CUDA graph."
    else:
        upstream = "recompute_granularity must not be full when CUDA Graphs are enabled."
    return Hit(
        message=f"model.recompute_granularity=full with model.cuda_graph_impl={impl} "
        f"(megatron-core {format_version(c.mcore)})",
        fix="use model.recompute_granularity=selective"
        + (", or model.cuda_graph_impl=full_iteration" if c.mcore >= (0, 16, 0) else ""),
        upstream=upstream,
    )


@rule("ENV010", "graph-scope-without-graphs", WARNING)
def graph_scope_without_graphs(c: Context) -> Hit | None:
    """`cuda_graph_scope` set while CUDA graphs are off.

    ## What it does
    Flags a non-empty `cuda_graph_scope` with `cuda_graph_impl: none`.

    ## Why it matters
    Megatron-Bridge clears the scope when graphs are off, so nothing is captured — usually the
    impl key was forgotten.

    ## Example
    ```yaml
    model: {cuda_graph_scope: [attn, moe_router]}
    ```

    ## Fix
    Set `cuda_graph_impl: transformer_engine`, or remove the scope.
    """
    if c.cuda_graphs or not c.model.cuda_graph_scope:
        return None
    return Hit(
        message=f"model.cuda_graph_scope={c.model.cuda_graph_scope} with model.cuda_graph_impl=none captures nothing",
        fix="set model.cuda_graph_impl=transformer_engine, or remove model.cuda_graph_scope",
    )


@rule("ENV011", "cuda-graphs-with-pp-memory", INFO)
def cuda_graphs_with_pp_memory(c: Context) -> Hit | None:
    """CUDA graphs with pipeline parallelism hold large static buffers.

    ## What it does
    Notes `cuda_graph_impl` other than `none` together with `pipeline_model_parallel_size > 1`.

    ## Why it matters
    Each captured graph keeps its memory pool reserved for its lifetime, and with PP every
    in-flight microbatch needs its own graph: Megatron-Bridge's performance guide puts the cost at
    more than 10 GB per GPU with PP > 1 (a few GB without), and full-iteration graphs can raise
    peak memory 1.5–2×. GPT-OSS-120B at TP2 PP4 EP8 ran out of memory this way.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 4, pipeline_dtype: bf16, cuda_graph_impl: transformer_engine}
    ```

    ## Fix
    Leave headroom for the graph pools, narrow `cuda_graph_scope`, or measure with `memtune measure`.
    """
    if not c.cuda_graphs or c.d.pp == 1:
        return None
    return Hit(
        message=f"model.cuda_graph_impl={c.model.cuda_graph_impl} with model.pipeline_model_parallel_size={c.d.pp}: "
        "graph memory pools can take more than 10 GB per GPU",
        fix="leave that headroom, or narrow model.cuda_graph_scope",
    )


@rule("ENV012", "unknown-allocator-option", ERROR)
def unknown_allocator_option(c: Context) -> Hit | None:
    """An allocator option torch does not know.

    ## What it does
    Checks every `key:value` in the allocator variables torch will read against the options
    torch's CUDA allocator accepts.

    ## Why it matters
    torch raises a `ValueError` at the first CUDA allocation — typically a typo such as
    `expandable_segment:True`.

    ## Example
    ```yaml
    env: {PYTORCH_CUDA_ALLOC_CONF: "expandable_segment:True"}
    ```

    ## Fix
    Correct the option name.
    """
    for name, conf in c.read_alloc_confs.items():
        for key in conf:
            if key not in KNOWN_ALLOCATOR_OPTIONS:
                return Hit(
                    message=f"env.{name} has unknown option {echo(key)}",
                    fix=f"correct or remove {echo(key)} (e.g. expandable_segments:True)",
                    upstream=f"Unrecognized key '{cut(key)}' in CUDA allocator config."
                    if c.torch >= (2, 11, 0)
                    else None,
                )
    return None


@rule("ENV013", "tp-cp-need-one-device-connection", ERROR)
def tp_cp_need_one_device_connection(c: Context) -> Hit | None:
    """Megatron-LM with TP or CP above 1 and `CUDA_DEVICE_MAX_CONNECTIONS` set to another value than 1.

    ## What it does
    Checks, for Megatron-LM jobs on GPUs before Blackwell with tensor or context parallelism
    and without Megatron-FSDP, that `env.CUDA_DEVICE_MAX_CONNECTIONS` is `"1"` when it is set.

    ## Why it matters
    Megatron-Core orders its sequence-parallel all-gathers before the GEMMs that wait on them by
    relying on one hardware queue; Megatron-LM's `validate_args` asserts the variable is 1 on
    Hopper and older (Blackwell no longer needs it, and Megatron-FSDP only warns). memtune reads an
    unset variable as set to 1, as Megatron-LM's own launch scripts do.

    ## Example
    ```yaml
    defaults: megatron-lm
    env: {CUDA_DEVICE_MAX_CONNECTIONS: "32"}
    ```

    ## Fix
    Set `env.CUDA_DEVICE_MAX_CONNECTIONS: "1"`.
    """
    d = c.d
    if d.stack != "megatron-lm" or (d.tp == 1 and d.cp == 1) or c.blackwell_or_newer or c.megatron_fsdp:
        return None
    value = c.job.env.CUDA_DEVICE_MAX_CONNECTIONS
    if value is None or value == "1":
        return None
    return Hit(
        message=f"env.CUDA_DEVICE_MAX_CONNECTIONS={value} with tensor_model_parallel_size={d.tp}, "
        f"context_parallel_size={d.cp} under Megatron-LM",
        fix='set env.CUDA_DEVICE_MAX_CONNECTIONS="1"',
        upstream="Using tensor model parallelism or context parallelism require setting the environment "
        "variable CUDA_DEVICE_MAX_CONNECTIONS to 1",
    )


@rule("ENV014", "expandable-segments-off-when-tight", WARNING)
def expandable_segments_off_when_tight(c: Context) -> Hit | None:
    """Expandable segments are off and the job has less to spare than fragmentation can take.

    ## What it does
    With the estimate at hand (`memtune check` computes it for a job without errors), flags a
    job whose allocator runs without `expandable_segments:True` when its verdict is `tight`, or
    when it fits with less room to spare than the fragmentation margin the allocator setting
    costs.

    ## Why it matters
    Without expandable segments, PyTorch's caching allocator keeps blocks cut for one size that
    cannot serve another, and a job whose allocated peak fits can still run out of memory with
    gigabytes reserved but free: the field's first rule for an out-of-memory error. Expandable
    segments grow a segment in place instead, at no cost in throughput; memtune's verdict allows
    8% of the peak for fragmentation without them and 2% with them (docs/allocator.md).

    ## Example
    ```yaml
    cluster: {gpu_memory_gib: 46}
    ```

    ## Fix
    Set `env.PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True` (with CUDA graphs also
    `env.NCCL_GRAPH_REGISTER: "0"`). It cannot be used with NCCL user buffers (`env.use_nccl_ub`).
    """
    facts, changes = c.memory, expandable_segments_changes(c.d)
    if facts is None or not changes or facts.needed_with_expandable_bytes is None:
        return None
    spare = facts.capacity_bytes - facts.needed_bytes
    if facts.verdict not in ("fits", "tight") or (
        facts.verdict == "fits" and spare >= facts.fragmentation_bytes
    ):
        return None
    state = (
        f"is tight (needs {gib(facts.needed_bytes)} of {gib(facts.capacity_bytes)} GiB)"
        if facts.verdict == "tight"
        else f"fits with {human(spare)} to spare, less than the {human(facts.fragmentation_bytes)} "
        "its fragmentation margin allows"
    )
    return Hit(
        message=f"expandable segments are off and the job {state}; with them it needs "
        f"{gib(facts.needed_with_expandable_bytes)} GiB",
        fix="set " + " and ".join(str(change) for change in changes),
    )
