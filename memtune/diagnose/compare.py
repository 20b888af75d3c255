"""Two memory snapshots side by side, or a folder of per-rank snapshots against their median rank.

Each snapshot is reduced to a :class:`Profile`: the blocks live at the moment its allocated
memory peaked, attributed to allocation sites, categories and training phases. The trace is a
ring buffer of allocator events that ends at the snapshot, so the live set at the peak is
rebuilt from the blocks live at the snapshot by undoing, newest first, the events after the
peak (an ``alloc`` undone removes its block, a ``free_completed`` undone brings back the block
its ``alloc`` made). Without a trace the peak is the snapshot itself.

- **Site**: the innermost two frames outside PyTorch of the block's allocation stack, folded
  ("attention.py:88 in forward < layer.py:301 in forward").
- **Category**: the first of the user's ``--category NAME=REGEX`` whose pattern matches a frame
  of the stack, else the first built-in pattern that does (:data:`CATEGORIES`), else by phase:
  blocks allocated in forward are activations, in backward gradients, before the first
  forward set-up state (weights and buffers).
- **Phase**: from the trace's order. An event whose stack names the optimizer, a backward or a
  forward starts that phase; events in between (most backward kernels run on autograd's own
  thread, whose allocations carry no Python frames) stay in the phase they are in. A block
  allocated before the trace began is ``before trace``.

Work is one pass over the blocks and three over the trace events, each object visited once
(the summary's budget), so comparing costs about what reading the files costs
(``benchmarks/snapshot_compare.py``).
"""

from __future__ import annotations

import re
import signal
import statistics
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from memtune.diagnose.snapshot import (
    _INTERNAL_FRAMES,
    _Budget,
    _dicts,
    _int,
    _text,
    device_index,
    read_snapshot,
)
from memtune.errors import InputError
from memtune.infile import distinct_files, files_in
from memtune.limits import MAX_PATTERN_SECONDS, MAX_SNAPSHOT_FOLDER_FILES
from memtune.numbers import cut
from memtune.plotfile import save_figure

BEFORE_TRACE = "before trace"
SETUP, FORWARD, BACKWARD, OPTIMIZER = "setup", "forward", "backward", "optimizer"
PHASES = (BEFORE_TRACE, SETUP, FORWARD, BACKWARD, OPTIMIZER)

# Built-in categories, tried in this order against each frame ("file:line in function").
# Optimizer first: Megatron's optimizer builds its fp32 main copies inside model code paths too.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("optimizer state", r"/optim/|optimizer|_init_group|\badam"),
    ("gradients", r"param_and_grad_buffer|grad_buffer|main_grad|finalize_model_grads"),
    (
        "communication",
        r"torch/distributed/|nccl|all_gather|reduce_scatter|all_reduce|all_to_all|p2p_communication"
        r"|token_dispatcher|_coalescing",
    ),
    ("workspace", r"workspace|cublas|global_memory_buffer|GlobalMemoryBuffer"),
    ("weights", r"reset_parameters|_initialize_affine_weight|init_method|load_state_dict|get_model\b"),
)
SETUP_STATE = "set-up (weights, buffers)"
_PHASE_CATEGORY = {
    FORWARD: "activations",
    BACKWARD: "gradients",
    SETUP: SETUP_STATE,
    OPTIMIZER: "optimizer state",
}
OTHER = "other"
_FRAMES_KEPT = 64  # the user's frames are near the top of a stack

# Anchored on whole function names: Megatron's schedules are named forward_backward_*, and
# every allocation of a step has one of them on its stack.
_OPTIMIZER_FRAME = re.compile(r"/optim/|optimizer\.py:| in step$|_init_group")
_BACKWARD_FRAME = re.compile(r" in (backward|backward_step|_engine_run_backward)$|autograd/__init__\.py:")
_FORWARD_FRAME = re.compile(r" in (forward|forward_step|_forward)$")


class _OutOfTime(Exception):
    pass


def _out_of_time(signum: int, frame: FrameType | None) -> None:
    raise _OutOfTime


