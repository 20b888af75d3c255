"""Recognisers for every failure line memtune knows, and the cheap trigger list in front of them.

The scanner only decodes lines that contain one of ``TRIGGERS`` (plain substring search over raw
bytes); the regular expressions below then run on those few lines.
Every detector therefore must be reachable through at least one trigger: see the test that
checks each sample line against the trigger list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from memtune.diagnose import messages
from memtune.diagnose.evidence import (
    CAPACITY,
    CIRCUMSTANTIAL,
    CONFIGURATION,
    DIRECT,
    EXPLICIT,
    FRAGMENTATION,
    HOST_OOM,
    NARRATIVE,
    NOT_OOM,
    OUTSIDE_PYTORCH,
    Fact,
    Failure,
    Where,
)
from memtune.diagnose.sizes import to_bytes
from memtune.numbers import float_or_none
from memtune.units import GiB, MiB

# Each trigger is looked for in every distinct line shape, or in a block of distinct lines one pass
# of bytes.find each (diagnose/logscan.py), so the list is kept short: one substring stands for
# several messages where it can.
TRIGGERS: tuple[bytes, ...] = (
    b"emory",  # out of memory, Out Of Memory, allowed memory, memory summary, Virtual Memory, memory (MB)
    b"OOM",
    b"OUT_OF_MEMORY",
    b"lloc",  # Tried to allocate, calloc, allocator, cudaMallocAsync, CUBLAS_STATUS_ALLOC_FAILED
    b"_STATUS_",  # CUBLAS_STATUS_NOT_INITIALIZED, CUDNN_STATUS_*
    b"code",  # exit code / exitcode / return code -9 or 137
    b"status 137",
    b"KILL",  # SIGKILL, Signal 9 (SIGKILL)
    b"ill",  # oom-kill, oom_kill, sigkill_handler, Killed, killed, OOMKilled
    b"esource",  # OutOfResources, out of resource
    b"expandable",  # also the NCCL_GRAPH_REGISTER guard and the nccl_ub error
    b"ALLOC_CONF",
    b"ragment",
    b"ontiguous",
    b"graph",  # cudagraphs, make_graphed_callables, capture_end in torch/cuda/graphs.py
    b"orld",  # world size, world_size
    b"offloading",
    b"ersion",  # torch version, PyTorch Version
    b"torch==",
    b"NCCL error",
    b"checkpoint",  # a resume: load_checkpoint's frames and its "successfully loaded checkpoint"
    b"iteration ",  # Megatron's training log, one line per logged iteration
)


class Line:
    """A triggered line, and on demand the lines that follow it in the same stream (prefixes removed)."""

    def __init__(
        self, text: str, where: Where, following: Sequence[str] | Callable[[int], Sequence[str]] = ()
    ):
        self.text = text
        self.where = where
        self._following = following
        self._read: Sequence[str] = ()
        self._asked = 0

    @cached_property
    def lower(self) -> str:
        return self.text.lower()

    def next_lines(self, count: int) -> Sequence[str]:
        """Up to ``count`` lines that follow in the same stream, decoded only when asked for (most
        triggered lines never need them)."""
        if not callable(self._following):
            return self._following[:count]
        if count > self._asked:
            self._read, self._asked = self._following(count), count
        return self._read[:count]


Detector = Callable[[Line], list[Failure | Fact]]
_HINT = re.compile(r"If reserved (?:but unallocated )?memory is.*", re.S)
# PyTorch's hint, also when a wrapped message puts its tail on a line of its own
_HINT_PIECES = re.compile(
    r"If reserved.*|(?:to\s*avoid\s*)?fragmentation\.?\s*See\s*documentation.*|to\s*avoid\s*fragmentation",
    re.S,
)


def _excerpt(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _joined_message(line: Line) -> tuple[str, int]:
    """The allocator message with wrapped continuation lines joined back (no separator: see
    messages), and how many following lines it took."""
    parts = [line.text]
    if messages.MESSAGE_END.search(line.text):
        return line.text, 0
    for nxt in line.next_lines(12):
        parts.append(nxt.strip())
        if messages.MESSAGE_END.search("".join(parts[-2:])):  # also an end phrase wrapped in two
            break
    return "".join(parts), len(parts) - 1


def _failure(
    line: Line,
    kind: str,
    label: str | None,
    strength: int,
    note: str,
    text: str | None = None,
    numbers: messages.AllocatorNumbers | None = None,
    consumed: int = 0,
) -> Failure:
    return Failure(kind, label, strength, line.where, _excerpt(text or line.text), numbers, note, consumed)


# --- linear-time matchers -------------------------------------------------------------------
# Patterns of the form A.*B (or lookahead chains) rescan the rest of the line from every place A
# matches; on a long line of repeated A's that is quadratic. These find the first A once and
# then look for B after it, which is what A.*B means for "is there a match".


class _InOrder:
    """``first`` somewhere, then ``then`` somewhere after it (plain strings or patterns)."""

    def __init__(self, first: str | re.Pattern[str], then: str | re.Pattern[str]):
        self.first, self.then = first, then

    def search(self, text: str) -> bool:
        end = _end_of(self.first, text, 0)
        return end is not None and _end_of(self.then, text, end) is not None


def _end_of(needle: str | re.Pattern[str], text: str, start: int) -> int | None:
    if isinstance(needle, str):
        at = text.find(needle, start)
        return None if at < 0 else at + len(needle)
    m = needle.search(text, start)
    return None if m is None else m.end()


class _Either:
    def __init__(self, *matchers: re.Pattern[str] | _InOrder):
        self.matchers = matchers

    def search(self, text: str) -> bool:
        return any(m.search(text) for m in self.matchers)


class _AllOf:
    """Every word (or one of a tuple of words) occurs, in any order, case-insensitively."""

    def __init__(self, *words: str | tuple[str, ...]):
        self.words = [(w,) if isinstance(w, str) else w for w in words]

    def search(self, text: str) -> bool:
        lower = text.lower()
        return all(any(w in lower for w in options) for options in self.words)


_Matcher = re.Pattern[str] | _InOrder | _Either | _AllOf


# --- PyTorch allocators ------------------------------------------------------------------

_ALLOCATOR_OOM = re.compile(
    r"(?:(?<=CUDA)|(?<=HIP)|(?<!\S))[Oo]ut\s*of\s*memory\.\s*Tried|Tried\s*to\s*allocate|OutOfMemoryError|CUDA\s*out\s*of\s*me"
)
_ASYNC_OOM = re.compile(r"would exceed allowed memory")


def allocator_oom(line: Line) -> list[Failure | Fact]:
    if _may_match("async_allocator_oom", line) and _ASYNC_OOM.search(line.text):
        block = [line.text, *line.next_lines(7)]
        numbers = messages.parse_async_message("\n".join(block))
        return [
            _failure(
                line,
                "async_allocator_oom",
                None,
                EXPLICIT,
                "cudaMallocAsync backend OOM",
                "\n".join(block),
                numbers,
                consumed=len(block) - 1,
            )
        ]
    if not (_may_match("allocator_oom", line) and _ALLOCATOR_OOM.search(line.text)):
        return []
    text, consumed = _joined_message(line)
    numbers = messages.parse_allocator_message(text)
    if numbers.garbage_size:
        return [
            _failure(
                line,
                "garbage_size",
                NOT_OOM,
                EXPLICIT,
                "a request of more than 1 EB is a corrupt size (shape bug or a failed collective), not a shortage",
                text,
                consumed=consumed,
            )
        ]
    if numbers.requested is None and numbers.total is None:
        return [
            _failure(
                line,
                "allocator_oom_bare",
                CAPACITY,
                DIRECT,
                "PyTorch allocator OOM without its numbers; capacity is the default reading",
                text,
                consumed=consumed,
            )
        ]
    return [
        _failure(
            line,
            "allocator_oom",
            None,
            EXPLICIT,
            "PyTorch caching-allocator OOM",
            _HINT.sub("", text),
            numbers,
            consumed,
        )
    ]


# --- CUDA runtime, libraries, NCCL -------------------------------------------------------

_SIMPLE: list[tuple[str, _Matcher, str | None, int, str]] = [
    # (kind, pattern, label, strength, note)
    (
        "nccl_oom",
        _Either(
            re.compile(r"Cuda failure (?:[0-9]{1,9} )?'out of memory'|Failed to CUDA calloc"),
            _InOrder("NCCL WARN", "out of memory"),
        ),
        OUTSIDE_PYTORCH,
        EXPLICIT,
        "NCCL could not allocate its buffers: memory outside PyTorch's allocator",
    ),
    (
        "triton_smem",
        re.compile(r"OutOfResources|out of resource: shared memory"),
        NOT_OOM,
        EXPLICIT,
        "Triton ran out of per-SM shared memory, not GPU memory; allocator settings do not help",
    ),
    (
        "driver_oom",
        re.compile(r"CUDA driver error: out of memory"),
        CAPACITY,
        EXPLICIT,
        "expandable segments could not map more device memory: the GPU is full",
    ),
    (
        "cuda_runtime_oom",
        re.compile(r"(?:CUDA|HIP) error: out of memory|cuda runtime error \(2\) : out of memory"),
        OUTSIDE_PYTORCH,
        DIRECT,
        "raw CUDA out of memory, outside the caching allocator (context creation, another process, graph instantiation, an extension)",
    ),
    (
        "triton_launch_oom",
        re.compile(r"Triton Error \[CUDA\]: out of memory"),
        CAPACITY,
        DIRECT,
        "a Triton kernel launch found the GPU full",
    ),
    (
        "cublas_alloc",
        re.compile(r"CUBLAS_STATUS_(?:ALLOC_FAILED|NOT_INITIALIZED)"),
        CAPACITY,
        DIRECT,
        "cuBLAS could not create a handle or workspace: the GPU was full",
    ),
    (
        "cudnn_alloc",
        re.compile(r"CUDNN_STATUS_(?:ALLOC_FAILED|NOT_INITIALIZED)"),
        CAPACITY,
        DIRECT,
        "cuDNN could not allocate: the GPU was full",
    ),
    (
        "cudnn_internal",
        re.compile(r"CUDNN_STATUS_INTERNAL_ERROR"),
        CAPACITY,
        NARRATIVE,
        "cuDNN internal error, which on a full GPU is how cuDNN 9 reports an allocation failure",
    ),
    # host memory
    (
        "host_oom_kill",
        re.compile(
            r"oom[-_]kill|OUT_OF_MEMORY|Out Of Memory|OOMKilled|(?i:out of memory: Killed process)|killed by signal: Killed"
        ),
        HOST_OOM,
        EXPLICIT,
        "the kernel or Slurm killed the process for host memory",
    ),
    (
        "cpu_allocator",
        re.compile(r"DefaultCPUAllocator: (?:not enough memory|can't allocate memory)"),
        HOST_OOM,
        EXPLICIT,
        "PyTorch's CPU allocator ran out of host memory",
    ),
    (
        "exit_sigkill",
        re.compile(
            r"exitcode[ \t]{0,8}:[ \t]{0,8}-9\b|(?i:(?:exit|exited with|return)[ \t]{0,8}(?:exit[ \t]{0,8})?(?:code|status)[ \t]{0,8}[:=]?[ \t]{0,8}(?:-9|137)\b)|Signal 9 \(SIGKILL\)|<Signals\.SIGKILL: 9>|^Killed$"
        ),
        HOST_OOM,
        DIRECT,
        "killed with SIGKILL (exit -9 / 137): the Linux OOM killer is the usual sender",
    ),
    (
        "launcher_sigkill",
        re.compile(r"sigkill_handler"),
        HOST_OOM,
        NARRATIVE,
        "the launcher killed its workers after one died without a Python error, the mark of the host OOM killer",
    ),
    # NCCL's Python-level errors hide the cause; on their own they are weak evidence of NCCL's allocation (docs/allocator.md M7)
    (
        "nccl_cuda_error",
        _Either(
            _InOrder("NCCL error", "unhandled cuda error"),
            _InOrder("NCCL error", "internal error - please report"),
        ),
        OUTSIDE_PYTORCH,
        CIRCUMSTANTIAL,
        "NCCL failed inside a CUDA call, which is how its own out-of-memory surfaces when the NCCL WARN "
        "lines are missing (run with NCCL_DEBUG=WARN to see them)",
    ),
    # configuration errors that look like OOMs
    (
        "pp_cpu_offload",
        re.compile(r"no support for Pipeline parallelism with CPU offloading"),
        CONFIGURATION,
        EXPLICIT,
        "CPU activation offloading needs pipeline_model_parallel_size = 1",
    ),
    (
        "graphs_cpu_offload",
        re.compile(r"CUDA graphs not supported with CPU offloading"),
        CONFIGURATION,
        EXPLICIT,
        "CPU activation offloading cannot be combined with CUDA graphs",
    ),
    (
        "nccl_ub_expandable",
        re.compile(
            r"expandable_segments:True is currently not supported with nccl_ub|MemPool doesn't currently support expandable_segments"
        ),
        CONFIGURATION,
        EXPLICIT,
        "NCCL user buffers (torch.cuda.MemPool) and expandable segments cannot be combined before torch 2.11",
    ),
    (
        "graph_register_assert",
        re.compile(r"Setting NCCL_GRAPH_REGISTER=0 to avoid illegal memory access"),
        CONFIGURATION,
        EXPLICIT,
        "Megatron-Core's guard: CUDA graphs with expandable segments need NCCL_GRAPH_REGISTER=0",
    ),
    (
        "pool_expandable",
        re.compile(
            r"Expandable segments are not compatible with memory pool|incompatible with the expandable-segments allocator|cannot be shared between processes"
        ),
        CONFIGURATION,
        EXPLICIT,
        "a memory pool or CUDA IPC user that expandable segments do not support",
    ),
    (
        "allocator_conf_error",
        re.compile(
            r"in CUDA allocator config|Unrecognized CachingAllocator option|CachingAllocator option \w+ too small|ignores max_split_size_mb|cudaMallocAsync does not yet support"
        ),
        CONFIGURATION,
        EXPLICIT,
        "PYTORCH_CUDA_ALLOC_CONF itself is invalid or unsupported",
    ),
]


# Lower-case words, one of which every match of a kind's pattern contains: a cheap ``in`` test
# skips the pattern on the many triggered lines that cannot match it (see the property test that
# checks detection with and without this table agrees).
NEEDLES: dict[str, tuple[str, ...]] = {
    "nccl_oom": ("out of memory'", "cuda calloc", "nccl warn"),
    "triton_smem": ("outofresources", "out of resource"),
    "driver_oom": ("cuda driver error",),
    "cuda_runtime_oom": ("error: out of memory", "cuda runtime error"),
    "triton_launch_oom": ("triton error",),
    "cublas_alloc": ("cublas_status_",),
    "cudnn_alloc": ("cudnn_status_",),
    "cudnn_internal": ("cudnn_status_",),
    "host_oom_kill": ("oom", "out_of_memory", "out of memory", "killed"),
    "cpu_allocator": ("defaultcpuallocator",),
    "exit_sigkill": ("-9", "137", "sigkill", "killed"),
    "launcher_sigkill": ("sigkill_handler",),
    "nccl_cuda_error": ("nccl error",),
    "pp_cpu_offload": ("cpu offloading",),
    "graphs_cpu_offload": ("cpu offloading",),
    "nccl_ub_expandable": ("expandable_segments",),
    "graph_register_assert": ("nccl_graph_register",),
    "pool_expandable": ("expandable", "cannot be shared"),
    "allocator_conf_error": ("allocator config", "cachingallocator", "max_split_size_mb", "cudamallocasync"),
    "narrative_configuration": ("nccl_graph_register",),
    "narrative_fragmentation": ("fragment", "contiguous", "inactive"),
    "narrative_host": ("memory", "ram", "oom"),
    "narrative_nccl": ("nccl",),
    "narrative_gpu_oom": ("oom", "out"),
    "allocator_oom": ("out", "tried", "cuda"),
    "async_allocator_oom": ("would exceed allowed memory",),
}


def _may_match(kind: str, line: Line) -> bool:
    needles = NEEDLES.get(kind)
    return needles is None or any(n in line.lower for n in needles)


def simple_failures(line: Line) -> list[Failure | Fact]:
    for kind, pattern, label, strength, note in _SIMPLE:
        if _may_match(kind, line) and pattern.search(line.text):
            return [_failure(line, kind, label, strength, note)]
    return []


# --- memory_summary() tables -------------------------------------------------------------

_SUMMARY_ROW = re.compile(
    r"^\|?\s*(Allocated memory|(?:GPU )?[Rr]eserved memory|Non-releasable memory)\s*\|\s*([0-9]{1,20})\s*([KMG]i?B|B)\s*\|\s*([0-9]{1,20})\s*([KMG]i?B|B)"
)
_SUMMARY_OOMS = re.compile(r"CUDA OOMs:\s*([0-9]{1,9})")


def memory_summary(line: Line) -> list[Failure | Fact]:
    """``torch.cuda.memory_summary()``: the table users paste after an OOM."""
    if "memory summary" not in line.text:
        return []
    current, peak, ooms = {}, {}, 0
    following = line.next_lines(40)
    for row in following:
        if m := _SUMMARY_OOMS.search(row):
            ooms = int(m.group(1))
        if m := _SUMMARY_ROW.search(row):
            key = (
                "Reserved memory" if "eserved" in m.group(1) else m.group(1)
            )  # 2.x prints "GPU reserved memory"
            current[key] = to_bytes(m.group(2), m.group(3))
            peak[key] = to_bytes(m.group(4), m.group(5))
    if not ooms:
        return []
    allocated = current.get("Allocated memory")
    stuck = current.get("Non-releasable memory")
    reserved = current.get("Reserved memory")
    strength = DIRECT
    if stuck is not None and allocated:
        label = FRAGMENTATION if stuck >= max(GiB // 2, 0.05 * (reserved or allocated)) else CAPACITY
        note = f"non-releasable (inactive split) memory {stuck / GiB:.2f} GiB"
    elif reserved is not None and allocated is not None:
        label = FRAGMENTATION if reserved - allocated >= max(GiB // 2, 0.1 * reserved) else CAPACITY
        note = f"reserved {reserved / GiB:.2f} GiB vs allocated {allocated / GiB:.2f} GiB"
    elif allocated is not None and peak.get("Allocated memory"):
        # weak: a lower current than peak allocation says the space existed once, not where it went
        strength = NARRATIVE
        drop = peak["Allocated memory"] - allocated
        label = FRAGMENTATION if drop >= 0.1 * peak["Allocated memory"] else CAPACITY
        note = (
            f"the OOM came with {allocated / GiB:.1f} GiB allocated although {peak['Allocated memory'] / GiB:.1f} GiB "
            "had fit earlier"
            + (": the space existed but no longer in one piece" if label == FRAGMENTATION else "")
        )
    else:
        return []
    rows = 0
    while rows < len(following) and following[rows].lstrip().startswith("|"):
        rows += 1
    text = "\n".join([line.text, *following[:12]])
    return [_failure(line, "memory_summary", label, strength, note, text, consumed=rows)]


# --- sentences in pasted issues and post-mortems ------------------------------------------

_NARRATIVE: list[tuple[str, _Matcher, str, str]] = [
    (
        "narrative_configuration",
        _AllOf("nccl_graph_register", "expandable_segments", ("assert", "without", "illegal memory access")),
        CONFIGURATION,
        "expandable segments with CUDA graphs but without NCCL_GRAPH_REGISTER=0 trips Megatron-Core's guard",
    ),
    (
        "narrative_fragmentation",
        _Either(
            re.compile(r"\bfragment(?:ed|ation)\b|\bcontiguous\s+block", re.I),
            _InOrder(re.compile(r"\binactive\b", re.I), re.compile(r"\breserved\b", re.I)),
        ),
        FRAGMENTATION,
        "the report attributes the failure to allocator fragmentation",
    ),
    (
        "narrative_host",
        re.compile(
            r"\b(?:system|host|CPU)\s+(?:RAM\s+)?out\s+of\s+memory|out\s+of\s+(?:host|system|CPU)\s+(?:memory|RAM)|\b(?:DRAM|host RAM)\b|\bOOM[- ]killer\b",
            re.I,
        ),
        HOST_OOM,
        "the report attributes the failure to host memory",
    ),
    (
        "narrative_nccl",
        _InOrder(re.compile(r"\bNCCL\b", re.I), re.compile(r"\b(?:OOM|out of memory)\b", re.I)),
        OUTSIDE_PYTORCH,
        "the report attributes the failure to NCCL's memory",
    ),
    (
        "narrative_gpu_oom",
        re.compile(r"\b(?:CUDA|GPU)\s+(?:OOM|out\s+of\s+memory)|\bOOMs?\b|\bOOM(?:ed|ing)\b"),
        CAPACITY,
        "an out-of-memory is reported without the allocator's numbers; capacity is the default reading",
    ),
]


# "not fragmentation", "ruled out fragmentation": a sentence that denies the cause does not claim it
_DENIED_FRAGMENTATION = re.compile(
    r"(?:\bnot|\bno|n't|\brules?\s+out|\bruled\s+out)\s+(?:\w+\s+){0,3}fragment", re.I
)


def narrative(line: Line) -> list[Failure | Fact]:
    if not any(_may_match(kind, line) for kind, *_ in _NARRATIVE):
        return []
    text = line.text
    if "fragmentation" in line.lower or "if reserved" in line.lower:
        text = _HINT_PIECES.sub("", text)  # PyTorch's own hint mentions fragmentation in every message
    for kind, pattern, label, note in _NARRATIVE:
        if not _may_match(kind, line):
            continue
        if kind == "narrative_fragmentation" and _DENIED_FRAGMENTATION.search(text):
            continue
        if pattern.search(text):
            strength = CIRCUMSTANTIAL if kind == "narrative_gpu_oom" else NARRATIVE
            return [_failure(line, kind, label, strength, note)]
    return []


# --- context facts -----------------------------------------------------------------------

# A setting in an env dump or launch script; not PyTorch's own hint, "...=expandable_segments:True to avoid
# fragmentation", which it prints whatever is set (docs/allocator.md M5), also when a wrapped line starts with it.
_CONF_SETTING = re.compile(
    r"(PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF)['\"\]]*\s*[=:]\s*['\"]?([\w:.,\[\]>-]*+)(?!\s*to\s*avoid)"
)
_TORCH_VERSION = re.compile(
    r"\b(?:torch|PyTorch)(?:[ _]version)?(?:[ \t]{0,8}[:=]{1,2}[ \t]{0,8}|[ \t]{1,8}|[ \t]{0,8}\.{2,40}[ \t]{0,8})"
    r"v?([0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)(?![0-9])",
    re.I,
)
_EXPANDABLE_UNSUPPORTED = re.compile(r"expandable_segments not supported on this platform")
_WORLD_SIZE = re.compile(r"world[ _]size\W{0,12}([0-9]{1,9})(?![0-9])", re.I)
_RANK_NUMBER = re.compile(r"[0-9]{1,9}\]")
_DECIMAL = re.compile(r"\s{0,8}([0-9]{1,20}(?:\.[0-9]{0,20})?)")
# Megatron-LM's report_memory(): "[Rank 3] (after 10 iterations) memory (MB) | allocated: ... |
# max allocated: ... | reserved: ... | max reserved: ..." (MB there are MiB). Read after the
# "memory (MB)" found by a plain search, anchored there, so the line is scanned once.
_RANK_MEMORY_TABLE = re.compile(
    r"\s{0,8}\|\s{0,8}allocated:\s{0,8}([0-9.]{1,30})\s{0,8}\|\s{0,8}max allocated:\s{0,8}([0-9.]{1,30})"
    r"\s{0,8}\|\s{0,8}reserved:\s{0,8}([0-9.]{1,30})\s{0,8}\|\s{0,8}max reserved:\s{0,8}([0-9.]{1,30})"
)
_ITERATION = re.compile(r"(?:after|iteration)\s+([0-9]{1,12})")
_EXIT_CODE = re.compile(
    r"(?:exits with return code = |\bexitcode[ \t]{0,8}:[ \t]{0,8})(-?[0-9]{1,9})(?![0-9])"
)
_GRAPH_CAPTURE_FRAME = re.compile(r"\b(make_graphed_callables|create_cudagraphs|capture_end)\b")


RANK_MEMORY = "rank_memory"  # the kind of fact a Megatron memory report line gives
# A resume (docs/resume.md): a traceback frame of Megatron-LM's or Megatron-Bridge's checkpoint
# loading puts the failure inside the load; their "successfully loaded checkpoint" line starts the
# first iteration after it, which the training log's first iteration line ends.
RESUME_LOAD = "checkpoint load"
RESUME_FIRST_STEP = "first iteration after resume"
RESUME_PHASES = (RESUME_LOAD, RESUME_FIRST_STEP)
ITERATION = "iteration"  # the kind of fact a training-log iteration line gives
_LOAD_FRAME = re.compile(
    r"\bin (?:load_checkpoint|_load_base_checkpoint|_load_global_dist_base_checkpoint|_load_checkpoint_from_path)\b"
)
_ITERATION_LINE = re.compile(r"\biteration\s+\d+/\s*\d+\s*\|")


@dataclass(frozen=True)
class RankMemoryReport:
    """One of Megatron-LM's per-rank memory report lines, in bytes."""

    rank: int
    label: str  # what the line says it follows, e.g. "(after 10 iterations)"
    iteration: int | None  # the iteration the label names, if any
    allocated: int
    max_allocated: int
    reserved: int
    max_reserved: int


