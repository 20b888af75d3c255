"""What users chase after an OOM, found in recorded per-step series. Pure: no torch, no I/O.

A series is a list of ``(step, bytes)`` pairs in the order recorded. Thresholds are absolute
(bytes) and relative (share of the reference level), and a finding needs both, so neither a
small model's noise nor a large model's rounding raises one.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from memtune.units import MiB

Series = list[tuple[int, float]]

NOISE_BYTES = 2 * MiB  # allocator rounding and small transient buffers move a level this much
GROWTH_MIN_BYTES = 64 * MiB
GROWTH_MIN_FRACTION = 0.01
GROWTH_MIN_RISES = 3
WARMUP_STEPS = 2  # the first steps allocate optimizer state and caches once
JUMP_WINDOW = 5
JUMP_MIN_BYTES = 128 * MiB
JUMP_MIN_FRACTION = 0.05
OUTLIER_MIN_BYTES = 256 * MiB
OUTLIER_MIN_FRACTION = 0.10


@dataclass(frozen=True)
class Growth:
    """A level that never comes back down: the floor of the series rose at ``steps``."""

    first_step: int
    last_step: int
    start_bytes: float
    end_bytes: float
    steps: tuple[int, ...]

    @property
    def grown_bytes(self) -> float:
        return self.end_bytes - self.start_bytes


def growth(series: Series, warmup: int = WARMUP_STEPS) -> Growth | None:
    """Memory that keeps growing across steps.

    The floor at step i is the lowest value from step i to the end: a transient spike does not
    raise it, memory that is never given back does. A leak is a floor that rises at least
    ``GROWTH_MIN_RISES`` times by more than the noise, by more than ``GROWTH_MIN_BYTES`` and
    ``GROWTH_MIN_FRACTION`` in all.
    """
    values = series[warmup:]
    if len(values) < GROWTH_MIN_RISES + 1:
        return None
    floor: list[float] = []
    low = float("inf")
    for _, value in reversed(values):
        low = min(low, value)
        floor.append(low)
    floor.reverse()
    rises = tuple(values[i][0] for i in range(1, len(values)) if floor[i] - floor[i - 1] > NOISE_BYTES)
    start, end = floor[0], floor[-1]
    grown = end - start
    if len(rises) < GROWTH_MIN_RISES or grown <= GROWTH_MIN_BYTES or grown <= GROWTH_MIN_FRACTION * start:
        return None
    return Growth(values[0][0], values[-1][0], start, end, rises)


@dataclass(frozen=True)
class Jump:
    """The level after a resume against the steady state before it."""

    resume_step: int
    before_bytes: float  # median of the last JUMP_WINDOW steps before the resume
    after_bytes: float  # median of the first JUMP_WINDOW steps after it

    @property
    def jump_bytes(self) -> float:
        return self.after_bytes - self.before_bytes


def resume_jump(before: Series, after: Series, resume_step: int) -> Jump | None:
    """A jump after a checkpoint resume: checkpoint-load temporaries left in the cache, or an
    extra copy of the weights, raise the steady state of the steps after the resume."""
    if not before or not after:
        return None
    level_before = median(v for _, v in before[-JUMP_WINDOW:])
    level_after = median(v for _, v in after[:JUMP_WINDOW])
    jump = level_after - level_before
    if jump <= JUMP_MIN_BYTES or jump <= JUMP_MIN_FRACTION * level_before:
        return None
    return Jump(resume_step, level_before, level_after)


def counter_rises(series: Series, warmup: int = WARMUP_STEPS) -> tuple[int, ...]:
    """Steps after the warm-up at which a cumulative counter (``num_alloc_retries``) went up.

    A counter that goes down belongs to a new process (counters start at zero): it becomes the
    new baseline.
    """
    rises = []
    for i in range(1, len(series)):
        step, value = series[i]
        previous = series[i - 1][1]
        if value > previous and i >= warmup:
            rises.append(step)
    return tuple(rises)


@dataclass(frozen=True)
class Outlier:
    rank: int
    peak_bytes: float
    peers_bytes: float  # median peak of the other ranks of its group
    peers: tuple[int, ...]

    @property
    def excess_bytes(self) -> float:
        return self.peak_bytes - self.peers_bytes


def outliers(peaks: dict[int, float], groups: dict[int, int | None]) -> list[Outlier]:
    """Ranks far above their peers: the ranks of the same pipeline stage (``groups``: rank ->
    pipeline rank; None puts every rank in one group), which run the same layers and should
    hold the same memory."""
    by_group: dict[int | None, list[int]] = {}
    for rank in peaks:
        by_group.setdefault(groups.get(rank), []).append(rank)
    found = []
    for members in by_group.values():
        for rank in members:
            others = [r for r in members if r != rank]
            if not others:
                continue
            reference = median(peaks[r] for r in others)
            excess = peaks[rank] - reference
            if excess > OUTLIER_MIN_BYTES and excess > OUTLIER_MIN_FRACTION * reference:
                found.append(Outlier(rank, peaks[rank], reference, tuple(sorted(others))))
    return sorted(found, key=lambda o: o.rank)