@dataclass(frozen=True)
class Category:
    """A category of blocks: those with a frame ``pattern`` matches. A user's pattern (``text``
    is what they typed) runs with a budget of CPU time per stack: Python's ``re`` backtracks, and
    nested repetition such as ``(a+)+$`` takes exponential time on a frame's text."""

    name: str
    pattern: re.Pattern[str]
    text: str = ""  # NAME=REGEX as the user typed it; "" for a built-in category

    @classmethod
    def parse(cls, text: str) -> Category:
        """``NAME=REGEX`` as the user typed it."""
        name, sep, regex = text.partition("=")
        if not sep or not name.strip() or not regex:
            raise InputError(f"--category {cut(text)}: expected NAME=REGEX, e.g. 'router=moe/router'")
        try:
            return cls(name.strip(), re.compile(regex), text)
        except (re.error, RecursionError, OverflowError) as exc:
            raise InputError(f"--category {cut(text)}: not a regular expression ({cut(str(exc))})") from None

    def matches(self, frames: tuple[str, ...]) -> bool:
        """Whether the pattern matches one of ``frames``. A user's pattern that spends more than
        MAX_PATTERN_SECONDS of CPU on one stack is refused (in the main thread, where Python
        delivers the timer's signal; ``re`` checks for signals while it backtracks)."""
        if not self.text or threading.current_thread() is not threading.main_thread():
            return any(self.pattern.search(f) for f in frames)
        previous = signal.signal(signal.SIGVTALRM, _out_of_time)
        signal.setitimer(signal.ITIMER_VIRTUAL, MAX_PATTERN_SECONDS)
        try:
            return any(self.pattern.search(f) for f in frames)
        except _OutOfTime:
            raise InputError(
                f"--category {cut(self.text)}: took more than {MAX_PATTERN_SECONDS:g} CPU second on one stack "
                "(nested repetition such as (a+)+ backtracks without end); simplify the pattern"
            ) from None
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            signal.signal(signal.SIGVTALRM, previous)


_BUILT_IN = tuple(Category(name, re.compile(p)) for name, p in CATEGORIES)


@dataclass
class Profile:
    """What one snapshot held at its peak."""

    source: str
    peak_bytes: int  # allocated (incl. pending frees) at the trace's peak, or at the snapshot
    snapshot_bytes: int  # allocated at the snapshot
    peak_phase: str
    traced: bool  # False: no trace, the peak is the snapshot
    by_site: dict[str, int] = field(default_factory=dict)
    by_category: dict[str, int] = field(default_factory=dict)
    by_phase: dict[str, int] = field(default_factory=dict)
    rank: int | None = None
    # For the plot: (seconds from the first event, bytes per category) at up to _PLOT_POINTS events.
    timeline: list[tuple[float, dict[str, int]]] = field(default_factory=list)


@dataclass(frozen=True)
class Delta:
    key: str
    a: int
    b: int

    @property
    def change(self) -> int:
        return self.b - self.a


@dataclass
class Comparison:
    a: Profile
    b: Profile
    sites: list[Delta]
    categories: list[Delta]
    phases: list[Delta]

    @property
    def growth(self) -> int:
        return self.b.peak_bytes - self.a.peak_bytes


@dataclass
class RankComparison:
    """A folder of per-rank snapshots: the highest rank against the median rank."""

    profiles: list[Profile]  # by rank
    median: Profile
    highest: Profile
    comparison: Comparison


@dataclass
class _Live:
    size: int
    frames: tuple[str, ...]
    phase: str


class _Stacks:
    """Stacks as tuples of "file:line in function" texts, innermost first, PyTorch's own frames
    included (a category or phase may be named by them: ``torch/optim``, autograd's
    ``backward``). Texts and stacks are shared: a trace repeats a few stacks many times, so a
    profile holds each once."""

    def __init__(self) -> None:
        self.texts: dict[tuple[object, object, object], str] = {}
        self.stacks: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.sites: dict[tuple[str, ...], str] = {}

    def of(self, raw: object) -> tuple[str, ...]:
        if not isinstance(raw, list):
            return ()
        texts, frames = self.texts, []
        for f in raw[:_FRAMES_KEPT]:
            if isinstance(f, dict):
                key = (f.get("filename", "?"), f.get("line", "?"), f.get("name", "?"))
                try:
                    text = texts.get(key)
                except TypeError:  # an unhashable field: corrupt, shown by its type
                    key = tuple(_text(v) for v in key)  # type: ignore[assignment]
                    text = texts.get(key)
                if text is None:
                    text = texts[key] = f"{_text(key[0])}:{_text(key[1])} in {_text(key[2])}"
                frames.append(text)
        stack = tuple(frames)
        return self.stacks.setdefault(stack, stack)

    def site(self, frames: tuple[str, ...]) -> str:
        site = self.sites.get(frames)
        if site is None:
            site = self.sites[frames] = site_of(frames)
        return site


