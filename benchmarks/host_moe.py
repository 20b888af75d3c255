"""A MoE layer's host work from the ``hostmoe-`` runs, by the rule in their docstring
(benchmarks/measured/matrix.py ``host_by_moe``), fixed before they were measured; raw
``benchmarks/gpu/results/hostmoe-h100.results.jsonl``.

    python benchmarks/host_moe.py

From each run's median forward+backward after the first iteration, per layer and microbatch
over the dense block, per dispatcher: ``a`` per local expert, ``b`` per expert of the model and
``c`` per layer, forward and backward together.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "results"
LAYERS, MICROBATCHES = 4, 8
DISPATCHERS = ("alltoall", "allgather")


def medians(path: Path) -> dict[str, float]:
    """Run id -> the median forward+backward seconds after the first iteration."""
    out = {}
    for line in path.read_text().splitlines():
        run = json.loads(line)
        if "measured" not in run:
            raise SystemExit(f"{run['id']} failed on the device: {run.get('error')}")
        iterations = run["measured"]["iterations"][1:]
        out[run["id"]] = statistics.median(i["forward_backward_seconds"] for i in iterations)
    return out


def parts(runs: dict[str, float], dispatcher: str) -> tuple[float, float, float]:
    """``a``, ``b`` and ``c`` of one dispatcher, in seconds."""

    def over_dense(experts: int, ep: int) -> float:
        moe = runs[f"hostmoe-{dispatcher}-e{experts}-ep{ep}"]
        return (moe - runs["hostmoe-dense"]) / (LAYERS * MICROBATCHES)

    s1 = (over_dense(16, 1) - over_dense(4, 1)) / 12
    s8 = (over_dense(128, 8) - over_dense(32, 8)) / 12
    b = (s8 - s1) / 7
    return s1 - b, b, over_dense(4, 1) - 4 * s1


def main() -> int:
    runs = medians(RESULTS / "hostmoe-h100.results.jsonl")
    print(
        f"dense block: {runs['hostmoe-dense'] / (LAYERS * MICROBATCHES) * 1e3:.3f} ms a layer and microbatch"
    )
    for dispatcher in DISPATCHERS:
        a, b, c = parts(runs, dispatcher)
        print(
            f"{dispatcher}: a {a * 1e6:.1f} us per local expert, b {b * 1e6:.1f} us per expert "
            f"of the model, c {c * 1e3:.3f} ms per layer (forward and backward)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
