"""Fit the flex dispatcher's host work (``MOE_DISPATCHER_HOST_FWD_S["flex"]``,
memtune/perf/constants.py) on published tune runs only.

    python benchmarks/fit_flex_host.py

Megatron-Core's flex dispatcher (DeepEP or HybridEP) adds host work to an MoE layer's forward
(its Python around the fused kernels, the token counts the grouped GEMM needs on the host); no
measurement of it exists here (one GPU, no DeepEP, no Transformer Engine on the lent machine).
It shows only where it bounds a step: small MoE layers at micro-batch 1, whose GPU work is
shorter than the host's. The runs: every run of a tune set of ``benchmarks/published/layouts``
(``memtune/bench/plan.py split_of``; holdout sets are never read) with the flex dispatcher whose
predicted throughput moves by more than 0.5% between 0 and 3 ms, i.e. whose step this host
work bounds somewhere in that range. The value: the smallest on a grid of 0.1 ms at which the
median of predicted / measured throughput - 1 over those runs (model TFLOP/s where published,
else tokens/s) is at most zero. Prints the runs, their errors at 0 and at the value, and the
value.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_blackwell_kernels import tune_runs  # noqa: E402

from memtune.bench.plan import score_set  # noqa: E402
from memtune.perf import constants as K  # noqa: E402

GRID = [round(i * 1e-4, 4) for i in range(31)]  # 0 ... 3 ms
MOVES = 0.005


def flex_runs() -> list[tuple[str, dict]]:
    """(label, one-run set) for every run of the tune sets with the flex dispatcher."""
    return [
        (f"{one['id']}: {one['runs'][0]['label']}", one)
        for _, one, d in tune_runs()
        if d.is_moe and d.model.moe_token_dispatcher_type == "flex"
    ]


def errors(runs: list[tuple[str, dict]], host_s: float) -> list[float]:
    """Each run's predicted / measured throughput - 1 with the flex dispatcher's host work at
    ``host_s``."""
    saved = K.MOE_DISPATCHER_HOST_FWD_S["flex"]
    K.MOE_DISPATCHER_HOST_FWD_S["flex"] = host_s
    try:
        return [r.throughput_error for _, entry in runs for r in score_set(entry).runs]
    finally:
        K.MOE_DISPATCHER_HOST_FWD_S["flex"] = saved


def host_bound_runs() -> list[tuple[str, dict]]:
    """The flex runs whose prediction the host work moves anywhere on the grid."""
    runs = flex_runs()
    low, high = errors(runs, GRID[0]), errors(runs, GRID[-1])
    return [run for run, a, b in zip(runs, low, high, strict=True) if abs((1 + b) / (1 + a) - 1) > MOVES]


def main() -> int:
    runs = host_bound_runs()
    fitted = next(x for x in GRID if statistics.median(errors(runs, x)) <= 0)
    for (label, _), before, after in zip(runs, errors(runs, 0.0), errors(runs, fitted), strict=True):
        print(f"  {before:+.1%} -> {after:+.1%}  {label}")
    print(f'MOE_DISPATCHER_HOST_FWD_S["flex"] = {fitted * 1e3:.1f} ms ({len(runs)} runs)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
