"""The monitor's JSONL record format, and reading it back. Pure: no torch.

Each rank writes its own file, ``memtune-monitor-rank{R}.jsonl``, one JSON object a line, every
object carrying ``"schema_version": 1``, ``"kind"``, ``"rank"`` and ``"time"`` (Unix seconds):

- ``start``: once per process. ``world_size``, ``pp_rank`` (null without a config), ``torch``,
  ``allocator_settings`` (read back from the allocator, or null), ``cuda`` (whether allocator
  statistics exist), ``nvml`` (whether device-level memory is read), ``notes`` (why a field is
  null), ``config`` (the job config, defaults left out, or null) and ``estimate_bytes`` (the
  estimated allocator peak of this rank, or null).
- ``step``: once per ``step()``. ``step``; ``step_seconds`` (wall time since the previous step or
  the start, without synchronising the GPU); the allocator's ``peak_allocated_bytes``,
  ``allocated_bytes``, ``peak_reserved_bytes``, ``reserved_bytes``, ``peak_active_bytes``,
  ``active_bytes``, ``cached_bytes`` (reserved minus allocated), ``num_alloc_retries``,
  ``num_ooms`` (cumulative counters of the process); NVML's ``device_used_bytes`` and
  ``device_total_bytes`` (the whole device, every process on it); ``estimate_bytes`` and
  ``estimate_difference_bytes`` (measured peak allocated minus estimate). Peaks cover this step
  only: the monitor resets them after each record. Allocator fields are null without CUDA, NVML
  fields without ``nvidia-ml-py`` or a GPU, estimate fields without an estimate.
- ``gather``: rank 0 only, every ``gather_every`` steps: ``step``, ``peaks`` (rank -> peak
  allocated bytes of that step), ``reserved`` (rank -> peak reserved), ``most_loaded_rank``,
  ``skew_bytes`` (highest minus lowest peak).
- ``event``: ``event`` is ``resume`` (``step`` is the first step after a checkpoint load) or
  ``warning`` (``check`` names it: ``alloc_retries`` or ``over_estimate``; ``message``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtune.errors import InputError
from memtune.jsonl import Holds, check_field, read_jsonl
from memtune.limits import MAX_PARALLEL, MAX_RECORD_BYTES, MAX_STEP
from memtune.numbers import echo

SCHEMA_VERSION = 1
FILE_PATTERN = "memtune-monitor-rank*.jsonl"


def file_name(rank: int) -> str:
    return f"memtune-monitor-rank{rank}.jsonl"


STEP_FIELDS = (
    "peak_allocated_bytes",
    "allocated_bytes",
    "peak_reserved_bytes",
    "reserved_bytes",
    "peak_active_bytes",
    "active_bytes",
    "cached_bytes",
    "num_alloc_retries",
    "num_ooms",
    "device_used_bytes",
    "device_total_bytes",
)


@dataclass
class Segment:
    """The steps one process recorded between two resumes (or the start and the end)."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    resumed_at: int | None = None  # the step of the resume marker that opened this segment


@dataclass
class RankRecords:
    rank: int
    starts: list[dict[str, Any]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=lambda: [Segment()])
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def steps(self) -> list[dict[str, Any]]:
        return [s for seg in self.segments for s in seg.steps]

    @property
    def pp_rank(self) -> int | None:
        return next((s["pp_rank"] for s in reversed(self.starts) if s.get("pp_rank") is not None), None)

    @property
    def estimate_bytes(self) -> int | None:
        return next(
            (s["estimate_bytes"] for s in reversed(self.starts) if s.get("estimate_bytes") is not None),
            None,
        )

    @property
    def config(self) -> dict[str, Any] | None:
        return next((s["config"] for s in reversed(self.starts) if s.get("config") is not None), None)


@dataclass
class MonitorRun:
    directory: Path
    ranks: dict[int, RankRecords]
    gathers: list[dict[str, Any]]


def read_directory(directory: str | Path) -> MonitorRun:
    """Every rank's records in ``directory``, each rank's steps split at its resume markers."""
    path = Path(directory)
    if not path.is_dir():
        raise InputError(f"{directory}: not a directory (give the monitor's output directory)")
    files = sorted(path.glob(FILE_PATTERN))
    if not files:
        raise InputError(f"{directory}: no {FILE_PATTERN} files (the monitor's output)")
    ranks: dict[int, RankRecords] = {}
    gathers: list[dict[str, Any]] = []
    by_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for file in files:
        for record in _read_file(file):
            by_rank[int(record["rank"])].append(record)
    for rank, records in sorted(by_rank.items()):
        rr = ranks.setdefault(rank, RankRecords(rank))
        for record in records:
            kind = record["kind"]
            if kind == "start":
                rr.starts.append(record)
            elif kind == "step":
                rr.segments[-1].steps.append(record)
            elif kind == "gather":
                gathers.append(record)
            elif kind == "event" and record.get("event") == "resume":
                rr.segments.append(Segment(resumed_at=record.get("step")))
            elif kind == "event" and record.get("event") == "warning":
                rr.warnings.append(record)
    return MonitorRun(path, ranks, gathers)


def _read_file(file: Path) -> list[dict[str, Any]]:
    records = []
    for number, record in read_jsonl(file, torn_last_line=True):
        where = f"{file}:{number}"
        if not isinstance(record, dict) or "kind" not in record or "rank" not in record:
            raise InputError(f"{where}: not a memtune monitor record (no kind/rank)")
        if record.get("schema_version") != SCHEMA_VERSION:
            raise InputError(
                f"{where}: schema_version {echo(record.get('schema_version'))}, this memtune reads {SCHEMA_VERSION}"
            )
        check_record(record, where)
        records.append(record)
    return records


# What each field of a record may hold (memtune/jsonl.py: Holds), and whether the monitor may
# write it as null.
_BYTES = (0, MAX_RECORD_BYTES)
_STEP = (0, MAX_STEP)
_FIELDS: dict[str, dict[str, tuple[Holds, bool]]] = {
    "start": {
        "world_size": ((1, MAX_PARALLEL), True),
        "pp_rank": ((0, MAX_PARALLEL - 1), True),
        "estimate_bytes": (_BYTES, True),
        "config": ("mapping", True),
    },
    "step": {
        "step": (_STEP, False),
        "step_seconds": ("number", True),
        "estimate_bytes": (_BYTES, True),
        "estimate_difference_bytes": ((-MAX_RECORD_BYTES, MAX_RECORD_BYTES), True),
        **{name: (_BYTES, True) for name in STEP_FIELDS},
    },
    "gather": {"step": (_STEP, False)},
    "event": {"event": ("string", False), "step": (_STEP, True)},
}


def check_record(record: dict[str, Any], where: str) -> None:
    """Refuse, in one line naming ``where`` and the field, a value the report cannot use."""
    kind = record["kind"]
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise InputError(f"{where}: kind {echo(kind)} is not one of {', '.join(_FIELDS)}")
    check_field(where, record, "rank", (0, MAX_PARALLEL - 1))
    for name, (holds, nullable) in _FIELDS[kind].items():
        check_field(where, record, name, holds, nullable)
