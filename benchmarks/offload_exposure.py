"""What fine-grained activation offload shows of its copying on one GPU: the ``aoffm-`` runs
(``benchmarks/measured/matrix.py offload_exposure``; raw ``benchmarks/gpu/results/aoffm-h100.*``,
timed on a lent H100 80GB HBM3) against the step model's share of the copies' one-way time.

    python benchmarks/offload_exposure.py [--fit]

Each offloading run is paired with the run of the same shape and no offload: its exposure is the
difference of their forward+backward seconds (medians of the iterations after the first), over
the copy time the step model gives (``memtune.perf.offload.copy_seconds`` of every chunk, times
the microbatches); a pair is tune when both its runs are. The rule, set before any constant was
fitted: a share is the ratio of sums over the tune pairs of its kind (default connections, or ``CUDA_DEVICE_MAX_CONNECTIONS=1``);
``--fit`` prints it, the default prints every pair beside the constant in
``memtune/perf/constants.py`` (``FINE_GRAINED_OFFLOAD_EXPOSED_SHARE``)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))
RESULTS = ROOT / "benchmarks" / "gpu" / "results" / "aoffm-h100.results.jsonl"
# The run without offload each offloading run is measured against.
BASELINES = {
    "aoffm-l8w-attn-norm": "aoffm-l8w-none",
    "aoffm-l8w-mlp-norm": "aoffm-l8w-none",
    "aoffm-l8w-qkv": "aoffm-l8w-none",
    "aoffm-l8w-core-attn": "aoffm-l8w-none",
    "aoffm-l8w-all": "aoffm-l8w-none",
    "aoffm-l8w-all-one-queue": "aoffm-l8w-none",
    "aoffm-l8w-s8k-qkv": "aoffm-l8w-s8k-none",
    "aoffm-l8w-s8k-all": "aoffm-l8w-s8k-none",
    "aoffm-l1b-all": "aoffm-l1b-none",
    "aoffm-l1b-all-one-queue": "aoffm-l1b-none",
}


def measured() -> dict[str, tuple[float, dict]]:
    runs = {}
    for line in RESULTS.read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        seconds = statistics.median(
            it["forward_backward_seconds"] for it in run["measured"]["iterations"][1:]
        )
        runs[run["id"]] = (seconds, run["config"])
    return runs


def copy_seconds_per_step(config: dict) -> tuple[float, bool]:
    """The step model's one-way copy seconds of the run's step, and whether it ran with one
    hardware queue (the run's own environment: unset is CUDA's default, not one queue)."""
    from memtune.config import derive, validate
    from memtune.perf.offload import copy_seconds

    one_queue = config.get("env", {}).get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    d = derive(validate({**config, "cluster": {**config["cluster"], "gpu": "H100-80GB"}}))
    per_microbatch = sum(copy_seconds(d, chunk) for stage in d.chunks for chunk in stage)
    return per_microbatch * d.num_microbatches, one_queue


def pairs() -> list[tuple[str, str, bool, float, float]]:
    """(run, split, one queue, exposed seconds, modelled copy seconds) of every pair."""
    from matrix import split_of

    runs = measured()
    out = []
    for run_id, base in BASELINES.items():
        copy, one_queue = copy_seconds_per_step(runs[run_id][1])
        # a pair is tune only when both its runs are: a holdout baseline checks, never fits
        split = "tune" if split_of(run_id) == split_of(base) == "tune" else "holdout"
        out.append((run_id, split, one_queue, runs[run_id][0] - runs[base][0], copy))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fit", action="store_true", help="print the shares the tune pairs give")
    args = parser.parse_args()
    rows = pairs()
    if args.fit:
        for one_queue in (False, True):
            tune = [r for r in rows if r[1] == "tune" and r[2] == one_queue]
            share = sum(r[3] for r in tune) / sum(r[4] for r in tune)
            print(f"one queue {one_queue}: {share:.3f} from {len(tune)} tune pairs")
        return 0
    from memtune.perf.constants import FINE_GRAINED_OFFLOAD_EXPOSED_SHARE as SHARE

    print(f"{'run':28} {'split':7} {'copies ms':>9} {'exposed ms':>10} {'priced ms':>9}")
    for run_id, split, one_queue, exposed, copy in rows:
        print(
            f"{run_id:28} {split:7} {copy * 1e3:9.1f} {exposed * 1e3:10.1f} {SHARE[one_queue] * copy * 1e3:9.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
