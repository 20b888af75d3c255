"""Fit ``COLLECTIVE_LAUNCH_S`` (memtune/perf/constants.py) on tune runs only.

    python benchmarks/fit_collective_launch.py

The constant is what each TP, CP or LoRA collective of a layer costs beyond the bytes NCCL's
tuner prices (memtune/perf/layer.py): its launch, and for Transformer Engine's userbuffer
overlap each exchange's share of the split GEMMs' synchronisation. It was fitted once, on the
functional tests' tune runs of an early step model (9493768); every relation added since moved
what it stands beside. The runs: every tune set of ``benchmarks/published/layouts`` and the
functional tests' tune runs (``memtune/bench/plan.py split_of`` and ``ci_split_of``; holdout
sets are never read). The rule, fixed before the grid was run: the value on a grid of 10 us
steps from 50 to 200 us that minimises the sum of the three tune medians ``memtune bench plan
--accuracy --split tune`` reports for issues 37 and 38, the relative error within groups, the
absolute model TFLOP/s error and the functional tests' step error; ties to the larger value.
Prints each grid point's three medians and the choice.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memtune.bench.plan import accuracy, summarize  # noqa: E402
from memtune.perf import constants as K  # noqa: E402

LAYOUTS = ROOT / "benchmarks" / "published" / "layouts"
GRID = [round(50e-6 + i * 10e-6, 6) for i in range(16)]  # 50 ... 200 us


def medians(launch_s: float) -> tuple[float, float, float]:
    """The tune split's median relative error, TFLOP/s error and functional-test step error with
    ``launch_s`` per collective."""
    saved = K.COLLECTIVE_LAUNCH_S
    K.COLLECTIVE_LAUNCH_S = launch_s
    try:
        summary = summarize(accuracy([LAYOUTS], "tune"))
    finally:
        K.COLLECTIVE_LAUNCH_S = saved
    values = (summary.median_relative_error, summary.median_tflops_error, summary.median_step_error)
    if any(v is None for v in values):
        sys.exit("a tune median is missing: no tune run of that kind was scored")
    return values  # type: ignore[return-value]


def main() -> int:
    scores = {}
    print(" launch   relative  TFLOP/s  CI step   sum")
    for launch_s in GRID:
        rel, tflops, step = medians(launch_s)
        scores[launch_s] = rel + tflops + step
        print(f"{launch_s * 1e6:5.0f} us  {rel:7.2%}  {tflops:7.2%}  {step:7.2%}  {scores[launch_s]:.4f}")
    best = min(scores.values())
    choice = max(v for v, s in scores.items() if s == best)
    print(f"COLLECTIVE_LAUNCH_S = {choice * 1e6:.0f} us (committed: {K.COLLECTIVE_LAUNCH_S * 1e6:.0f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
