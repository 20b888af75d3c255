"""How far a host-bound rank's time moves between processes, bound to cores or not, from the
``hostvar-`` runs, by the rule in their docstring (benchmarks/measured/matrix.py
``host_variance``), fixed before they were measured; raw
``benchmarks/gpu/results/hostvar-h100-pass{1,2,3,4}.results.jsonl`` (passes 1 and 3 unbound,
2 and 4 bound to two cores; one lent H100, one call).

    python benchmarks/host_variance.py

Per run and pass: the ``early`` median forward+backward (iterations 2-5) and the ``steady``
one (iterations 12-21). Per condition and window: each run's spread ``|ln(T / T')|`` between the
condition's two passes; over the host-bound runs, the median. Then the rule's two decisions.

Found (one lent H100, GPU-0cd18af2, 16 cores, the GPU's affinity all of them; cores 2 and 3
when bound): neither helps. The host-bound runs' median spread is 9.2% early and 14.5% steady
unbound, 13.2% and 11.3% bound (one run 67 against 114 ms steady on two passes); the GPU-bound
runs moved by -0.1% and -0.5% when bound and stayed within 1.6% on every pass. Neither binding
(11.3% is not at most half of 14.5%) nor the steady window (14.5% is not at most half of 9.2%)
is taken: a host-bound rank's time on a lent machine moves by about a tenth from one process to
the next whatever the harness does, so one timed pass of it carries that much noise. The
host probe after each run (a launch 6.3-11.4 us, a small layer's forward and backward
214-469 us) moves as much from run to run.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

from matrix import HOST_VARIANCE_GPU_BOUND, HOST_VARIANCE_HOST_BOUND  # noqa: E402

RESULTS = ROOT / "benchmarks" / "gpu" / "results"
PASSES = {"unbound": (1, 3), "bound": (2, 4)}
WINDOWS = {"early": slice(1, 5), "steady": slice(11, 21)}


def times(path: Path) -> dict[str, dict[str, float]]:
    """Run id (without ``hostvar-``) -> window -> median forward+backward seconds."""
    out = {}
    for line in path.read_text().splitlines():
        run = json.loads(line)
        if "measured" not in run:
            raise SystemExit(f"{run['id']} failed on the device: {run.get('error')}")
        seconds = [i["forward_backward_seconds"] for i in run["measured"]["iterations"]]
        out[run["id"].removeprefix("hostvar-")] = {
            window: statistics.median(seconds[span]) for window, span in WINDOWS.items()
        }
    return out


def spread(passes: dict[int, dict], condition: str, window: str, run_id: str) -> float:
    first, second = (passes[n][run_id][window] for n in PASSES[condition])
    return abs(math.log(first / second))


def main() -> int:
    passes = {n: times(RESULTS / f"hostvar-h100-pass{n}.results.jsonl") for n in (1, 2, 3, 4)}
    for run_id in (*HOST_VARIANCE_HOST_BOUND, *HOST_VARIANCE_GPU_BOUND):
        cells = "  ".join(
            f"{passes[n][run_id]['early'] * 1e3:6.1f}/{passes[n][run_id]['steady'] * 1e3:6.1f}"
            for n in passes
        )
        print(f"{run_id:32s} ms early/steady, passes 1-4: {cells}")
    medians = {
        (condition, window): statistics.median(
            spread(passes, condition, window, r) for r in HOST_VARIANCE_HOST_BOUND
        )
        for condition in PASSES
        for window in WINDOWS
    }
    for (condition, window), value in medians.items():
        print(f"host-bound runs, {condition:7s} {window:6s}: median spread {value:.1%}")
    gpu_moves = [
        statistics.mean(passes[n][r]["steady"] for n in PASSES["bound"])
        / statistics.mean(passes[n][r]["steady"] for n in PASSES["unbound"])
        - 1
        for r in HOST_VARIANCE_GPU_BOUND
    ]
    print("GPU-bound runs, bound over unbound (steady): " + ", ".join(f"{m:+.1%}" for m in gpu_moves))
    bind = medians["bound", "steady"] <= medians["unbound", "steady"] / 2 and all(
        abs(m) <= 0.03 for m in gpu_moves
    )
    longer = medians["unbound", "steady"] <= medians["unbound", "early"] / 2
    print(
        f"bind later checks to cores: {'yes' if bind else 'no'}; time the steady window: {'yes' if longer else 'no'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
