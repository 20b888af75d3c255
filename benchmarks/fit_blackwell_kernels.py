"""Fit ``BLACKWELL_KERNEL_FACTOR`` (memtune/perf/constants.py) on published tune runs only.

    python benchmarks/fit_blackwell_kernels.py

B200, GB200, B300 and GB300 have no kernel tables here: their kernels are priced at the H200's
fractions of their datasheet peaks. One factor per generation (``GENERATIONS``): Blackwell (B200,
GB200) and Blackwell Ultra (B300, GB300), which is other silicon at a higher power limit (1.1 and
1.4 kW against 1.0 and 1.2 kW) with the same BF16 and FP8 peaks. The runs: every dense run (no
MoE layer) on a GPU of the generation in a tune set of ``benchmarks/published/layouts``
(``memtune/bench/plan.py split_of``; holdout sets are never read). MoE runs are left out because
their dispatch and host work are priced apart and err on H100s too. Per generation, the smallest
factor on a grid of 0.01 steps at which the median of predicted / measured throughput - 1 over
its runs (model TFLOP/s where published, else tokens/s) is at most zero. Prints each factor, the
runs' median error per GPU before and after, and the number of runs.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memtune.bench.plan import RUN_FIELDS, _base, score_set, split_of  # noqa: E402
from memtune.bench.sets import read_layouts  # noqa: E402
from memtune.check import gate  # noqa: E402
from memtune.config.changes import Change, with_changes  # noqa: E402
from memtune.config.derived import Derived  # noqa: E402
from memtune.errors import InputError  # noqa: E402
from memtune.perf import constants as K  # noqa: E402

LAYOUTS = ROOT / "benchmarks" / "published" / "layouts"
GRID = [round(1 + i / 100, 2) for i in range(61)]  # 1.00 ... 1.60


def tune_runs() -> Iterator[tuple[str, dict, Derived]]:
    """(GPU, one-run set, the job as the gate derives it) for every run of the tune sets the gate
    passes."""
    sets, _ = read_layouts([LAYOUTS])
    for entry in sets:
        if split_of(entry["id"]) != "tune":
            continue
        common = [Change.parse(t) for t in entry.get("common", [])]
        for run in entry["runs"]:
            fields = {**entry, **{k: run[k] for k in RUN_FIELDS if k in run}}
            job = with_changes(_base(fields), common + [Change.parse(t) for t in run["overrides"]])
            try:
                checked = gate(job)
            except InputError:  # refused as Megatron refuses it: unscored, as bench plan lists it
                continue
            yield fields["gpu"], {**entry, "runs": [run]}, checked.derived


# The GPUs that share one factor (one silicon generation, one set of tensor cores)
GENERATIONS = {"Blackwell": ("B200", "GB200"), "Blackwell Ultra": ("B300", "GB300")}


def dense_blackwell_runs(generation: str) -> list[tuple[str, dict]]:
    """(GPU, one-run set) for every dense run on a GPU of ``generation`` in the tune sets."""
    gpus = GENERATIONS[generation]
    return [(gpu, one) for gpu, one, d in tune_runs() if gpu in gpus and not d.is_moe]


def errors(runs: list[tuple[str, dict]], factor: float) -> list[tuple[str, float]]:
    """Each run's predicted / measured throughput - 1 (``RunScore.throughput_error``) with ``factor``
    for the GPUs of ``runs``."""
    saved = dict(K.BLACKWELL_KERNEL_FACTOR)
    K.BLACKWELL_KERNEL_FACTOR.update({gpu: factor for gpu, _ in runs})
    try:
        return [(gpu, r.throughput_error) for gpu, entry in runs for r in score_set(entry).runs]
    finally:
        K.BLACKWELL_KERNEL_FACTOR.update(saved)


def fitted(runs: list[tuple[str, dict]]) -> float:
    """The rule: the grid's first factor at which the runs' median error is not positive."""
    return next(f for f in GRID if statistics.median(e for _, e in errors(runs, f)) <= 0)


def report(label: str, found: list[tuple[str, float]]) -> None:
    for gpu in sorted({g for g, _ in found}):
        own = [e for g, e in found if g == gpu]
        print(f"  {label} {gpu}: {len(own)} runs, median {statistics.median(own):+.1%}")
    print(f"  {label} all: {len(found)} runs, median {statistics.median([e for _, e in found]):+.1%}")


def main() -> int:
    for generation, gpus in GENERATIONS.items():
        runs = dense_blackwell_runs(generation)
        print(f"{generation} ({', '.join(gpus)}):")
        report("at 1.00", errors(runs, 1.0))
        factor = fitted(runs)
        print(f"  BLACKWELL_KERNEL_FACTOR {', '.join(gpus)} = {factor:.2f}")
        report(f"at {factor:.2f}", errors(runs, factor))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
