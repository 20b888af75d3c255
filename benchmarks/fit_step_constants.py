"""Fit the step model's fixed costs and in-step kernel factor on tune runs only.

    python benchmarks/fit_step_constants.py

Three tune sets, never a holdout run: the single-rank runs timed alone on the H200
(``benchmarks/gpu/results/compute-timing-h200.results.jsonl``: the iteration's seconds;
``ctime-h200.results.jsonl``: forward+backward and the optimizer step apart), each split by the
measured set's sha1 rule (benchmarks/measured/README.md), and the tune runs of Megatron-LM's
functional-test step times (``benchmarks/published/layouts/megatron-lm-ci``,
``memtune/bench/plan.py ci_split_of``).

First the optimizer step alone: ``OPTIMIZER_STEP_BYTES_PER_PARAM`` (with and without the
distributed optimizer) and ``MEASURE_RUNNER.step_s`` by least squares on the ctime- tune runs'
optimizer seconds (the CPU-offloaded ones left out: their step is the host's). Then the host
floors (``MEASURE_RUNNER`` for memtune's loop, ``MEGATRON_LM_LOOP`` for Megatron-LM's) and the
shared kernel factors by coordinate descent over fixed grids, three passes, from the constants
as committed, minimising the sum of the three sets' median |relative error| (stage compute on
one rank: the whole iteration, or forward+backward; the whole step on CI). Prints the values,
which ``memtune/perf/constants.py`` then carries, and the medians.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

TIMINGS = ROOT / "benchmarks" / "gpu" / "results" / "compute-timing-h200.results.jsonl"
SPLIT_TIMINGS = ROOT / "benchmarks" / "gpu" / "results" / "ctime-h200.results.jsonl"
CI = ROOT / "benchmarks" / "published" / "layouts" / "megatron-lm-ci"
FLOOR_GRIDS = {
    "layer_fwd_s": [0.1e-3, 0.2e-3, 0.3e-3, 0.5e-3, 0.8e-3, 1.2e-3, 1.6e-3, 2.0e-3, 2.5e-3, 3.0e-3],
    "backward_factor": [1.0, 1.5, 2.0, 3.0],
    "microbatch_s": [0.0, 0.5e-3, 1e-3, 2e-3, 3e-3, 5e-3, 7e-3, 10e-3],
    "step_s": [10e-3, 15e-3, 20e-3, 25e-3, 30e-3, 40e-3],
}
LEAST_SQUARES = {"MEASURE_RUNNER": "step_s"}  # fitted with the optimizer, not on the grid
SHARED_GRIDS = {
    "IN_STEP_KERNEL_FACTOR": [1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12],
    "SEQUENTIAL_EXPERT_FWD_S": [0.0, 0.1e-3, 0.2e-3, 0.3e-3, 0.4e-3, 0.5e-3, 0.6e-3, 0.8e-3, 1.0e-3, 1.5e-3],
}


def main() -> int:
    from matrix import split_of

    from memtune.bench.plan import accuracy
    from memtune.config import derive, validate
    from memtune.perf import constants as K
    from memtune.perf.step import predict_step

    def tune_runs(path: Path) -> list[tuple[Any, int, list[dict[str, Any]]]]:
        runs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return [
            (derive(validate(r["config"])), r["pp_rank"], r["measured"]["iterations"][1:])
            for r in runs
            if split_of(r["id"]) == "tune"
        ]

    def median_of(iterations: list[dict[str, Any]], key: str) -> float:
        return statistics.median(it[key] for it in iterations)

    timed = [(d, r, median_of(its, "seconds")) for d, r, its in tune_runs(TIMINGS)]
    split = [
        (d, r, median_of(its, "forward_backward_seconds"), median_of(its, "optimizer_seconds"))
        for d, r, its in tune_runs(SPLIT_TIMINGS)
    ]

    # the optimizer step: seconds = step_s + Adam's kernel + bytes[distributed] / HBM per parameter
    def optimizer_s(d: Any, r: int, step_bytes: float) -> float:
        K.OPTIMIZER_STEP_BYTES_PER_PARAM = {False: step_bytes, True: step_bytes}
        floor = dataclasses.replace(K.MEASURE_RUNNER, step_s=0.0)
        return predict_step(d, floor=floor).simulated.stage_optimizer_s[r]

    on_device = [(d, r, opt) for d, r, _, opt in split if not d.job.optimizer.optimizer_cpu_offload]
    rows, targets = [], []
    for d, r, opt in on_device:
        adam, per_byte = optimizer_s(d, r, 0.0), optimizer_s(d, r, 1.0) - optimizer_s(d, r, 0.0)
        distributed = d.use_distributed_optimizer
        rows.append([1.0, 0.0 if distributed else per_byte, per_byte if distributed else 0.0])
        targets.append(opt - adam)
    (step_s, plain_bytes, distributed_bytes), *_ = numpy.linalg.lstsq(
        numpy.array(rows), numpy.array(targets), rcond=None
    )
    K.OPTIMIZER_STEP_BYTES_PER_PARAM = {
        False: round(float(plain_bytes), 1),
        True: round(float(distributed_bytes), 1),
    }
    K.MEASURE_RUNNER = dataclasses.replace(K.MEASURE_RUNNER, step_s=round(float(step_s), 4))

    def medians() -> tuple[float, float, float]:
        single = statistics.median(
            abs(predict_step(d, floor=K.MEASURE_RUNNER).simulated.stage_compute_s[r] / m - 1)
            for d, r, m in timed
        )
        passes = []
        for d, r, fb, _ in split:
            sim = predict_step(d, floor=K.MEASURE_RUNNER).simulated
            passes.append(abs((sim.stage_compute_s[r] - sim.stage_optimizer_s[r]) / fb - 1))
        ci = statistics.median(
            abs(r.measured / r.predicted - 1) for g in accuracy([CI], "tune") for r in g.runs
        )
        return single, statistics.median(passes), ci

    knobs = [(None, name, grid) for name, grid in SHARED_GRIDS.items()]
    knobs += [
        (floor, field, grid)
        for floor in ("MEGATRON_LM_LOOP", "MEASURE_RUNNER")
        for field, grid in FLOOR_GRIDS.items()
        if LEAST_SQUARES.get(floor) != field
    ]

    def get(floor, name):
        return getattr(getattr(K, floor), name) if floor else getattr(K, name)

    def put(floor, name, value):
        if floor:
            setattr(K, floor, dataclasses.replace(getattr(K, floor), **{name: value}))
        else:
            setattr(K, name, value)

    best = sum(medians())
    for _ in range(3):
        for floor, name, grid in knobs:
            kept = get(floor, name)
            for value in grid:
                put(floor, name, value)
                score = sum(medians())
                if score < best - 1e-9:
                    best, kept = score, value
            put(floor, name, kept)
    single, passes, ci = medians()
    print(f"OPTIMIZER_STEP_BYTES_PER_PARAM = {K.OPTIMIZER_STEP_BYTES_PER_PARAM} ({len(on_device)} runs)")
    for name in SHARED_GRIDS:
        print(f"{name} = {getattr(K, name):g}")
    for floor in ("MEGATRON_LM_LOOP", "MEASURE_RUNNER"):
        print(f"{floor} = {getattr(K, floor)}")
    print(
        f"single-rank tune median |error| {single:.1%} ({len(timed)} runs), forward+backward "
        f"{passes:.1%} ({len(split)} runs), CI tune {ci:.1%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
