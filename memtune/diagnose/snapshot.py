"""Read ``torch.cuda.memory._dump_snapshot()`` files without executing anything, and summarise them.

A pickle can name any importable callable and have it run while loading. Snapshots are plain
dicts, lists, tuples, strings and numbers, which pickle builds with opcodes that never import
anything; so the unpickler refuses every import (``find_class``) and every persistent id. Before
the C unpickler sees the bytes, one pass over the opcodes refuses every opcode that imports or
calls anything and every memo index beyond a bound (the C unpickler sizes its memo table by the
largest index, so an 11-byte pickle could otherwise ask for gigabytes). Bytes read are capped
whatever the file claims to be (pipes and devices report size 0), and the summary visits each
object once, so shared references cannot multiply its work.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

from memtune.diagnose.evidence import CAPACITY, FRAGMENTATION
from memtune.diagnose.sizes import GiB, gib
from memtune.errors import InputError
from memtune.infile import opened, read_within
from memtune.limits import (
    MAX_DEVICES,
    MAX_ECHO,
    MAX_PICKLE_MEMO,
    MAX_SNAPSHOT_BYTES,
    MAX_SNAPSHOT_MEMORY_PER_BYTE,
    MAX_SNAPSHOT_NUMBER,
    MAX_SNAPSHOT_OBJECTS,
    MIN_SNAPSHOT_MEMORY,
)
from memtune.numbers import cut, digits
from memtune.plotfile import save_figure

__all__ = ["MAX_SNAPSHOT_BYTES", "load_plain_pickle", "plot", "read_snapshot", "summarise", "timeline"]
# An allocator setting as a summary keeps it: printed, and put in JSON.
Setting: TypeAlias = str | int | float | bool | None
_INTERNAL_FRAMES = ("/torch/", "\\torch\\", "<frozen", "/site-packages/torch", "c10/", ".so", "??")


class _Refused(pickle.UnpicklingError):
    pass


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> NoReturn:
        raise _Refused(
            f"it references {module}.{name}; a memory snapshot holds only plain data, so this file is "
            "refused (loading it could run code)"
        )

    def persistent_load(self, pid: object) -> NoReturn:
        raise _Refused(
            "it uses persistent ids; a memory snapshot holds only plain data, so this file is refused"
        )


# Opcodes that import or call something (or hand objects to an outside resolver): a snapshot never
# has them. find_class refuses them too; refusing them here keeps that promise before any loading.
_CODE_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "BUILD",
                 "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4"}  # fmt: skip
_OPCODES = {op.code.encode("latin-1")[0]: op for op in pickletools.opcodes}
# Per opcode byte, how to skip its argument: a fixed size >= 0, or one of the codes below.
_INVALID, _REFUSED, _NEWLINE, _CHECKED = -10, -11, -12, -13
_PREFIXED = {pickletools.TAKEN_FROM_ARGUMENT1: -1, pickletools.TAKEN_FROM_ARGUMENT4: -4,
             pickletools.TAKEN_FROM_ARGUMENT4U: -4, pickletools.TAKEN_FROM_ARGUMENT8U: -8}  # fmt: skip
_SKIP = [_INVALID] * 256
for _code, _op in _OPCODES.items():
    _n = _op.arg.n if _op.arg else 0
    if _op.name in _CODE_OPCODES:
        _SKIP[_code] = _REFUSED
    elif _op.name in ("PUT", "LONG_BINPUT"):  # BINPUT's one-byte index cannot grow the memo far
        _SKIP[_code] = _CHECKED
    elif _n == pickletools.UP_TO_NEWLINE:
        _SKIP[_code] = _NEWLINE
    else:
        _SKIP[_code] = _PREFIXED.get(_n, _n)
_STOP = pickle.STOP[0]


def _check_opcodes(data: bytes, limit: float = math.inf) -> int:
    """Walk the opcodes once without building anything; refuse code-running opcodes and memo
    indices above MAX_PICKLE_MEMO (the C unpickler sizes its memo table by the largest index).
    Returns the memory, in bytes, that unpickling would take: every object each opcode builds and
    every reference it leaves on the stack or in a container (:data:`_COST`), its text or bytes,
    and the memo table; the walk stops as soon as that passes ``limit``."""
    skip, costs, pos, end = _SKIP, _COST, 0, len(data)
    memory = memo = 0
    while pos < end and memory <= limit:
        code = data[pos]
        size = skip[code]
        memory += costs[code]
        pos += 1
        if size >= 0:
            if code == _STOP:
                break
            if code == _MEMOIZE:
                memo += 1
            pos += size
        elif size >= -8:  # a length prefix of -size bytes, then that many bytes
            length = int.from_bytes(data[pos : pos - size], "little", signed=size == -4 and code in _SIGNED)
            if length < 0:
                raise pickle.UnpicklingError(f"negative length at byte {pos}")
            pos += -size + length
            memory += length
        elif size == _NEWLINE:
            line_end = data.find(b"\n", pos)
            memory += (end if line_end < 0 else line_end) - pos
            pos = end if line_end < 0 else line_end + 1
        elif size == _CHECKED:
            if code == _LONG_BINPUT:
                index, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
            else:
                line_end = data.find(b"\n", pos)
                text = data[pos : end if line_end < 0 else line_end]
                index = int(text) if text.isdigit() and len(text) <= 12 else MAX_PICKLE_MEMO + 1
                pos = end if line_end < 0 else line_end + 1
            if index > MAX_PICKLE_MEMO:
                raise pickle.UnpicklingError(f"memo index beyond {MAX_PICKLE_MEMO}")
            memo = max(memo, index + 1)
        elif size == _REFUSED:
            name = _OPCODES[code].name
            what = f"uses the {name} opcode (imports or calls)"
            if name in ("GLOBAL", "INST"):
                module, _, attribute = data[pos : pos + 2 * MAX_ECHO].decode("latin-1").partition("\n")
                what = f"references {module}.{attribute.partition(chr(10))[0]}"
            raise _Refused(
                f"it {cut(what)}; a memory snapshot holds only plain data, so this file is refused "
                "(loading it could run code)"
            )
        else:
            raise pickle.UnpicklingError(f"invalid opcode {code:#x} at byte {pos - 1}")
    return memory + _MEMO_ENTRY * memo


def _opcode_cost(op: pickletools.OpcodeInfo) -> int:
    """Bytes one opcode makes the unpickler hold, besides its argument: the object it builds (a
    singleton or a cached small int costs nothing) and, where it leaves one more value on the
    stack, that reference, which ends as a list slot or half of a dict entry."""
    pushes = len([s for s in op.stack_after if s.name != "mark"]) > len(
        [s for s in op.stack_before if s.name not in ("mark", "stackslice")]
    )
    made = op.stack_after[-1].name if op.stack_after else None
    built = made in _OBJECT_BYTES and made not in {s.name for s in op.stack_before} and op.name not in _FREE
    reference = _REFERENCE_BYTES if pushes or op.name == "DUP" else _MARK_BYTES if op.name == "MARK" else 0
    return (_OBJECT_BYTES[made] if built and made else 0) + reference


# CPython's size of each kind of object an opcode builds (its empty form; text and bytes add their
# length, containers their references).
_OBJECT_BYTES = {
    "int": sys.getsizeof(1 << 60),
    "int_or_bool": sys.getsizeof(1 << 60),
    "float": sys.getsizeof(0.5),
    "str": sys.getsizeof(""),
    "bytes": sys.getsizeof(b""),
    "bytes_or_str": sys.getsizeof(""),
    "bytearray": sys.getsizeof(bytearray()),
    "list": sys.getsizeof([]),
    "tuple": sys.getsizeof((0, 0, 0)),
    "dict": sys.getsizeof({}),
    "set": sys.getsizeof(set()),
    "frozenset": sys.getsizeof(frozenset()),
}
_FREE = {"NONE", "NEWTRUE", "NEWFALSE", "EMPTY_TUPLE", "BININT1"}  # singletons and cached small ints
_REFERENCE_BYTES = 24  # a stack or list slot (8), or half a dict entry (about 40 with its index)
_MARK_BYTES = 8  # an entry of the unpickler's stack of marks
_MEMO_ENTRY = 16  # a pointer in the C unpickler's memo table, which grows by doubling
_COST = [0] * 256
for _code, _op in _OPCODES.items():
    _COST[_code] = _opcode_cost(_op)
_MEMOIZE = pickle.MEMOIZE[0]


_LONG_BINPUT = pickle.LONG_BINPUT[0]
_SIGNED = {pickle.BINSTRING[0], pickle.LONG4[0]}


def load_plain_pickle(data: bytes, name: str) -> object:
    try:
        allowed = MAX_SNAPSHOT_MEMORY_PER_BYTE * len(data) + MIN_SNAPSHOT_MEMORY
        if _check_opcodes(data, limit=allowed) > allowed:
            raise InputError(
                f"{name}: unpickling it would take more than {gib(allowed)} of memory, more than "
                f"{MAX_SNAPSHOT_MEMORY_PER_BYTE} times its size; a memory snapshot needs far less (corrupt or built to exhaust memory)"
            )
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
    allocator_settings: dict[str, Setting]
    top_sites: list[Site]
    failed_request: FailedRequest | None
    label: str | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def fragmentation_ratio(self) -> float:
        return self.fragmented / self.reserved if self.reserved else 0.0


def _read_capped(path: Path) -> bytes:
    """At most MAX_SNAPSHOT_BYTES, refusing more (never trusting st_size); the first byte must be a
    pickle opcode before the rest is read, so /dev/zero or a pipe of text is refused at once. A
    FIFO is opened without waiting for a writer (``memtune/infile.py``)."""
    shown = cut(str(path))
    with opened(path, "a memory snapshot", regular=False) as fh:
        try:
            head = fh.read(2)
        except OSError as exc:
            raise InputError(f"{shown}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
        if not head:
            raise InputError(f"{shown}: empty file, not a memory snapshot")
        if head[0] not in _OPCODES or head[0] == pickle.STOP[0]:
            raise InputError(f"{shown}: not a pickle, so not a memory snapshot")
        return read_within(fh, MAX_SNAPSHOT_BYTES, shown, "a memory snapshot", head)


def read_snapshot(path: str | Path) -> dict[str, Any]:
    """The snapshot as it was pickled: untrusted plain data, which the summary checks as it reads."""
    path = Path(path)
    data = _read_capped(path)
    snap = load_plain_pickle(data, cut(str(path)))
    del data
    if isinstance(snap, list):  # torch.cuda.memory_snapshot() returns the segments alone
        snap = {"segments": snap}
    if not (isinstance(snap, dict) and _is_segment_list(snap.get("segments"))):
        raise InputError(f"{cut(str(path))}: a pickle, but not a memory snapshot (no 'segments' list)")
    return snap


def _is_segment_list(segments: object) -> bool:
    return isinstance(segments, list) and (not segments or any(isinstance(s, dict) for s in segments))


def _frame_text(frame: dict[str, Any]) -> str:
    return cut(
        f"{_text(frame.get('filename', '?'))}:{_text(frame.get('line', '?'))} in {_text(frame.get('name', '?'))}",
        200,
    )


def _text(value: object) -> str:
    """A frame field as text: strings and small ints as they are, anything else by its type."""
    if isinstance(value, str):
        return value[: MAX_ECHO * 2]
    if isinstance(value, int) and abs(value) < MAX_SNAPSHOT_NUMBER:
        return str(value)
    return f"<{type(value).__name__}>"


def _site(frames: object) -> str:
    """The first frame outside PyTorch itself: the user code that asked for the memory."""
    if not isinstance(frames, list) or not frames:
        return "(no stack recorded)"
    frames = frames[:64]  # the user's frame is near the top; a stack of millions is not a stack
    outside = [
        f
        for f in frames
        if isinstance(f, dict) and not any(mark in _text(f.get("filename", "")) for mark in _INTERNAL_FRAMES)
    ]
    # With stacks="all" the C++ frames of the allocator come first; the user's code is Python.
    python = [f for f in outside if _text(f.get("filename", "")).endswith(".py")]
    for candidates in (python, outside):
        if candidates:
            return _frame_text(candidates[0])
    return _frame_text(frames[0]) if isinstance(frames[0], dict) else "(no stack recorded)"


def device_index(value: object) -> int:
    """A segment's or trace's device: an index from 0 (a missing or non-integer one counts as 0)."""
    device = _int(value)
    if not 0 <= device < MAX_DEVICES:
        raise InputError(f"snapshot: a device index of {device}; the file is corrupt")
    return device


def _int(value: object) -> int:
    """A byte count or time stamp: ints only (not bools); an absurd one makes the file corrupt."""
    if not isinstance(value, int) or isinstance(value, bool):
        return 0
    if not -MAX_SNAPSHOT_NUMBER <= value <= MAX_SNAPSHOT_NUMBER:
        raise InputError(
            f"snapshot: a size or time stamp of about {digits(value)} digits; the file is corrupt"
        )
    return value


class _Budget:
    """Visits each object once (by identity) and stops a summary that would visit too many."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def first_visit(self, obj: object) -> bool:
        key = id(obj)
        if key in self.seen:
            return False
        self.seen.add(key)
        if len(self.seen) > MAX_SNAPSHOT_OBJECTS:
            raise InputError(f"snapshot: more than {MAX_SNAPSHOT_OBJECTS} objects to summarise")
        return True


