"""``memtune diff --logs RUN_A RUN_B``: two runs' memory per rank and step, side by side.

A run is a log file, a ``.gz`` log, a monitor JSONL file, or a directory of them. Two kinds of
record are read:

- Megatron-LM's per-rank report, ``[Rank N] (after X iterations) memory (MB) | allocated: ... |
  max allocated: ... | reserved: ... | max reserved: ...``, parsed by ``memtune diagnose``'s
  detector (:func:`memtune.diagnose.detectors.rank_memory_report`);
- a JSONL record per rank and step: ``{"rank": int, "step": int, "peak_allocated_bytes": int,
  "peak_reserved_bytes": int, ...}`` (other fields are ignored).

Growth in the allocated peak means the job's tensors need more (a config, model or library
change); growth in the reserved peak alone means the allocator keeps more cached than before
(fragmentation, a changed allocator setting or a new torch), with the tensors unchanged.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memtune.diagnose.detectors import rank_memory_report
from memtune.errors import InputError
from memtune.units import MiB

JSONL_FIELDS = ("rank", "step", "peak_allocated_bytes", "peak_reserved_bytes")
# A change below both of these is noise: allocator rounding, a few workspaces.
NOISE_BYTES = 64 * MiB
NOISE_SHARE = 0.01

ALLOCATED = "allocated"  # the tensors need more
RESERVED_ONLY = "reserved-only"  # the allocator caches more
SHRANK = "shrank"
SAME = "unchanged"


@dataclass(frozen=True)
class Peak:
    allocated: int
    reserved: int


RunPeaks = dict[tuple[int, int], Peak]  # (rank, step) -> peaks


def read_run(path: str) -> RunPeaks:
    """Per (rank, step), the largest peaks any record of the run reports."""
    root = Path(path)
    if not root.exists():
        raise InputError(f"{path}: no such file or directory")
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    peaks: RunPeaks = {}
    for file in files:
        for rank, step, peak in _records(file):
            old = peaks.get((rank, step))
            peaks[(rank, step)] = (
                peak
                if old is None
                else Peak(max(old.allocated, peak.allocated), max(old.reserved, peak.reserved))
            )
    if not peaks:
        raise InputError(
            f"{path}: no memory records found (Megatron's '[Rank N] (after X iterations) memory (MB) | ...' "
            f"lines, or JSONL records with {', '.join(JSONL_FIELDS)})"
        )
    return peaks


def _lines(file: Path) -> Iterator[str]:
    try:
        opener = gzip.open if file.suffix == ".gz" else open
        with opener(file, "rt", encoding="utf-8", errors="replace") as fh:
            yield from fh
    except (OSError, EOFError) as exc:
        raise InputError(f"{file}: cannot read ({exc.__class__.__name__}: {exc})") from None


def _records(file: Path) -> Iterator[tuple[int, int, Peak]]:
    for number, line in enumerate(_lines(file), 1):
        text = line.strip()
        if text.startswith("{"):
            record = _jsonl_record(file, number, text)
            if record is not None:
                yield record
        elif (report := rank_memory_report(text)) is not None and report.iteration is not None:
            yield report.rank, report.iteration, Peak(report.max_allocated, report.max_reserved)


def _jsonl_record(file: Path, number: int, text: str) -> tuple[int, int, Peak] | None:
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None  # a log line that happens to start with a brace
    if not isinstance(record, dict) or not all(key in record for key in JSONL_FIELDS):
        return None
    values = [record[key] for key in JSONL_FIELDS]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise InputError(f"{file}:{number}: {', '.join(JSONL_FIELDS)} must be integers")
    rank, step, allocated, reserved = values
    return rank, step, Peak(allocated, reserved)


@dataclass(frozen=True)
class StepChange:
    rank: int
    step: int
    before: Peak
    after: Peak

    @property
    def allocated_delta(self) -> int:
        return self.after.allocated - self.before.allocated

    @property
    def reserved_delta(self) -> int:
        return self.after.reserved - self.before.reserved

    @property
    def kind(self) -> str:
        if _grew(self.before.allocated, self.allocated_delta):
            return ALLOCATED
        if _grew(self.before.reserved, self.reserved_delta):
            return RESERVED_ONLY
        if _grew(self.before.allocated, -self.allocated_delta) or _grew(
            self.before.reserved, -self.reserved_delta
        ):
            return SHRANK
        return SAME


def _grew(before: int, delta: int) -> bool:
    return delta > max(NOISE_BYTES, NOISE_SHARE * before)


@dataclass
class LogDiff:
    a: str
    b: str
    steps: list[StepChange]  # every (rank, step) both runs report, in rank then step order
    only_a: list[tuple[int, int]]
    only_b: list[tuple[int, int]]

    @property
    def grown(self) -> list[StepChange]:
        """The (rank, step) pairs that grew, the largest growth of either peak first."""
        grew = [s for s in self.steps if s.kind in (ALLOCATED, RESERVED_ONLY)]
        return sorted(grew, key=lambda s: -max(s.allocated_delta, s.reserved_delta))


def diff_runs(a: str, b: str) -> LogDiff:
    pa, pb = read_run(a), read_run(b)
    common = sorted(pa.keys() & pb.keys())
    if not common:
        raise InputError(
            f"{a} and {b} share no (rank, step) pair: A has ranks {_ranks(pa)}, B has ranks {_ranks(pb)}"
        )
    return LogDiff(
        a,
        b,
        [StepChange(rank, step, pa[(rank, step)], pb[(rank, step)]) for rank, step in common],
        sorted(pa.keys() - pb.keys()),
        sorted(pb.keys() - pa.keys()),
    )


def _ranks(peaks: RunPeaks) -> str:
    return ",".join(str(r) for r in sorted({rank for rank, _ in peaks}))
