"""Checkpoint-phase accuracy: the estimate's checkpoint load and first iteration after it, and its
checkpoint save, against measured round trips (``benchmarks/measured/resume/``, docs/resume.md,
docs/save.md).

A resume run is a measured-set record whose ``measured.resume`` holds the fresh process's load
peak (``load_peak_bytes``) and its first iteration's (``first_step_peak_bytes``); both are
compared with ``Estimate.resume`` of the same rank. A save run's ``measured.save`` holds the
device peak while the checkpoint was saved (``save_peak_bytes``), compared with
``Estimate.save``; a record may hold either or both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memtune.bench.sets import evaluating, rank_of
from memtune.check import gate
from memtune.config import validate
from memtune.errors import InputError
from memtune.estimate import estimate


@dataclass(frozen=True)
class ResumeResult:
    id: str
    split: str
    format: str
    load_measured: int | None = None
    load_estimated: int | None = None
    first_step_measured: int | None = None
    first_step_estimated: int | None = None
    save_measured: int | None = None
    save_estimated: int | None = None
    host_staged_measured: int | None = None  # pinned host memory the save left cached
    host_staged_estimated: int | None = None

    @property
    def load_error(self) -> float | None:
        return _error(self.load_estimated, self.load_measured)

    @property
    def first_step_error(self) -> float | None:
        return _error(self.first_step_estimated, self.first_step_measured)

    @property
    def save_error(self) -> float | None:
        return _error(self.save_estimated, self.save_measured)


def _error(estimated: int | None, measured: int | None) -> float | None:
    return None if estimated is None or measured is None else (estimated - measured) / measured


@dataclass(frozen=True)
class ResumeSummary:
    runs: int
    mean_abs_error: float  # over the phases summarized, of every run
    max_abs_error: float
    worst: str  # "run id (phase)"


def evaluate_resume(run: dict[str, Any]) -> ResumeResult:
    """One round trip of the set (``memtune/bench/sets.py`` checked the record's phases)."""
    resumed, saved = run["measured"].get("resume"), run["measured"].get("save")
    with evaluating(run["id"]):
        est = estimate(gate(validate(run["config"])))
        rank = rank_of(est, run["rank"])
    fields: dict[str, Any] = {}
    if isinstance(resumed, dict):
        phase = est.resume(rank)
        if phase is None:
            raise InputError(f"{run['id']}: the job does not resume, or its checkpoint format is not modeled")
        fields |= {
            "load_measured": resumed["load_peak_bytes"],
            "load_estimated": phase.load_bytes,
            "first_step_measured": resumed["first_step_peak_bytes"],
            "first_step_estimated": phase.first_step_bytes,
        }
    if isinstance(saved, dict):
        save = est.save(rank)
        if save is None:
            raise InputError(f"{run['id']}: the job does not save, or its checkpoint format is not modeled")
        # the caching host allocator's peak while the save ran (reset before it); an async save
        # stages in its worker process, which the training process's counters do not see
        staged = (
            None if est.derived.async_save else saved.get("host_memory_stats", {}).get("allocated_bytes.peak")
        )
        fields |= {
            "save_measured": saved["save_peak_bytes"],
            "save_estimated": save.peak_bytes,
            "host_staged_measured": staged if isinstance(staged, int) else None,
            "host_staged_estimated": save.host_staged_bytes,
        }
    fmt = (resumed if isinstance(resumed, dict) else saved).get("format", "?")
    return ResumeResult(id=run["id"], split=run.get("split", "tune"), format=str(fmt), **fields)


def _summary(errors: list[tuple[float, str]], runs: int) -> ResumeSummary | None:
    if not errors:
        return None
    worst = max(errors)
    return ResumeSummary(runs, sum(e for e, _ in errors) / len(errors), worst[0], worst[1])


def summarize_resume(results: list[ResumeResult]) -> ResumeSummary | None:
    """The load and the first iteration of every run that resumed."""
    resumed = [r for r in results if r.load_error is not None and r.first_step_error is not None]
    errors = [(abs(r.load_error), f"{r.id} (load)") for r in resumed if r.load_error is not None]
    errors += [
        (abs(r.first_step_error), f"{r.id} (first iteration)")
        for r in resumed
        if r.first_step_error is not None
    ]
    return _summary(errors, len(resumed))


def summarize_save(results: list[ResumeResult]) -> ResumeSummary | None:
    """The save of every run that saved."""
    errors = [(abs(r.save_error), f"{r.id} (save)") for r in results if r.save_error is not None]
    return _summary(errors, len(errors))


def resume_splits(results: list[ResumeResult]) -> dict[str, ResumeSummary | None]:
    """Each split's summary of the resume phase, then ``all``."""
    return _splits(results, summarize_resume)


def save_splits(results: list[ResumeResult]) -> dict[str, ResumeSummary | None]:
    """Each split's summary of the save phase, then ``all``."""
    return _splits(results, summarize_save)


def _splits(
    results: list[ResumeResult], summarize: Callable[[list[ResumeResult]], ResumeSummary | None]
) -> dict[str, ResumeSummary | None]:
    names = sorted({r.split for r in results})
    splits = {name: summarize([r for r in results if r.split == name]) for name in names}
    splits["all"] = summarize(results)
    return splits