def rank_memory_report(text: str) -> RankMemoryReport | None:
    """Parse a ``[Rank N] (...) memory (MB) | allocated: ...`` line, or None if ``text`` is not one."""
    at = text.find("[Rank ")
    rank = _RANK_NUMBER.match(text, at + 6) if at >= 0 else None
    if rank is None:
        return None
    table = text.find("memory (MB)", rank.end())
    m = _RANK_MEMORY_TABLE.match(text, table + 11) if table >= 0 else None
    if m is None:
        return None
    numbers = [float_or_none(m.group(i)) for i in range(1, 5)]
    if None in numbers:
        return None
    label = text[rank.end() : table].strip()
    iteration = _ITERATION.search(label[:200])
    allocated, max_allocated, reserved, max_reserved = (round(n * MiB) for n in numbers)  # type: ignore[operator]
    return RankMemoryReport(
        int(rank.group(0)[:-1]),
        label,
        int(iteration.group(1)) if iteration else None,
        allocated,
        max_allocated,
        reserved,
        max_reserved,
    )


def _cpu_percent(text: str) -> float | None:
    at = text.find("CPU Virtual Memory:")
    label = text.rfind("percent = ") if at >= 0 else -1
    if label < at:
        return None
    value = _DECIMAL.match(text, label + 10)
    return float(value.group(1)) if value and text.startswith("%", value.end()) else None


