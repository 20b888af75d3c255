"""Estimator accuracy against measured runs.

A measured run is one JSON line: the memtune config it ran, the global rank measured, and the
allocator's steady-state peak (``measured.peak_allocated_bytes``, iteration 2 onward). The
estimate for that rank is compared with it; so is Megatron-LM's theoretical formula.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.bench.megatron_formula import megatron_lm_estimate
from memtune.bench.sets import evaluating, rank_of, read_measured
from memtune.check import gate
from memtune.config import validate
from memtune.errors import InputError
from memtune.estimate import estimate
from memtune.estimate.verdict import families_of

# Id prefixes of the measured runs added for one feature each (benchmarks/measured/matrix.py).
FAMILIES = {
    "mtp": "mtp",
    "fsdp": "fsdp",
    "ooff": "optim-offload-autogc",
    "mgc": "optim-offload",
    "aoff": "activation-offload",
    "lora": "LoRA",
    "def": "stack defaults",
}


@dataclass(frozen=True)
class RunResult:
    id: str
    split: str
    pp_rank: int
    measured: int
    estimated: int
    megatron_lm: int
    collected: int  # the estimate once a full garbage collection has run; below ``estimated``
    # only where it counts a replaced offloading optimizer's device copies (estimate/state.py)
    families: tuple[str, ...] = ("dense",)  # the verdict's families of the config (estimate/verdict.py)
    error_margin: float = 0.0  # the verdict's margin beyond fragmentation (estimate/verdict.py Margin.error)

    @property
    def false_fit(self) -> bool:
        """On the GPU whose capacity puts the estimate exactly at the ``fits`` boundary, the measured
        peak with the same fragmentation allowance would not have fit (docs/verdict.md)."""
        return self.excess > 0

    @property
    def excess(self) -> float:
        """How far the peak lies above the estimate beyond the verdict's margin, as a share of the
        estimate (the under-estimate as ``memtune/bench/calibrate.py`` computes it, less the margin)."""
        return (self.measured - self.estimated) / self.estimated - self.error_margin

    @property
    def error(self) -> float:
        return (self.estimated - self.measured) / self.measured

    @property
    def outside_collection_range(self) -> float:
        """How far the measured peak lies outside [collected, estimated], relative to it; 0
        inside. Where Python's automatic collector decides, both ends are possible peaks."""
        if self.measured > self.estimated:
            return (self.measured - self.estimated) / self.measured
        return max(0.0, (self.collected - self.measured) / self.measured)

    @property
    def family(self) -> str:
        """The feature family a run was added for, by its id prefix; ``core`` for the rest."""
        prefix = self.id.split("-", 1)[0]
        return FAMILIES.get(prefix, "core")

    @property
    def megatron_lm_error(self) -> float:
        return (self.megatron_lm - self.measured) / self.measured


@dataclass(frozen=True)
class Summary:
    runs: int
    mean_abs_error: float
    max_abs_error: float
    worst_id: str
    megatron_lm_mean_abs_error: float
    megatron_lm_max_abs_error: float


def read_runs(paths: list[Path]) -> list[dict[str, Any]]:
    """The measured runs of ``paths`` (files or folders of ``*.jsonl``), each record checked
    (``memtune/bench/sets.py``)."""
    return read_measured(paths)


def evaluate(run: dict[str, Any]) -> RunResult:
    with evaluating(run["id"]):
        est = estimate(gate(validate(run["config"])))
        rank = rank_of(est, run["rank"])
    return RunResult(
        id=run["id"],
        split=run.get("split", "tune"),
        pp_rank=rank.pp_rank,
        measured=int(run["measured"]["peak_allocated_bytes"]),
        estimated=rank.peak_bytes,
        megatron_lm=round(megatron_lm_estimate(est.derived)),
        collected=rank.peak_bytes - round(rank.state.orphaned_optimizer_copies),
        families=families_of(est.derived),
        error_margin=est.verdict_margin.error,
    )


def summarize(results: list[RunResult]) -> Summary | None:
    if not results:
        return None
    worst = max(results, key=lambda r: abs(r.error))
    return Summary(
        runs=len(results),
        mean_abs_error=sum(abs(r.error) for r in results) / len(results),
        max_abs_error=abs(worst.error),
        worst_id=worst.id,
        megatron_lm_mean_abs_error=sum(abs(r.megatron_lm_error) for r in results) / len(results),
        megatron_lm_max_abs_error=max(abs(r.megatron_lm_error) for r in results),
    )


@dataclass(frozen=True)
class CollectionRange:
    """Runs whose peak depends on when Python's collector runs (estimate below bound)."""

    runs: int
    worst_outside: float  # the farthest a measured peak lies outside [collected, estimated]
    worst_id: str


@dataclass(frozen=True)
class FalseFits:
    """Runs the verdict calls ``fits`` at the boundary capacity whose real peak would not fit."""

    runs: int
    false_fits: int
    ids: tuple[str, ...]
    worst_excess: float  # how far the worst false fit's peak exceeded the margin (share of the estimate)

    @property
    def rate(self) -> float:
        return self.false_fits / self.runs


def false_fits(excesses: list[tuple[str, float]]) -> FalseFits | None:
    """Over ``(run id, excess)`` pairs: a run is a false fit where its excess is positive."""
    if not excesses:
        return None
    ids = tuple(run_id for run_id, excess in excesses if excess > 0)
    return FalseFits(len(excesses), len(ids), ids, max(0.0, *(excess for _, excess in excesses)))


@dataclass(frozen=True)
class AccuracyReport:
    shown: list[RunResult]  # the runs of the split asked for
    splits: dict[str, Summary | None]  # per split over every family, and "all"
    families: dict[tuple[str, str], Summary]  # (family, split) -> summary, where there are runs
    collection_range: CollectionRange | None  # over the shown runs with a collection range
    false_fits: dict[str, FalseFits | None]  # per split, as ``splits``


def accuracy_report(results: list[RunResult], split: str = "all") -> AccuracyReport:
    """Summaries per split and per family; InputError when ``split`` names no run's split."""
    known = sorted({r.split for r in results})
    if split != "all" and split not in known:
        raise InputError(f"--split: no run is in split {split!r}; the splits are all, {', '.join(known)}")
    names = sorted(known, key=lambda n: (n != "tune", n != "holdout", n))
    splits = {name: summarize([r for r in results if r.split == name]) for name in names}
    splits["all"] = summarize(results)
    families = {}
    for family in sorted({r.family for r in results}):
        for name in names:
            if summary := summarize([r for r in results if r.family == family and r.split == name]):
                families[(family, name)] = summary
    shown = [r for r in results if split in ("all", r.split)]
    unfit = {
        name: false_fits([(r.id, r.excess) for r in results if name in ("all", r.split)]) for name in splits
    }
    return AccuracyReport(
        shown, splits, families, collection_range([r for r in shown if r.collected < r.estimated]), unfit
    )


def collection_range(results: list[RunResult]) -> CollectionRange | None:
    if not results:
        return None
    worst = max(results, key=lambda r: r.outside_collection_range)
    return CollectionRange(
        runs=len(results),
        worst_outside=worst.outside_collection_range,
        worst_id=worst.id,
    )