def _dicts(items: object, budget: _Budget) -> list[dict[str, Any]]:
    """The dicts of a list, each object once."""
    if not isinstance(items, list) or not budget.first_visit(items):
        return []
    return [x for x in items if isinstance(x, dict) and budget.first_visit(x)]


def summarise(snap: dict[str, Any], source: str, top: int = 10) -> SnapshotSummary:
    budget = _Budget()
    segments = _dicts(snap["segments"], budget)
    reserved = allocated = pending = inactive = fragmented = largest = private = 0
    sizes: Counter[int] = Counter()
    sites: dict[str, list[int]] = {}
    expandable_flags: set[bool] = set()
    for seg in segments:
        total = _int(seg.get("total_size"))
        reserved += total
        sizes[total] += 1
        if "is_expandable" in seg:
            expandable_flags.add(bool(seg["is_expandable"]))
        pool = seg.get("segment_pool_id")
        if isinstance(pool, (tuple, list)) and len(pool) == 2 and tuple(pool) != (0, 0):
            private += total
        live = free = 0
        for block in _dicts(seg.get("blocks"), budget):
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
    settings = _plain_settings(snap.get("allocator_settings"))
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


def _plain_settings(value: object) -> dict[str, Setting]:
    """allocator_settings reduced to text keys and scalar values (they are printed and put in JSON)."""
    if not isinstance(value, dict):
        return {}
    plain: dict[str, Setting] = {}
    for key, item in list(value.items())[:64]:
        if (
            isinstance(item, bool)
            or item is None
            or (isinstance(item, float) and item == item and abs(item) != float("inf"))
        ):
            kept: Setting = item
        elif isinstance(item, int) and abs(item) <= MAX_SNAPSHOT_NUMBER:
            kept = item
        elif isinstance(item, str):
            kept = cut(item)
        else:
            kept = f"<{type(item).__name__}>"
        plain[key if isinstance(key, str) else f"<{type(key).__name__} key>"] = kept
    return plain


