"""The estimator against published peaks of real multi-GPU runs (``benchmarks/published/``).

Each run is one YAML file: ``id``, ``rank`` (the global rank whose peak was published),
``published.bytes`` (its ``max_memory_allocated``) and ``config`` (memtune's format), plus its
source. The split follows the measured set's rule (holdout iff sha1 of the id mod 10 < 3),
fixed before any comparison. Each run also falls into the feature families it exercises (the
verdict's, ``memtune/estimate/verdict.py`` :func:`families_of`); the report summarizes every
family apart, since one family's errors hide in the mean of the others.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.bench import sets
from memtune.bench.accuracy import FalseFits, false_fits
from memtune.check import gate
from memtune.config import validate
from memtune.estimate import estimate
from memtune.estimate.verdict import FAMILIES, families_of

HOLDOUT_SHARE = 3  # of 10


def split_of(run_id: str) -> str:
    return (
        "holdout" if int(hashlib.sha1(run_id.encode()).hexdigest()[:8], 16) % 10 < HOLDOUT_SHARE else "tune"
    )


@dataclass(frozen=True)
class PublishedResult:
    id: str
    split: str
    published: int
    estimated: int
    families: tuple[str, ...] = ("dense",)
    error_margin: float = 0.0  # the verdict's margin beyond fragmentation (estimate/verdict.py Margin.error)

    @property
    def false_fit(self) -> bool:
        """As the measured set's (memtune/bench/accuracy.py ``RunResult.false_fit``)."""
        return self.excess > 0

    @property
    def excess(self) -> float:
        """How far the peak lies above the estimate beyond the verdict's margin, as a share of the
        estimate (the under-estimate as ``memtune/bench/calibrate.py`` computes it, less the margin)."""
        return (self.published - self.estimated) / self.estimated - self.error_margin

    @property
    def error(self) -> float:
        return (self.estimated - self.published) / self.published

    @property
    def under(self) -> bool:
        """An under-estimate says "fits" before an out-of-memory."""
        return self.estimated < self.published


@dataclass(frozen=True)
class PublishedSummary:
    runs: int
    mean_error: float  # signed: a negative mean is a family memtune under-estimates
    mean_abs_error: float
    max_abs_error: float
    worst_id: str
    under_estimates: int
    worst_under: float  # most negative error, 0 when none


def read_published(paths: list[Path]) -> list[dict[str, Any]]:
    """The published runs of ``paths`` (files or folders of ``*.yaml``), each checked
    (``memtune/bench/sets.py``)."""
    return sets.read_published(paths)


def evaluate_published(run: dict[str, Any]) -> PublishedResult:
    with sets.evaluating(run["id"]):
        checked = gate(validate(run["config"]))
        est = estimate(checked)
        rank = sets.rank_of(est, run["rank"])
    return PublishedResult(
        id=run["id"],
        split=split_of(run["id"]),
        published=run["published"]["bytes"],
        estimated=rank.peak_bytes,
        families=families_of(checked.derived),
        error_margin=est.verdict_margin.error,
    )


def summarize_published(results: list[PublishedResult]) -> PublishedSummary | None:
    if not results:
        return None
    worst = max(results, key=lambda r: abs(r.error))
    unders = [r.error for r in results if r.under]
    return PublishedSummary(
        runs=len(results),
        mean_error=sum(r.error for r in results) / len(results),
        mean_abs_error=sum(abs(r.error) for r in results) / len(results),
        max_abs_error=abs(worst.error),
        worst_id=worst.id,
        under_estimates=len(unders),
        worst_under=min(unders, default=0.0),
    )


@dataclass(frozen=True)
class FamilySummary:
    family: str
    splits: dict[str, PublishedSummary | None]  # tune, holdout (those shown)


@dataclass(frozen=True)
class PublishedReport:
    shown: list[PublishedResult]
    splits: dict[str, PublishedSummary | None]
    families: list[FamilySummary]  # families with at least one shown run, in FAMILIES order
    false_fits: dict[str, FalseFits | None]  # per split, as ``splits``


def published_report(results: list[PublishedResult], split: str = "all") -> PublishedReport:
    names = ("tune", "holdout") if split == "all" else (split,)
    splits = {name: summarize_published([r for r in results if r.split == name]) for name in names}
    if split == "all":
        splits["all"] = summarize_published(results)
    shown = [r for r in results if split in ("all", r.split)]
    families = [
        FamilySummary(
            family,
            {name: summarize_published([r for r in members if r.split == name]) for name in names},
        )
        for family in FAMILIES
        if (members := [r for r in shown if family in r.families])
    ]
    unfit = {
        name: false_fits([(r.id, r.excess) for r in results if name in ("all", r.split)]) for name in splits
    }
    return PublishedReport(shown, splits, families, unfit)
