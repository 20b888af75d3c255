"""The host's work per layer by tensor parallelism from the ``hosttp-`` runs, by the rule in
their docstring (benchmarks/measured/matrix.py ``host_by_tensor_parallel``), fixed before they
were measured; raw ``benchmarks/gpu/results/hosttp-h100-pass{1,2}.results.jsonl`` and the
per-call figure of ``benchmarks/gpu/results/fake-collective-host-h100.json``, all from one call.

    python benchmarks/host_tensor_parallel.py

Per setting and pass: ``L = (T8 - T4) / (4 x 8)``, the host work per layer and microbatch,
forward and backward together; the mean over the passes; each TP setting's excess over TP 1
per collective call a layer makes (``CALLS``), beside the per-call figure timed alone.

Found: too noisy to check the per-call figure. TP 1's layer came out 2.64 and 3.30 ms on the two
passes, TP 2 with SP's 0.84 and 3.92 ms, so the excess per call reads -229 to +55 us against the
70.7 us timed alone (docs/plan.md).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from host_moe import medians

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "results"
PASSES = (1, 2)
LAYERS, MICROBATCHES = (4, 8), 8
# collective calls one layer makes, forward and backward: with SP a gather and a reduce-scatter
# on each side (attention, MLP) of each pass; without, one all-reduce a side
CALLS = {"tp1": 0, "tp2-sp": 8, "tp8-sp": 8, "tp8": 4}


def per_layer(runs: dict[str, float], setting: str) -> float:
    """Host seconds per layer and microbatch, forward and backward, of one setting in one pass."""
    short, long = (runs[f"hosttp-{setting}-l{n}"] for n in LAYERS)
    return (long - short) / ((LAYERS[1] - LAYERS[0]) * MICROBATCHES)


def main() -> int:
    passes = [medians(RESULTS / f"hosttp-h100-pass{n}.results.jsonl") for n in PASSES]
    layer = {s: statistics.mean(per_layer(runs, s) for runs in passes) for s in CALLS}
    for setting, seconds in layer.items():
        each = "  ".join(f"{per_layer(runs, setting) * 1e3:5.2f}" for runs in passes)
        line = f"{setting:7s} ms per layer (passes {each}): {seconds * 1e3:5.2f}"
        if CALLS[setting]:
            excess = (seconds - layer["tp1"]) / CALLS[setting]
            line += f"   over TP 1: {excess * 1e6:5.1f} us per call"
        print(line)
    alone = json.loads((RESULTS / "fake-collective-host-h100.json").read_text())
    print(
        f"one call timed alone (fake_collective_host.py): {alone['fake_pg_collective_host_s'] * 1e6:.1f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
