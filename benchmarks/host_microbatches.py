"""A MoE rank's fixed work per iteration from the ``hostnmb-`` runs, by the rule in their
docstring (benchmarks/measured/matrix.py ``host_by_microbatches``), fixed before they were
measured; raw ``benchmarks/gpu/results/hostnmb-h100-pass{1,2,3}.results.jsonl`` (one lent H100,
GPU-413f9b33, three passes in one lease, the second in reverse order).

    python benchmarks/host_microbatches.py

From each run's median forward+backward after the first iteration, per block, collector and
pass: the work per microbatch ``P = (T4 - T1) / 3`` and per iteration ``F = T1 - P``; then the
mean over the passes and what the MoE block's ``F`` exceeds the dense block's.

Found: 7.6 ms with the automatic collector, 7.8 ms with ``--manual-gc``, against a MoE block's
83-116 ms per microbatch, whose passes scatter by +-15 ms (the MoE runs' iterations spread by up
to half their median; the dense block's by a few percent). So the one-microbatch MoE tune
runs' gap is no fixed cost per iteration, and Python's collector does not move a step here: no
constant is taken. The step model gives the MoE runs -1% to -21% (median -12%) at 1, 2 and 4
microbatches alike on this machine, the dense ones +1% to +16% of their forward+backward: the
machine's host speed, which these runs do not separate from the model's MoE host work.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from host_moe import medians

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "results"
PASSES = (1, 2, 3)
BLOCKS = ("qm", "l1b")
COLLECTORS = ("auto", "mgc")


def per_microbatch_and_iteration(runs: dict[str, float], block: str, collector: str) -> tuple[float, float]:
    """``P`` and ``F`` of one block and collector in one pass, in seconds."""
    t1, t4 = (runs[f"hostnmb-{block}-m{m}-{collector}"] for m in (1, 4))
    per_microbatch = (t4 - t1) / 3
    return per_microbatch, t1 - per_microbatch


def main() -> int:
    passes = [medians(RESULTS / f"hostnmb-h100-pass{n}.results.jsonl") for n in PASSES]
    fixed: dict[tuple[str, str], float] = {}
    for block in BLOCKS:
        for collector in COLLECTORS:
            found = [per_microbatch_and_iteration(runs, block, collector) for runs in passes]
            each = "  ".join(f"P {p * 1e3:5.1f} F {f * 1e3:5.1f}" for p, f in found)
            fixed[block, collector] = statistics.mean(f for _, f in found)
            print(
                f"{block:4s} {collector:5s} ms per pass: {each}   mean F {fixed[block, collector] * 1e3:5.1f}"
            )
    for collector in COLLECTORS:
        excess = fixed["qm", collector] - fixed["l1b", collector]
        print(f"MoE block's F over the dense block's, {collector}: {excess * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
