"""The verdict's calibration: the worst under-estimate per feature family on the tune runs.

``memtune bench calibrate`` evaluates the measured set and the published set, keeps their tune
runs only (the holdout is where the verdict's false-fit rate is reported) and writes
``memtune/estimate/calibration.json``, which the verdict reads (``memtune/estimate/verdict.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.bench.accuracy import RunResult
from memtune.bench.published import PublishedResult
from memtune.estimate.verdict import FAMILIES, Calibration, FamilyFigure


@dataclass(frozen=True)
class Observed:
    id: str
    source: str  # "measured" or "published"
    peak: int
    estimated: int
    families: tuple[str, ...]

    @property
    def under(self) -> float:
        """How far the peak lies above the estimate, as a share of the estimate (negative: over)."""
        return (self.peak - self.estimated) / self.estimated


def observed(measured: list[RunResult], published: list[PublishedResult]) -> list[Observed]:
    """The tune runs of both sets."""
    return [
        Observed(r.id, "measured", r.measured, r.estimated, r.families) for r in measured if r.split == "tune"
    ] + [
        Observed(r.id, "published", r.published, r.estimated, r.families)
        for r in published
        if r.split == "tune"
    ]


def calibrate(measured: list[RunResult], published: list[PublishedResult]) -> Calibration:
    runs = observed(measured, published)
    families = {}
    for family in FAMILIES:
        members = [r for r in runs if family in r.families]
        if not members:
            continue
        worst = max(members, key=lambda r: r.under)
        families[family] = FamilyFigure(
            family,
            measured_runs=sum(r.source == "measured" for r in members),
            published_runs=sum(r.source == "published" for r in members),
            worst_under=max(0.0, worst.under),
            worst_id=worst.id if worst.under > 0 else None,
        )
    return Calibration(families, frozenset(r.families for r in runs))
