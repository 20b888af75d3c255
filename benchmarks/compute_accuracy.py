"""The step model's per-stage compute against single-rank runs timed alone on the H200.

    python benchmarks/compute_accuracy.py [--split tune|holdout]

Two sets of runs, each a measured-set config measured again one at a time
(``run_matrix.py run --jobs 1``): ``benchmarks/gpu/results/compute-timing-h200.results.jsonl``
(iteration seconds only; plans beside it) and ``ctime-h200.results.jsonl`` (the ``ctime-``
family, which also records forward+backward and the optimizer step apart). Under the fake
process group no collective moves data, so the median iteration time from the second
iteration on is the rank's own compute and optimizer step. The prediction is
``predict_step(...).simulated`` of that rank's stage (``stage_compute_s``: forward, backward,
deferred weight gradients and the optimizer step; ``stage_optimizer_s``: the optimizer step),
with the host floor of memtune's own loop (``MEASURE_RUNNER``, memtune/perf/constants.py). The
split is the measured set's sha1 rule (benchmarks/measured/README.md); ``--split`` prints one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

RESULTS = ROOT / "benchmarks" / "gpu" / "results"
SETS = {
    "compute-timing": RESULTS / "compute-timing-h200.results.jsonl",
    "ctime": RESULTS / "ctime-h200.results.jsonl",
}


def simulated_and_measured(run: dict[str, Any]) -> tuple[Any, float]:
    """The step model's simulated step of a timed run (its rank's stage is the prediction), and
    the run's median iteration seconds from the second iteration on."""
    from memtune.config import derive, validate
    from memtune.perf.constants import MEASURE_RUNNER
    from memtune.perf.step import predict_step

    sim = predict_step(derive(validate(run["config"])), floor=MEASURE_RUNNER).simulated
    return sim, statistics.median(it["seconds"] for it in run["measured"]["iterations"][1:])


def main() -> int:
    from matrix import split_of

    parser = argparse.ArgumentParser()
    parser.add_argument("--split", choices=("tune", "holdout"))
    args = parser.parse_args()
    splits = (args.split,) if args.split else ("tune", "holdout")
    for name, path in SETS.items():
        runs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for split in splits:
            chosen = [run for run in runs if split_of(run["id"]) == split]
            errors: dict[str, list[float]] = {"iteration": [], "forward+backward": [], "optimizer": []}
            for run in chosen:
                sim, measured = simulated_and_measured(run)
                rank = run["pp_rank"]
                iterations = run["measured"]["iterations"][1:]
                predicted = sim.stage_compute_s[rank]
                errors["iteration"].append((predicted - measured) / measured)
                line = f"{split:8} {run['id']:38} {measured:6.3f} s  predicted {predicted:6.3f} s  {errors['iteration'][-1]:+6.1%}"
                if "forward_backward_seconds" in iterations[0]:
                    fb = statistics.median(it["forward_backward_seconds"] for it in iterations)
                    opt = statistics.median(it["optimizer_seconds"] for it in iterations)
                    errors["forward+backward"].append((predicted - sim.stage_optimizer_s[rank]) / fb - 1)
                    errors["optimizer"].append(sim.stage_optimizer_s[rank] / opt - 1)
                    line += f"  fwd+bwd {errors['forward+backward'][-1]:+6.1%}  optimizer {errors['optimizer'][-1]:+6.1%}"
                print(line)
            summary = ", ".join(
                f"{part} {statistics.median(abs(e) for e in values):.1%}"
                for part, values in errors.items()
                if values
            )
            print(f"{name} {split}: {len(chosen)} runs, median |error|: {summary}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