def facts(line: Line) -> list[Failure | Fact]:
    text, where, lower = line.text, line.where, line.lower
    found: list[Failure | Fact] = []
    if "expandable_segments not supported" in text and _EXPANDABLE_UNSUPPORTED.search(text):
        found.append(
            Fact("expandable_off", where, _excerpt(text), "requested but not supported on this platform")
        )
    elif "alloc_conf" in lower and (m := _CONF_SETTING.search(text)) and "try setting" not in text:
        on = "expandable_segments:true" in m.group(2).lower()
        found.append(
            Fact(
                "expandable_on" if on else "expandable_off",
                where,
                _excerpt(text),
                f"{m.group(1)}={m.group(2)}",
            )
        )
    if "torch" in lower and (m := _TORCH_VERSION.search(text)):
        found.append(Fact("torch_version", where, _excerpt(text), m.group(1)))
    if "world" in lower and (m := _WORLD_SIZE.search(text)):
        found.append(Fact("world_size", where, _excerpt(text), int(m.group(1))))
    if (report := rank_memory_report(text)) is not None:
        found.append(Fact(RANK_MEMORY, where, _excerpt(text), (report.rank, report.max_reserved)))
    if (percent := _cpu_percent(text)) is not None:
        found.append(Fact("host_memory_percent", where, _excerpt(text), percent))
    if "exit" in lower and (m := _EXIT_CODE.search(text)):
        found.append(Fact("exit_code", where, _excerpt(text), int(m.group(1))))
    if ("graph" in lower or "capture_end" in lower) and (m := _GRAPH_CAPTURE_FRAME.search(text)):
        found.append(Fact("phase", where, _excerpt(text), "CUDA-graph capture"))
    if "checkpoint" in lower:
        if "successfully loaded checkpoint" in lower:
            found.append(Fact("phase", where, _excerpt(text), RESUME_FIRST_STEP))
        elif _LOAD_FRAME.search(text):
            found.append(Fact("phase", where, _excerpt(text), RESUME_LOAD))
    if "iteration " in lower and _ITERATION_LINE.search(text):
        found.append(Fact(ITERATION, where, _excerpt(text)))
    return found


# Order matters: the first detector that reports a failure for a line wins; facts are always collected.
FAILURE_DETECTORS: tuple[Detector, ...] = (simple_failures, allocator_oom, memory_summary, narrative)


def rank_memory_line(text: str) -> RankMemoryReport | None:
    """The report when ``text`` is a line of Megatron's per-rank memory report, which ``detect``
    reads on a short path: printed by every rank every log interval, it is the common triggered
    line in a healthy log."""
    return rank_memory_report(text) if text.startswith("[Rank ") else None


def detect(line: Line) -> list[Failure | Fact]:
    if (report := rank_memory_line(line.text)) is not None:
        return [Fact(RANK_MEMORY, line.where, _excerpt(line.text), (report.rank, report.max_reserved))]
    found = facts(line)
    for detector in FAILURE_DETECTORS:
        failures = detector(line)
        if failures:
            return found + failures
    return found
