"""The step model's per-stage compute against single-rank runs timed alone on the H200.

    python benchmarks/compute_accuracy.py

Each run of ``benchmarks/gpu/results/compute-timing-h200.results.jsonl`` is a measured-set run
measured again one at a time (``run_matrix.py run --jobs 1``, plans in
``compute-timing-h200.plans.jsonl``): under the fake process group no collective moves data, so
the median iteration time from the second iteration on is the rank's own compute and optimizer
step. The prediction is ``predict_step(...).simulated.stage_compute_s`` of that rank's stage
(forward, backward, deferred weight gradients and the optimizer step; memtune/perf/step.py),
with the host floor of memtune's own loop (``MEASURE_RUNNER``, memtune/perf/constants.py).
The split is the measured set's sha1 rule (benchmarks/measured/README.md).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

RESULTS = ROOT / "benchmarks" / "gpu" / "results" / "compute-timing-h200.results.jsonl"


def main() -> int:
    from matrix import split_of

    from memtune.config import derive, validate
    from memtune.perf.constants import MEASURE_RUNNER
    from memtune.perf.step import predict_step

    rows = []
    for line in RESULTS.read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        job = derive(validate(run["config"]))
        predicted = predict_step(job, floor=MEASURE_RUNNER).simulated.stage_compute_s[run["pp_rank"]]
        measured = statistics.median(it["seconds"] for it in run["measured"]["iterations"][1:])
        rows.append((split_of(run["id"]), run["id"], measured, predicted, (predicted - measured) / measured))
    for split in ("tune", "holdout"):
        chosen = [r for r in rows if r[0] == split]
        for _, run_id, measured, predicted, error in chosen:
            print(
                f"{split:8} {run_id:40} measured {measured:6.3f} s  predicted {predicted:6.3f} s  {error:+6.1%}"
            )
        errors = [abs(r[4]) for r in chosen]
        print(f"{split}: {len(chosen)} runs, median |error| {statistics.median(errors):.1%}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
