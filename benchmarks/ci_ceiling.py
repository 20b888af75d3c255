"""The best Kendall tau any model of the configuration could reach on the Megatron-LM functional
tests' tune groups: configurations that memtune prices alike still differ in measured step time,
so no function of the job as memtune reads it orders them. In the 12-layer group three pairs share
a price: host-bound steps whose differences (attention backend, tied embeddings, fused
cross-entropy) hide under the host's launch work, while their test cases also differ in what the
translation drops (the data loader: FIM samples, unmapped files).

    python benchmarks/ci_ceiling.py

Per group of ``memtune bench plan --accuracy --split tune`` drawn from the functional tests
(``benchmarks/published/layouts/megatron-lm-ci``; test cases of one translated config already
count as one configuration at their median, ``score_ci_group``): the configurations grouped by
their predicted throughput (one price), the spread of measured throughput within each such
class, the step model's tau, and the tau of an oracle that predicts each class's geometric mean
measured throughput (pairs within a class are ties, which tau-a counts as neither).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memtune.bench.plan import CI_SOURCE, accuracy, kendall_tau  # noqa: E402


def main() -> int:
    for group in accuracy([ROOT / "benchmarks" / "published" / "layouts"], split="tune"):
        if group.source != CI_SOURCE or len(group.runs) < 3:
            continue
        classes: dict[float, list[float]] = defaultdict(list)
        for run in group.runs:
            classes[round(run.predicted, 6)].append(run.measured)
        mean = {key: math.exp(statistics.mean(math.log(m) for m in ms)) for key, ms in classes.items()}
        measured = [r.measured for r in group.runs]
        oracle = [mean[round(r.predicted, 6)] for r in group.runs]
        widest = max(max(ms) / min(ms) for ms in classes.values())
        print(
            f"{group.set_id}: {len(group.runs)} configurations in {len(classes)} prices, widest spread within one price "
            f"{widest:.2f}x; tau model {kendall_tau(measured, [r.predicted for r in group.runs]):+.2f}, "
            f"oracle {kendall_tau(measured, oracle):+.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
