"""``memtune bench plan``: the planner's speed, and the throughput model against published
measured comparisons of layouts (``--accuracy``)."""

from __future__ import annotations

import math
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.perf import predict
from memtune.plan.query import Query, base_job
from memtune.plan.search import PlanResult, search

DEFAULT_LAYOUTS = Path("benchmarks/published/layouts")


@dataclass
class Speed:
    result: PlanResult
    wall_s: float
    cpu_s: float  # this process and its workers
    workers: int


def speed(model: str, gpus: int, seq: int, gbs: int, gpu: str, workers: int) -> Speed:
    base = base_job(Query(model, gpus, gpu, 8, seq, gbs, "pretrain"))

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    cpu0, wall0 = cpu(), time.perf_counter()
    result = search(base, top=5, workers=workers)
    return Speed(result, time.perf_counter() - wall0, cpu() - cpu0, workers)


@dataclass
class RunScore:
    set_id: str
    split: str
    label: str
    measured: float
    predicted: float
    measured_relative: float  # to the set's first run
    predicted_relative: float

    @property
    def error(self) -> float:
        return self.predicted_relative / self.measured_relative - 1


def split_of(set_id: str) -> str:
    """The held-back rule of benchmarks/published/layouts/README.md."""
    import hashlib

    return "holdout" if hashlib.sha256(set_id.encode()).hexdigest()[0] in "01234567" else "tune"


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-a of two equally long sequences (ties count as neither)."""
    pairs = [(i, j) for i in range(len(xs)) for j in range(i + 1, len(xs))]
    score = sum(
        math.copysign(1, (xs[i] - xs[j]) * (ys[i] - ys[j])) if (xs[i] - xs[j]) * (ys[i] - ys[j]) else 0
        for i, j in pairs
    )
    return score / len(pairs) if pairs else 1.0


def score_set(entry: dict[str, Any]) -> list[RunScore]:
    model = entry["model"]
    if isinstance(model, dict):
        base = base_job(
            Query(
                "llama3-8b",
                entry["gpus"],
                entry["gpu"],
                entry["gpus_per_node"],
                entry["seq"],
                entry["gbs"],
                entry["mode"],
            )
        )
        base = base.model_copy(update={"model": base.model.__class__(**model)})
    else:
        base = base_job(
            Query(
                model,
                entry["gpus"],
                entry["gpu"],
                entry["gpus_per_node"],
                entry["seq"],
                entry["gbs"],
                entry["mode"],
            )
        )
    common = [Change.parse(text) for text in entry.get("common", [])]
    scores = []
    for run in entry["runs"]:
        job = with_changes(base, common + [Change.parse(text) for text in run["overrides"]])
        pred = predict(gate(job))
        metric, measured = next(iter(run["measured"].items()))
        predicted = getattr(pred, metric)
        scores.append(
            RunScore(entry["id"], split_of(entry["id"]), run["label"], measured, predicted, 0.0, 0.0)
        )
    for s in scores:
        s.measured_relative = s.measured / scores[0].measured
        s.predicted_relative = s.predicted / scores[0].predicted
    return scores


def accuracy(paths: list[Path]) -> list[list[RunScore]]:
    files = [f for p in paths for f in (sorted(p.glob("*.yaml")) if p.is_dir() else [p])]
    return [score_set(entry) for f in files for entry in yaml.safe_load(f.read_text())["sets"]]
