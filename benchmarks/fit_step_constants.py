"""Fit the step model's fixed costs and in-step kernel factor on tune runs only.

    python benchmarks/fit_step_constants.py

Two tune sets, never a holdout run: the single-rank runs timed alone on the H200
(``benchmarks/gpu/results/compute-timing-h200.results.jsonl``, split by the measured set's sha1
rule, benchmarks/measured/README.md) and the tune runs of Megatron-LM's functional-test step
times (``benchmarks/published/layouts/megatron-lm-ci``, ``memtune/bench/plan.py ci_split_of``).
Each set has its own host floor (``MEASURE_RUNNER`` for memtune's loop, ``MEGATRON_LM_LOOP``
for Megatron-LM's), the kernel factors are shared; the objective is the sum of the two sets'
median |relative error| of the step time (stage compute on one rank; the whole step on CI). Coordinate descent over fixed grids, three
passes, from the constants as committed; prints the best values and both medians, which
``memtune/perf/constants.py`` then carries.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

TIMINGS = ROOT / "benchmarks" / "gpu" / "results" / "compute-timing-h200.results.jsonl"
CI = ROOT / "benchmarks" / "published" / "layouts" / "megatron-lm-ci"
FLOOR_GRIDS = {
    "layer_fwd_s": [0.1e-3, 0.2e-3, 0.3e-3, 0.5e-3, 0.8e-3, 1.2e-3, 1.6e-3],
    "backward_factor": [1.0, 1.5, 2.0, 3.0],
    "microbatch_s": [0.0, 0.5e-3, 1e-3, 2e-3, 3e-3, 5e-3],
    "step_s": [10e-3, 15e-3, 20e-3, 25e-3, 30e-3, 40e-3],
}
SHARED_GRIDS = {
    "IN_STEP_KERNEL_FACTOR": [1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12],
    "SEQUENTIAL_EXPERT_FWD_S": [0.0, 0.1e-3, 0.2e-3, 0.3e-3, 0.4e-3, 0.5e-3, 0.6e-3],
}


def main() -> int:
    from matrix import split_of

    from memtune.bench.plan import accuracy
    from memtune.config import derive, validate
    from memtune.perf import constants as K
    from memtune.perf.step import predict_step

    timed = []
    for line in TIMINGS.read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        if split_of(run["id"]) == "tune":
            measured = statistics.median(it["seconds"] for it in run["measured"]["iterations"][1:])
            timed.append((derive(validate(run["config"])), run["pp_rank"], measured))

    def medians() -> tuple[float, float]:
        single = statistics.median(
            abs(predict_step(d, floor=K.MEASURE_RUNNER).simulated.stage_compute_s[r] / m - 1)
            for d, r, m in timed
        )
        ci = statistics.median(
            abs(r.measured / r.predicted - 1) for g in accuracy([CI], "tune") for r in g.runs
        )
        return single, ci

    knobs = [(None, name, grid) for name, grid in SHARED_GRIDS.items()]
    knobs += [
        (floor, field, grid)
        for floor in ("MEGATRON_LM_LOOP", "MEASURE_RUNNER")
        for field, grid in FLOOR_GRIDS.items()
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
    single, ci = medians()
    for name in SHARED_GRIDS:
        print(f"{name} = {getattr(K, name):g}")
    for floor in ("MEGATRON_LM_LOOP", "MEASURE_RUNNER"):
        print(f"{floor} = {getattr(K, floor)}")
    print(f"single-rank tune median |error| {single:.1%} ({len(timed)} runs), CI tune {ci:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
