"""Read ``torch.cuda.memory._dump_snapshot()`` files without executing anything, and summarise them.

A pickle can name any importable callable and have it run while loading. Snapshots are plain
dicts, lists, tuples, strings and numbers, which pickle builds with opcodes that never import
anything; so the unpickler refuses every import (``find_class``) and every persistent id, and
the file size is capped before loading.
"""

from __future__ import annotations

import io
import pickle
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from memtune.diagnose.evidence import CAPACITY, FRAGMENTATION
from memtune.diagnose.sizes import GiB, gib
from memtune.errors import InputError

MAX_SNAPSHOT_BYTES = 2 * GiB
_INTERNAL_FRAMES = ("/torch/", "\\torch\\", "<frozen", "/site-packages/torch", "c10/", ".so", "??")


class _Refused(pickle.UnpicklingError):
    pass


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise _Refused(
            f"it references {module}.{name}; a memory snapshot holds only plain data, so this file is "
            "refused (loading it could run code)"
        )

    def persistent_load(self, pid):
        raise _Refused(
            "it uses persistent ids; a memory snapshot holds only plain data, so this file is refused"
        )


def load_plain_pickle(data: bytes, name: str) -> object:
    try:
        return _PlainDataUnpickler(io.BytesIO(data)).load()
    except _Refused as exc:
        raise InputError(f"{name}: not loaded: {exc}") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
        MemoryError,
        RecursionError,
        UnicodeDecodeError,
    ) as exc:
        raise InputError(
            f"{name}: not a readable pickle ({exc.__class__.__name__}: {exc}; truncated or corrupt?)"
        ) from None


@dataclass(frozen=True)
class Site:
    frame: str  # "file:line in function"
    bytes: int
    blocks: int


@dataclass(frozen=True)
class FailedRequest:
    device: int
    size: int
    device_free: int | None


@dataclass
class SnapshotSummary:
    source: str
    reserved: int
    allocated: int
    active_pending_free: int
    inactive: int  # free bytes inside segments
    fragmented: int  # free bytes inside segments that also hold live blocks (empty_cache cannot return them)
    largest_free_block: int
    segments: int
    segment_sizes: list[tuple[int, int]]  # (size, count), most common first
    private_pool_reserved: int
    expandable_segments: bool | None
    allocator_settings: dict
    top_sites: list[Site]
    failed_request: FailedRequest | None
    label: str | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def fragmentation_ratio(self) -> float:
        return self.fragmented / self.reserved if self.reserved else 0.0


