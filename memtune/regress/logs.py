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

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from memtune.diagnose.detectors import rank_memory_report
from memtune.diagnose.logscan import Readable, SourceReport, expand, read_source, text_lines
from memtune.errors import InputError
from memtune.jsonl import RefusedJson, check_field, loads
from memtune.limits import MAX_PARALLEL, MAX_RECORD_BYTES, MAX_RUN_PAIRS, MAX_STEP
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


@dataclass
class Run:
    peaks: RunPeaks
    notes: list[str]  # inputs skipped or cut short, as diagnose reports them


def read_run(path: str) -> Run:
    """Per (rank, step), the largest peaks any record of the run reports. The files are read with
    diagnose's guards (memtune/diagnose/logscan.py): lines cut at 64 KiB, binary files skipped,
    a cut ``.gz`` read up to the cut."""
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or directory")
    peaks: RunPeaks = {}
    notes: list[str] = []

    def consume(name: str, report: SourceReport, stream: Readable) -> None:
        for number, line in enumerate(text_lines(stream, report), 1):
            record = _record(name, number, line)
            if record is None:
                continue
            rank, step, peak = record
            old = peaks.get((rank, step))
            if old is None and len(peaks) >= MAX_RUN_PAIRS:
                raise InputError(f"{path}: more than {MAX_RUN_PAIRS:,} (rank, step) pairs")
            peaks[(rank, step)] = (
                peak
                if old is None
                else Peak(max(old.allocated, peak.allocated), max(old.reserved, peak.reserved))
            )

    read_some = False  # a source was read, whether or not it held records
    for name in expand([path]):
        report = SourceReport(name)
        problem = read_source(name, report, partial(consume, name, report))
        if problem is not None:
            notes.append(problem)
        elif report.note.startswith("skipped: "):
            notes.append(f"{name}: {report.note.removeprefix('skipped: ')}")
        else:
            read_some = True
            if report.note and report.note != "empty":
                notes.append(f"{name}: {report.note}")
    if not peaks:
        if not read_some:
            raise InputError(notes)
        raise InputError(
            [
                f"{path}: no memory records found (Megatron's '[Rank N] (after X iterations) memory (MB) | ...' "
                f"lines, or JSONL records with {', '.join(JSONL_FIELDS)})",
                *notes,
            ]
        )
    return Run(peaks, notes)


def _record(name: str, number: int, line: str) -> tuple[int, int, Peak] | None:
    text = line.strip()
    if text.startswith("{"):
        return _jsonl_record(name, number, text)
    report = rank_memory_report(text)
    if report is None or report.iteration is None:
        return None
    values = {
        "rank": report.rank,
        "step": report.iteration,
        "peak_allocated_bytes": report.max_allocated,
        "peak_reserved_bytes": report.max_reserved,
    }
    return _bounded(f"{name}:{number}", values)


# field -> (low, high): a rank, a step, two byte counts, in a JSONL record or Megatron's report
_BOUNDS = {
    "rank": (0, MAX_PARALLEL - 1),
    "step": (0, MAX_STEP),
    "peak_allocated_bytes": (0, MAX_RECORD_BYTES),
    "peak_reserved_bytes": (0, MAX_RECORD_BYTES),
}


def _jsonl_record(name: str, number: int, text: str) -> tuple[int, int, Peak] | None:
    try:
        record = loads(text)
    except RefusedJson as exc:
        # A JSON log line of another tool may hold NaN; only a line that names every field of a
        # memory record is one.
        if all(f'"{key}"' in text for key in JSONL_FIELDS):
            raise InputError(f"{name}:{number}: {exc}") from None
        return None
    except json.JSONDecodeError:
        return None  # a log line that happens to start with a brace
    if not isinstance(record, dict) or not all(key in record for key in JSONL_FIELDS):
        return None
    return _bounded(f"{name}:{number}", record)


