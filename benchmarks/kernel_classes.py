"""Where a traced single-rank run's GPU time goes, against where the step model puts it.

    python benchmarks/kernel_classes.py [--set NAME ...]

For each tune run of memtune's traced single-rank sets (``compute_accuracy.TRACED_SETS``; no
holdout run is read), the profiled forward+backward's kernel time in three classes by kernel
name, beside the step model's price of the same class on that set's machine
(``compute_accuracy.measured_machine``):

- GEMMs: cuBLASLt's ``nvjet`` kernels, ``sm90_xmma`` and any kernel named ``gemm`` (flash
  attention's kernels, whose names carry CUTLASS types, excluded); priced by
  ``ShapePricer.gemm`` and ``ShapePricer.expert_gemm``, measured as the run's price less its
  price with those two returning nothing;
- attention: the flash kernels; priced as ``compute_accuracy`` splits them (the price's
  attention term, from doubling the machine's attention factor);
- the rest: every other kernel (elementwise, copies, reductions, the loss, gradient adds).

A machine factor fitted on all kernels outside attention can be right on their sum and wrong
on both classes at once; this shows by how much. A diagnostic: it changes no price.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

import compute_accuracy as ca  # noqa: E402

from memtune.perf import layer  # noqa: E402
from memtune.perf.layer import Machine  # noqa: E402

GEMM_KERNEL = re.compile(r"nvjet|sm90_xmma|gemm", re.IGNORECASE)


def measured_classes(profile: dict[str, Any]) -> tuple[float, float, float]:
    """Seconds of GEMMs, flash attention and the rest in one traced forward+backward."""
    gemm = attention = rest = 0.0
    for kernel in profile["kernels"]:
        seconds = kernel["us"] / 1e6
        if "flash" in kernel["name"]:
            attention += seconds
        elif GEMM_KERNEL.search(kernel["name"]):
            gemm += seconds
        else:
            rest += seconds
    return gemm, attention, rest


@contextmanager
def gemms_free() -> Iterator[None]:
    """The step model with every GEMM priced at nothing (its two GEMM prices patched)."""
    gemm, expert = layer.ShapePricer.gemm, layer.ShapePricer.expert_gemm
    layer.ShapePricer.gemm = lambda self, m, n, k, count=1.0: 0.0  # type: ignore[method-assign]
    layer.ShapePricer.expert_gemm = lambda self, m, n, k, count: 0.0  # type: ignore[method-assign]
    try:
        yield
    finally:
        layer.ShapePricer.gemm, layer.ShapePricer.expert_gemm = gemm, expert  # type: ignore[method-assign]


def priced_classes(run: ca.Timed) -> tuple[float, float, float]:
    """The step model's seconds of GEMMs, attention and the rest for the same rank."""
    total = ca.predicted_device_s(run)
    doubled = replace(run, machine=Machine(run.machine.kernels, 2 * run.machine.attention))
    attention = ca.predicted_device_s(doubled) - total
    with gemms_free():
        gemm = total - ca.predicted_device_s(run)
    return gemm, attention, total - gemm - attention


def profiles(name: str) -> dict[str, dict[str, Any]]:
    path = {**ca.OWN_SETS, **ca.CHECK_SETS, **ca.REPEATS}[name]
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        if run.get("split") == "tune" and (profile := run.get("measured", {}).get("profile")):
            found[run["id"]] = profile
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--set", action="append", choices=ca.TRACED_SETS, dest="sets")
    names = parser.parse_args().sets or list(ca.TRACED_SETS)
    print(f"{'run':44s} {'GEMMs ms':>16s} {'attention ms':>14s} {'the rest ms':>16s}")
    print(f"{'':44s} {'meas / priced':>16s} {'meas / priced':>14s} {'meas / priced':>16s}")
    ratios: dict[str, list[float]] = {"gemm": [], "rest": []}
    for name in names:
        traced = profiles(name)
        for run in ca.own_runs(name):
            if run.split != "tune" or run.id not in traced:
                continue
            measured, priced = measured_classes(traced[run.id]), priced_classes(run)
            ratios["gemm"].append(priced[0] / measured[0] - 1)
            ratios["rest"].append(priced[2] / measured[2] - 1)
            cells = [f"{m * 1e3:7.1f} / {p * 1e3:6.1f}" for m, p in zip(measured, priced, strict=True)]
            print(f"{run.id[:44]:44s} {cells[0]:>16s} {cells[1]:>14s} {cells[2]:>16s}")
    if not ratios["gemm"]:
        sys.exit("no traced tune run in the sets asked for")
    print(
        f"{len(ratios['gemm'])} runs: priced over measured, median "
        f"GEMMs {statistics.median(ratios['gemm']):+.1%}, the rest {statistics.median(ratios['rest']):+.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