def read_snapshot(path: str | Path) -> dict:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_SNAPSHOT_BYTES:
            raise InputError(
                f"{path}: {gib(size)} is larger than the {gib(MAX_SNAPSHOT_BYTES)} snapshot limit"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
    if not data:
        raise InputError(f"{path}: empty file, not a memory snapshot")
    snap = load_plain_pickle(data, str(path))
    if isinstance(snap, list):  # torch.cuda.memory_snapshot() returns the segments alone
        snap = {"segments": snap}
    segments = snap.get("segments") if isinstance(snap, dict) else None
    if not isinstance(segments, list) or (segments and not any(isinstance(s, dict) for s in segments)):
        raise InputError(f"{path}: a pickle, but not a memory snapshot (no 'segments' list)")
    return snap


def _frame_text(frame: dict) -> str:
    return f"{frame.get('filename', '?')}:{frame.get('line', '?')} in {frame.get('name', '?')}"


def _site(frames: object) -> str:
    """The first frame outside PyTorch itself: the user code that asked for the memory."""
    if not isinstance(frames, list) or not frames:
        return "(no stack recorded)"
    outside = [
        f
        for f in frames
        if isinstance(f, dict) and not any(mark in str(f.get("filename", "")) for mark in _INTERNAL_FRAMES)
    ]
    # With stacks="all" the C++ frames of the allocator come first; the user's code is Python.
    python = [f for f in outside if str(f.get("filename", "")).endswith(".py")]
    for candidates in (python, outside):
        if candidates:
            return _frame_text(candidates[0])
    return _frame_text(frames[0]) if isinstance(frames[0], dict) else "(no stack recorded)"


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def summarise(snap: dict, source: str, top: int = 10) -> SnapshotSummary:
    segments = [s for s in snap["segments"] if isinstance(s, dict)]
    reserved = allocated = pending = inactive = fragmented = largest = private = 0
    sizes: Counter = Counter()
    sites: dict[str, list[int]] = {}
    expandable_flags = set()
    for seg in segments:
        total = _int(seg.get("total_size"))
        reserved += total
        sizes[total] += 1
        if "is_expandable" in seg:
            expandable_flags.add(bool(seg["is_expandable"]))
        if tuple(seg.get("segment_pool_id") or (0, 0)) != (0, 0):
            private += total
        live = free = 0
        for block in seg.get("blocks") or []:
            if not isinstance(block, dict):
                continue
            size, state = _int(block.get("size")), block.get("state")
            if state == "active_allocated":
                live += size
                entry = sites.setdefault(_site(block.get("frames")), [0, 0])
                entry[0] += size
                entry[1] += 1
            elif state == "active_pending_free":
                pending += size
            elif state == "inactive":
                free += size
                largest = max(largest, size)
        allocated += live
        inactive += free
        if live:
            fragmented += free
    settings = snap.get("allocator_settings") if isinstance(snap.get("allocator_settings"), dict) else {}
    expandable = settings.get("expandable_segments")
    if not isinstance(expandable, bool):
        expandable = True if expandable_flags == {True} else (False if expandable_flags else None)
    ranked = sorted(sites.items(), key=lambda kv: -kv[1][0])[:top]
    summary = SnapshotSummary(
        source=source,
        reserved=reserved,
        allocated=allocated,
        active_pending_free=pending,
        inactive=inactive,
        fragmented=fragmented,
        largest_free_block=largest,
        segments=len(segments),
        segment_sizes=sizes.most_common(6),
        private_pool_reserved=private,
        expandable_segments=expandable,
        allocator_settings={k: v for k, v in settings.items() if k != "roundup_power2_divisions"},
        top_sites=[Site(frame, b, n) for frame, (b, n) in ranked],
        failed_request=_last_oom(snap),
    )
    summary.label, summary.reasons = _judge(summary)
    return summary


def _last_oom(snap: dict) -> FailedRequest | None:
    traces = snap.get("device_traces")
    if not isinstance(traces, list):
        return None
    last = None
    for device, entries in enumerate(traces):
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("action") == "oom":
                last = FailedRequest(device, _int(entry.get("size")), entry.get("device_free"))
    return last


def _judge(s: SnapshotSummary) -> tuple[str | None, list[str]]:
    if s.failed_request is None:
        return None, [
            "no OOM recorded in the trace (history off, or the snapshot was taken before the failure)"
        ]
    r = s.failed_request.size
    free_device = _int(s.failed_request.device_free)
    if s.expandable_segments:
        return CAPACITY, [
            f"expandable segments on: fragmentation ruled out; request {gib(r)}, device free {gib(free_device)}"
        ]
    if s.largest_free_block < r <= s.inactive + free_device:
        return FRAGMENTATION, [
            f"largest free block {gib(s.largest_free_block)} < request {gib(r)} ≤ cached free {gib(s.inactive)} + "
            f"device free {gib(free_device)}: the memory exists but not in one piece"
        ]
    return CAPACITY, [f"request {gib(r)} > cached free {gib(s.inactive)} + device free {gib(free_device)}"]


def timeline(snap: dict, device: int = 0) -> tuple[list[float], list[int], list[int], list[float]]:
    """Allocated and reserved bytes after each trace event (seconds from the first), plus OOM times.

    The trace is a ring buffer, so the curves are anchored at the snapshot's final totals and
    walked backwards, not started from zero."""
    traces = snap.get("device_traces")
    entries = (
        traces[device]
        if isinstance(traces, list) and len(traces) > device and isinstance(traces[device], list)
        else []
    )
    entries = [e for e in entries if isinstance(e, dict)]
    alloc_delta = {"alloc": 1, "free_completed": -1}
    seg_delta = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
    steps = [
        (
            alloc_delta.get(e.get("action"), 0) * _int(e.get("size")),
            seg_delta.get(e.get("action"), 0) * _int(e.get("size")),
        )
        for e in entries
    ]
    summary = summarise(snap, "", top=0)
    allocated = summary.allocated + summary.active_pending_free - sum(a for a, _ in steps)
    reserved = summary.reserved - sum(r for _, r in steps)
    start = _int(entries[0].get("time_us")) if entries else 0
    times, alloc_curve, reserved_curve, ooms = [], [], [], []
    for entry, (da, dr) in zip(entries, steps):
        allocated += da
        reserved += dr
        t = (_int(entry.get("time_us")) - start) / 1e6
        times.append(t)
        alloc_curve.append(allocated)
        reserved_curve.append(reserved)
        if entry.get("action") == "oom":
            ooms.append(t)
    return times, alloc_curve, reserved_curve, ooms


def plot(snap: dict, out: str | Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times, allocated, reserved, ooms = timeline(snap)
    if not times:
        raise InputError(
            f"{out}: the snapshot has no trace to plot (record with _record_memory_history first)"
        )
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    ax.step(times, [b / GiB for b in reserved], where="post", label="reserved", color="#4c72b0")
    ax.step(times, [b / GiB for b in allocated], where="post", label="allocated", color="#dd8452")
    for i, t in enumerate(ooms):
        ax.axvline(t, color="#c44e52", linestyle="--", linewidth=1, label="OOM" if i == 0 else None)
    ax.set_xlabel("time since first trace event (s)")
    ax.set_ylabel("GiB (2^30 bytes)")
    ax.set_title(title)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(out)
    except OSError as exc:
        raise InputError(f"{out}: cannot write the plot ({exc.strerror or exc.__class__.__name__})") from None
    finally:
        plt.close(fig)