def _user_frames(frames: tuple[str, ...]) -> list[str]:
    """The frames outside PyTorch; with stacks="all" the allocator's C++ frames come first, and
    the user's code is Python."""
    outside = [f for f in frames if not any(mark in f.partition(":")[0] for mark in _INTERNAL_FRAMES)]
    python = [f for f in outside if f.partition(":")[0].endswith(".py")]
    return python or outside


def _short(frame: str) -> str:
    path, _, rest = frame.partition(":")
    return "/".join(path.split("/")[-2:]) + ":" + rest


def site_of(frames: tuple[str, ...]) -> str:
    """The innermost frame outside PyTorch, and the function that called it."""
    user = _user_frames(frames)
    if not user:
        return "(no stack outside PyTorch)"
    caller = f" < {user[1].rpartition(' in ')[2]}" if len(user) > 1 else ""
    return _short(user[0]) + caller


def category_of(frames: tuple[str, ...], phase: str, user: tuple[Category, ...]) -> str:
    for category in (*user, *_BUILT_IN):
        if category.matches(frames):
            return category.name
    return _PHASE_CATEGORY.get(phase, OTHER)


def _phase_named(frames: tuple[str, ...]) -> str | None:
    if any(_OPTIMIZER_FRAME.search(f) for f in frames):
        return OPTIMIZER
    if any(_BACKWARD_FRAME.search(f) for f in frames):
        return BACKWARD
    if any(_FORWARD_FRAME.search(f) for f in frames):
        return FORWARD
    return None


_PLOT_POINTS = 2000


def profile(snap: dict[str, Any], source: str, user: tuple[Category, ...] = ()) -> Profile:
    """Reduce a snapshot (as :func:`~memtune.diagnose.snapshot.read_snapshot` returns it)."""
    budget, stacks = _Budget(), _Stacks()
    categories: dict[tuple[tuple[str, ...], str], str] = {}

    def category(block: _Live) -> str:
        key = (block.frames, block.phase)
        name = categories.get(key)
        if name is None:
            name = categories[key] = category_of(block.frames, block.phase, user)
        return name

    segments = _dicts(snap["segments"], budget)
    device = _main_device(segments)
    live = _live_at_snapshot(segments, device, budget, stacks)
    events = _trace(snap, device, budget, stacks)
    at_snapshot = sum(b.size for b in live.values())
    phases, made_by = _phases_of(events)
    start = _live_at_trace_start(live, events, phases, made_by)
    peak, peak_index, timeline = _replay(start, events, phases, category)

    at_peak = dict(start)
    for i in range(peak_index + 1):
        _redo(at_peak, events, phases, i)
    if not events:
        at_peak, peak = live, at_snapshot
    result = Profile(
        source=source,
        peak_bytes=peak,
        snapshot_bytes=at_snapshot,
        peak_phase=phases[peak_index] if events and peak_index >= 0 else BEFORE_TRACE,
        traced=bool(events),
        timeline=timeline,
    )
    for block in at_peak.values():
        _add(result.by_site, stacks.site(block.frames), block.size)
        _add(result.by_category, category(block), block.size)
        _add(result.by_phase, block.phase, block.size)
    return result


def _live_at_snapshot(
    segments: list[dict[str, Any]], device: int, budget: _Budget, stacks: _Stacks
) -> dict[int, _Live]:
    """The blocks allocated on ``device`` when the snapshot was taken, by address."""
    live: dict[int, _Live] = {}
    for seg in segments:
        if device_index(seg.get("device")) != device:
            continue
        for raw in _dicts(seg.get("blocks"), budget):
            if raw.get("state") in ("active_allocated", "active_pending_free"):
                address = _int(raw.get("address"))
                live[address] = _Live(_int(raw.get("size")), stacks.of(raw.get("frames")), BEFORE_TRACE)
    return live


