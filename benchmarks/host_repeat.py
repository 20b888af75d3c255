"""How far a lent machine moves a single-rank step: ten ``cchk3-`` runs timed in several passes
on four H100s (benchmarks/gpu/results/: machine A is the ``cchk3-`` check's, its two passes
``cchk3-h100`` and ``cchk3-again-h100``; machines B and C three passes each and machine D two
under ``host-repeat/``, C's and D's with the host's launch speed timed after every run,
``_host_probe`` of ``benchmarks/gpu/compute_relations.py``; ``host-repeat/plans.jsonl`` are the
``cchk3-`` plans of the ten runs, marked holdout so that no iteration is profiled).

    python benchmarks/host_repeat.py

Prints, per run, its step time on every pass (the median of the timed iterations after the
first), each machine's spread between its passes, and the step model's price for it (the
``cchk3-`` machine's kernel factors, ``benchmarks/compute_accuracy.py``) against each machine's
median. Eight of the ten are host-bound in some pass; ``cchk3-l1b-s4k-mbs4-m2`` is the GPU-bound
control.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "gpu" / "results"
PASSES = {
    "A": [RESULTS / "cchk3-h100.results.jsonl", RESULTS / "cchk3-again-h100.results.jsonl"],
    "B": [RESULTS / "host-repeat" / f"machine-b-pass{n}.results.jsonl" for n in (1, 2, 3)],
    "C": [RESULTS / "host-repeat" / f"machine-c-pass{n}.results.jsonl" for n in (1, 2, 3)],
    "D": [RESULTS / "host-repeat" / f"machine-d-pass{n}.results.jsonl" for n in (1, 2)],
}


def step_seconds(path: Path) -> dict[str, tuple[float, dict[str, float] | None]]:
    """Each run's step seconds (median of the iterations after the first) and host probe."""
    runs = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        iterations = record["measured"]["iterations"][1:]
        seconds = statistics.median(i["seconds"] for i in iterations)
        runs[record["id"]] = (seconds, record["measured"].get("host_probe"))
    return runs


def main() -> int:
    from compute_accuracy import compare, own_runs

    passes = {machine: [step_seconds(p) for p in paths] for machine, paths in PASSES.items()}
    ids = list(passes["C"][0])
    priced = {}
    for run in own_runs("cchk3"):
        if run.id in ids:
            priced[run.id] = (1 + compare(run).step) * run.step_s
    print(f"{'run':36} {'priced':>7}  " + "  ".join(f"{m}: passes, spread, error" for m in PASSES))
    for run_id in ids:
        cells = []
        for timed in passes.values():
            seconds = [t[run_id][0] for t in timed]
            spread = max(seconds) / min(seconds) - 1
            error = priced[run_id] / statistics.median(seconds) - 1
            cells.append(f"{'/'.join(f'{s:.3f}' for s in seconds)} {spread:4.0%} {error:+5.0%}")
        print(f"{run_id:36} {priced[run_id]:7.3f}  " + "  ".join(cells))
    for machine in ("C", "D"):
        probes = [t[run_id][1] for t in passes[machine] for run_id in ids]
        launch = [p["launch_us"] for p in probes if p]
        linear = [p["linear_fwd_bwd_us"] for p in probes if p]
        print(
            f"machine {machine}'s host after each run: {min(launch):.2f}-{max(launch):.2f} us a launch, "
            f"{min(linear):.0f}-{max(linear):.0f} us a small Linear forward and backward"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
