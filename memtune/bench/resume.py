"""Resume-phase accuracy: the estimate's checkpoint load and first iteration after it against
``memtune measure --resume`` round trips (``benchmarks/measured/resume/``, docs/resume.md).

A resume run is a measured-set record whose ``measured.resume`` holds the fresh process's load
peak (``load_peak_bytes``) and its first iteration's (``first_step_peak_bytes``); both are
compared with ``Estimate.resume`` of the same rank.
"""

from __future__ import annotations

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
    load_measured: int
    load_estimated: int
    first_step_measured: int
    first_step_estimated: int

    @property
    def load_error(self) -> float:
        return (self.load_estimated - self.load_measured) / self.load_measured

    @property
    def first_step_error(self) -> float:
        return (self.first_step_estimated - self.first_step_measured) / self.first_step_measured


@dataclass(frozen=True)
class ResumeSummary:
    runs: int
    mean_abs_error: float  # over both phases of every run
    max_abs_error: float
    worst: str  # "run id (phase)"


def evaluate_resume(run: dict[str, Any]) -> ResumeResult:
    """One round trip of the set (``memtune/bench/sets.py`` checked the record's resume phases)."""
    measured = run["measured"]["resume"]
    with evaluating(run["id"]):
        est = estimate(gate(validate(run["config"])))
        phase = est.resume(rank_of(est, run["rank"]))
    if phase is None:
        raise InputError(f"{run['id']}: the job does not resume, or its checkpoint format is not modeled")
    return ResumeResult(
        id=run["id"],
        split=run.get("split", "tune"),
        format=str(measured.get("format", "?")),
        load_measured=measured["load_peak_bytes"],
        load_estimated=phase.load_bytes,
        first_step_measured=measured["first_step_peak_bytes"],
        first_step_estimated=phase.first_step_bytes,
    )


def summarize_resume(results: list[ResumeResult]) -> ResumeSummary | None:
    if not results:
        return None
    errors = [(abs(r.load_error), f"{r.id} (load)") for r in results]
    errors += [(abs(r.first_step_error), f"{r.id} (first iteration)") for r in results]
    worst = max(errors)
    return ResumeSummary(len(results), sum(e for e, _ in errors) / len(errors), worst[0], worst[1])


def resume_splits(results: list[ResumeResult]) -> dict[str, ResumeSummary | None]:
    """Each split's summary, then ``all``."""
    names = sorted({r.split for r in results})
    splits = {name: summarize_resume([r for r in results if r.split == name]) for name in names}
    splits["all"] = summarize_resume(results)
    return splits