def _phases_of(events: list[_Event]) -> tuple[list[str], dict[int, int]]:
    """Each event's phase, in trace order; and for each free, the alloc that made its block."""
    named_phases: dict[tuple[str, ...], str | None] = {}
    phase, phases = SETUP, []
    made_by: dict[int, int] = {}  # event index of a free_completed -> index of its alloc
    last_alloc: dict[int, int] = {}
    for i, (action, address, _size, frames, _t) in enumerate(events):
        if action == "alloc":
            if frames not in named_phases:
                named_phases[frames] = _phase_named(frames)
            named = named_phases[frames]
            if named is not None:
                phase = named
            elif not frames and phase == FORWARD:
                phase = BACKWARD  # autograd's engine thread: no Python stack
            last_alloc[address] = i
        elif action == "free_completed" and address in last_alloc:
            made_by[i] = last_alloc.pop(address)
        phases.append(phase)
    return phases, made_by


def _live_at_trace_start(
    live: dict[int, _Live], events: list[_Event], phases: list[str], made_by: dict[int, int]
) -> dict[int, _Live]:
    """The live set when the trace began: every event undone, newest first."""
    start = dict(live)
    for i in range(len(events) - 1, -1, -1):
        _undo(start, events, phases, made_by, i)
    for address, block in start.items():
        start[address] = _Live(block.size, block.frames, BEFORE_TRACE)
    return start


