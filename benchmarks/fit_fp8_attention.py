"""Fit ``FP8_ATTENTION_BWD_FACTOR`` (memtune/perf/constants.py) on published tune runs only.

    python benchmarks/fit_fp8_attention.py

FP8 attention's backward kernels are priced at cuDNN's bf16 attention backward's time times the
factor (its forward at the measured ``FP8_ATTENTION_FWD_FACTOR``). The runs: every run on an
H100 or H200 (whose kernels the tables measure: no whole-step GPU factor) of a tune set of
``benchmarks/published/layouts`` (``memtune/bench/plan.py split_of``; holdout sets are never read)
whose job trains its attention in FP8 (``Derived.fp8_attention``). The factor: the largest on a
grid of 0.01 steps from 1.00 down to 0.30 at which the median of predicted / measured throughput
- 1 over those runs (model TFLOP/s where published, else tokens/s) is at least zero. Prints the
factor, the runs' median error per GPU before and after (Blackwell's too, not fitted on), and
the number of runs.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_blackwell_kernels import report, tune_runs  # noqa: E402

from memtune.bench.plan import score_set  # noqa: E402
from memtune.perf import constants as K  # noqa: E402

GRID = [round(1 - i / 100, 2) for i in range(71)]  # 1.00 ... 0.30


HOPPER = ("H100-80GB", "H200")


def fp8_attention_runs() -> list[tuple[str, dict]]:
    """(GPU, one-run set) for every run of the tune sets with FP8 attention."""
    return [(gpu, one) for gpu, one, d in tune_runs() if d.fp8_attention]


def errors(runs: list[tuple[str, dict]], factor: float) -> list[tuple[str, float]]:
    """Each run's predicted / measured throughput - 1 with FP8 attention's backward at ``factor``."""
    saved = K.FP8_ATTENTION_BWD_FACTOR
    K.FP8_ATTENTION_BWD_FACTOR = factor
    try:
        return [(gpu, r.throughput_error) for gpu, entry in runs for r in score_set(entry).runs]
    finally:
        K.FP8_ATTENTION_BWD_FACTOR = saved


def main() -> int:
    runs = fp8_attention_runs()
    hopper = [(gpu, one) for gpu, one in runs if gpu in HOPPER]
    report("at 1.00", errors(runs, 1.0))
    factor = next(f for f in GRID if statistics.median(e for _, e in errors(hopper, f)) >= 0)
    print(f"FP8_ATTENTION_BWD_FACTOR = {factor:.2f}")
    report(f"at {factor:.2f}", errors(runs, factor))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