def _bounded(where: str, record: dict[str, Any]) -> tuple[int, int, Peak]:
    """A memory record's rank, step and peaks, each within its bounds (either form of record)."""
    for key, bounds in _BOUNDS.items():
        check_field(where, record, key, bounds)
    return record["rank"], record["step"], Peak(record["peak_allocated_bytes"], record["peak_reserved_bytes"])


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

    @property
    def component(self) -> str:
        """The peak that tells the change: allocated when it moved beyond noise, else reserved."""
        moved = _grew(self.before.allocated, self.allocated_delta) or _grew(
            self.before.allocated, -self.allocated_delta
        )
        return ALLOCATED if moved else "reserved"

    @property
    def component_peaks(self) -> tuple[int, int]:
        """The telling peak in A and in B."""
        if self.component == ALLOCATED:
            return self.before.allocated, self.after.allocated
        return self.before.reserved, self.after.reserved

    @property
    def component_delta(self) -> int:
        return self.allocated_delta if self.component == ALLOCATED else self.reserved_delta

    @property
    def largest_delta(self) -> int:
        """The larger change of the two peaks, by magnitude, with its sign."""
        return max(self.allocated_delta, self.reserved_delta, key=abs)


# How much a kind of change says, for a rank's summary: the most telling one of its steps.
_SEVERITY = {ALLOCATED: 3, RESERVED_ONLY: 2, SHRANK: 1, SAME: 0}


@dataclass(frozen=True)
class RankSummary:
    rank: int
    steps: int  # steps both runs report
    diverged: int  # of which differ beyond noise
    first_step: int | None  # the first of those
    allocated_delta: int  # the largest change of the allocated peak over the steps, with its sign
    reserved_delta: int
    kind: str  # the most telling change of its steps


def changed_most(ranks: list[RankSummary], count: int) -> list[RankSummary]:
    """The ``count`` ranks whose peaks changed most, in rank order (all of them if fewer)."""
    most = sorted(ranks, key=lambda r: -max(abs(r.allocated_delta), abs(r.reserved_delta)))
    return sorted(most[:count], key=lambda r: r.rank)


def _grew(before: int, delta: int) -> bool:
    return delta > max(NOISE_BYTES, NOISE_SHARE * before)


@dataclass
class LogDiff:
    a: str
    b: str
    steps: list[StepChange]  # every (rank, step) both runs report, in rank then step order
    only_a: list[tuple[int, int]]
    only_b: list[tuple[int, int]]
    notes: list[str]  # inputs of either run skipped or cut short

    @property
    def diverged(self) -> list[StepChange]:
        """The (rank, step) pairs that differ beyond noise, in step then rank order."""
        return sorted((s for s in self.steps if s.kind != SAME), key=lambda s: (s.step, s.rank))

    @property
    def first_divergence(self) -> StepChange | None:
        diverged = self.diverged
        return diverged[0] if diverged else None

    @property
    def largest(self) -> StepChange | None:
        """The pair whose peaks differ most (the earliest of equals)."""
        return max(self.diverged, key=lambda s: abs(s.largest_delta), default=None)

    def ranks(self) -> list[RankSummary]:
        by_rank: dict[int, list[StepChange]] = {}
        for s in self.steps:
            by_rank.setdefault(s.rank, []).append(s)
        summaries = []
        for rank, steps in sorted(by_rank.items()):
            diverged = [s for s in steps if s.kind != SAME]
            summaries.append(
                RankSummary(
                    rank,
                    len(steps),
                    len(diverged),
                    min((s.step for s in diverged), default=None),
                    max((s.allocated_delta for s in steps), key=abs),
                    max((s.reserved_delta for s in steps), key=abs),
                    max((s.kind for s in steps), key=_SEVERITY.__getitem__),
                )
            )
        return summaries

    @property
    def grown(self) -> list[StepChange]:
        """The (rank, step) pairs that grew, the largest growth of either peak first."""
        grew = [s for s in self.steps if s.kind in (ALLOCATED, RESERVED_ONLY)]
        return sorted(grew, key=lambda s: -max(s.allocated_delta, s.reserved_delta))


def diff_runs(a: str, b: str) -> LogDiff:
    run_a, run_b = read_run(a), read_run(b)
    pa, pb = run_a.peaks, run_b.peaks
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
        run_a.notes + run_b.notes,
    )


def _ranks(peaks: RunPeaks) -> str:
    return ",".join(str(r) for r in sorted({rank for rank, _ in peaks}))