def _replay(
    start: dict[int, _Live], events: list[_Event], phases: list[str], category: Callable[[_Live], str]
) -> tuple[int, int, list[tuple[float, dict[str, int]]]]:
    """Replay the events from the trace's start: (peak, its event's index or -1, the plot's curve)."""
    totals: dict[str, int] = {}
    for block in start.values():
        key = category(block)
        totals[key] = totals.get(key, 0) + block.size
    current = sum(totals.values())
    peak, peak_index = current, -1
    step = max(1, len(events) // _PLOT_POINTS)
    t0 = events[0][4] if events else 0
    timeline = [(0.0, dict(totals))] if events else []
    replay = dict(start)
    for i, (action, address, size, frames, t) in enumerate(events):
        if action == "alloc":
            block = _Live(size, frames, phases[i])
            replay[address] = block
            key = category(block)
            totals[key] = totals.get(key, 0) + size
            current += size
        elif action == "free_completed" and address in replay:
            gone = replay.pop(address)
            key = category(gone)
            totals[key] -= gone.size
            current -= gone.size
        if current > peak:
            peak, peak_index = current, i
        if i % step == 0 or i == len(events) - 1:
            timeline.append(((t - t0) / 1e6, dict(totals)))
    return peak, peak_index, timeline


_Event = tuple[str, int, int, tuple[str, ...], int]  # action, address, size, frames, time (us)


def _trace(snap: dict[str, Any], device: int, budget: _Budget, stacks: _Stacks) -> list[_Event]:
    traces = snap.get("device_traces")
    if not isinstance(traces, list) or len(traces) <= device:
        return []
    events: list[_Event] = []
    for e in _dicts(traces[device], budget):
        action = e.get("action")
        if action in ("alloc", "free_completed"):
            events.append(
                (
                    action,
                    _int(e.get("addr")),
                    _int(e.get("size")),
                    stacks.of(e.get("frames")),
                    _int(e.get("time_us")),
                )
            )
    return events


def _undo(
    live: dict[int, _Live], events: list[_Event], phases: list[str], made_by: dict[int, int], i: int
) -> None:
    action, address, size, frames, _t = events[i]
    if action == "alloc":
        live.pop(address, None)
    elif i in made_by:
        _, _, made_size, made_frames, _ = events[made_by[i]]
        live[address] = _Live(made_size, made_frames, phases[made_by[i]])
    else:  # allocated before the trace began
        live[address] = _Live(size, frames, BEFORE_TRACE)


def _redo(live: dict[int, _Live], events: list[_Event], phases: list[str], i: int) -> None:
    action, address, size, frames, _t = events[i]
    if action == "alloc":
        live[address] = _Live(size, frames, phases[i])
    else:
        live.pop(address, None)


def _main_device(segments: list[dict[str, Any]]) -> int:
    counts: dict[int, int] = {}
    for seg in segments:
        device = device_index(seg.get("device"))
        counts[device] = counts.get(device, 0) + 1
    return max(counts, key=lambda d: (counts[d], -d)) if counts else 0


def _add(table: dict[str, int], key: str, size: int) -> None:
    table[key] = table.get(key, 0) + size


def _deltas(a: dict[str, int], b: dict[str, int]) -> list[Delta]:
    keys = set(a) | set(b)
    rows = [Delta(k, a.get(k, 0), b.get(k, 0)) for k in keys]
    return sorted((r for r in rows if r.change), key=lambda r: (-abs(r.change), r.key)) + sorted(
        (r for r in rows if not r.change), key=lambda r: (-r.a, r.key)
    )


def compare(a: Profile, b: Profile) -> Comparison:
    return Comparison(
        a,
        b,
        _deltas(a.by_site, b.by_site),
        _deltas(a.by_category, b.by_category),
        _deltas(a.by_phase, b.by_phase),
    )


def compare_files(a: str, b: str, user: Iterable[Category] = ()) -> Comparison:
    categories = tuple(user)
    return compare(profile(read_snapshot(a), a, categories), profile(read_snapshot(b), b, categories))


_RANK = re.compile(r"(\d+)(?!.*\d)")


def snapshot_files(folder: Path) -> list[tuple[int, Path]]:
    """The snapshots of a folder with their ranks (the last number in each file name)."""
    files = files_in(folder, (".pickle", ".pkl"), "a memory snapshot")
    if len(files) > MAX_SNAPSHOT_FOLDER_FILES:
        raise InputError(
            f"{cut(str(folder))}: {len(files)} snapshots; at most {MAX_SNAPSHOT_FOLDER_FILES} are compared"
        )
    if len(files) < 2:
        raise InputError(f"{cut(str(folder))}: needs at least two *.pickle snapshots, found {len(files)}")
    distinct_files(files, "snapshot")  # a folder of links to one file would read it over and over
    ranked = []
    for position, path in enumerate(files):
        match = _RANK.search(path.stem)
        ranked.append((int(match.group(1)) if match and len(match.group(1)) < 7 else position, path))
    if len({r for r, _ in ranked}) != len(ranked):
        ranked = list(enumerate(files))  # names do not tell ranks apart: their order does
    return sorted(ranked)


def compare_ranks(folder: str, user: Iterable[Category] = ()) -> RankComparison:
    categories = tuple(user)
    profiles = []
    for rank, path in snapshot_files(Path(folder)):
        p = profile(read_snapshot(path), str(path), categories)
        p.rank = rank
        p.timeline = []  # one plot per pair; a folder keeps only its two
        profiles.append(p)
    ordered = sorted(profiles, key=lambda p: (p.peak_bytes, p.rank or 0))
    median = ordered[(len(ordered) - 1) // 2]
    highest = ordered[-1]
    return RankComparison(profiles, median, highest, compare(median, highest))


def median_peak(profiles: list[Profile]) -> float:
    return statistics.median(p.peak_bytes for p in profiles)


def plot(c: Comparison, out: str | Path) -> None:
    """Both timelines stacked by category, and the change per category (growth in red)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gib = float(1 << 30)
    names = [d.key for d in c.categories]
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), dpi=110, gridspec_kw={"height_ratios": [2, 2, 1.4]})
    colours = plt.get_cmap("tab10")
    for ax, p, label in ((axes[0], c.a, "A"), (axes[1], c.b, "B")):
        if p.timeline:
            times = [t for t, _ in p.timeline]
            stacks = [[row.get(n, 0) / gib for _, row in p.timeline] for n in names]
            ax.stackplot(
                times, stacks, labels=names, colors=[colours(i % 10) for i in range(len(names))], step="post"
            )
            ax.set_xlabel("time since the first trace event (s)")
        else:
            ax.text(
                0.5, 0.5, "no trace recorded: only the snapshot's state", ha="center", transform=ax.transAxes
            )
        ax.set_ylabel("GiB")
        ax.set_title(f"{label}: {cut(p.source, 60)} — peak {p.peak_bytes / gib:.2f} GiB", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=7)
    changes = [d.change / gib for d in c.categories]
    axes[2].barh(names, changes, color=["#c44e52" if x > 0 else "#4c72b0" for x in changes])
    axes[2].axvline(0, color="black", linewidth=0.8)
    axes[2].set_xlabel("B − A at the peak (GiB); growth in red")
    fig.tight_layout()
    try:
        save_figure(fig, str(out))
    finally:
        plt.close(fig)