def _last_oom(snap: dict[str, Any]) -> FailedRequest | None:
    traces = snap.get("device_traces")
    if not isinstance(traces, list):
        return None
    budget = _Budget()
    last = None
    for device, entries in enumerate(traces[:1024]):
        for entry in _dicts(entries, budget):
            if entry.get("action") == "oom":
                free = entry.get("device_free")
                last = FailedRequest(
                    device, _int(entry.get("size")), _int(free) if free is not None else None
                )
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


def timeline(snap: dict[str, Any], device: int = 0) -> tuple[list[float], list[int], list[int], list[float]]:
    """Allocated and reserved bytes after each trace event (seconds from the first), plus OOM times.

    The trace is a ring buffer, so the curves are anchored at the snapshot's final totals and
    walked backwards, not started from zero."""
    traces = snap.get("device_traces")
    entries = (
        traces[device]
        if isinstance(traces, list) and len(traces) > device and isinstance(traces[device], list)
        else []
    )
    entries = _dicts(entries, _Budget())
    alloc_delta = {"alloc": 1, "free_completed": -1}
    seg_delta = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
    steps = [
        (
            alloc_delta.get(_action(e), 0) * _int(e.get("size")),
            seg_delta.get(_action(e), 0) * _int(e.get("size")),
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


def _action(entry: dict[str, Any]) -> str:
    """A trace entry's action (``alloc``, ``segment_free``, ``oom``, ...); "" when it is not text."""
    action = entry.get("action")
    return action if isinstance(action, str) else ""


def plot(snap: dict[str, Any], out: str | Path, title: str) -> None:
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
        save_figure(fig, str(out))
    finally:
        plt.close(fig)
