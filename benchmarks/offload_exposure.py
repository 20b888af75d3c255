"""What fine-grained activation offload shows of its copying on one GPU: the ``aoffm-`` runs
(``benchmarks/measured/matrix.py offload_exposure``; raw ``benchmarks/gpu/results/aoffm-h100.*``,
timed on a lent H100 80GB HBM3) against the step model's share of the copies' one-way time.

    python benchmarks/offload_exposure.py [--fit | --check | --copy-bound]

Each offloading run is paired with the run of the same shape and no offload: its exposure is the
difference of their forward+backward seconds (medians of the iterations after the first), over
the copy time the step model gives (``memtune.perf.offload.copy_seconds`` of every chunk, times
the microbatches); a pair is tune when both its runs are. The rule, set before any constant was
fitted: a share is the ratio of sums over the tune pairs of its kind (default connections, or ``CUDA_DEVICE_MAX_CONNECTIONS=1``);
``--fit`` prints it; the default prints every pair's exposure beside the step model's (the
difference of its priced forward+backward, ``FINE_GRAINED_OFFLOAD_EXPOSED_SHARE`` in
``memtune/perf/constants.py`` among it), ``--check`` the same for the pairs of
the ``aoffm2-`` check, defined after the constant was frozen (``offload_exposure_check``), and
``--copy-bound`` for the ``aoffx-`` check, whose copies outlast the compute
(``offload_copy_bound_check``). Each run is priced for the GPU it was timed on."""

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
CHECK_RESULTS = ROOT / "benchmarks" / "gpu" / "results" / "aoffm2-h100.results.jsonl"
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
COPY_BOUND_RESULTS = ROOT / "benchmarks" / "gpu" / "results" / "aoffx.results.jsonl"
# The aoffm2- check of the frozen model (matrix.py offload_exposure_check): every pair compared once.
CHECK_BASELINES = {
    "aoffm2-pp2-first-all": "aoffm2-pp2-first-none",
    "aoffm2-l1b-s8k-one-queue-all": "aoffm2-l1b-s8k-one-queue-none",
    "aoffm2-qm-ep8-experts": "aoffm2-qm-ep8-none",
    "aoffm2-l8w-mbs1-m8-attn": "aoffm2-l8w-mbs1-m8-none",
}
# The aoffx- check, copies longer than the compute (matrix.py offload_copy_bound_check): every pair
# compared once, with the model frozen at 5171162.
COPY_BOUND_BASELINES = {
    "aoffx-u1k-core-attn": "aoffx-u1k-none",
    "aoffx-u1k-all": "aoffx-u1k-none",
    "aoffx-u1k-default-all": "aoffx-u1k-default-none",
    "aoffx-u1k-vpp-all": "aoffx-u1k-vpp-none",
}
# Each set's raw results and its pairs (run: the run without offload it is measured against).
SETS = {
    "fit": (RESULTS, BASELINES),
    "check": (CHECK_RESULTS, CHECK_BASELINES),
    "copy-bound": (COPY_BOUND_RESULTS, COPY_BOUND_BASELINES),
}


def measured(path: Path = RESULTS) -> dict[str, tuple[float, float, dict]]:
    """Each run's measured forward+backward seconds (the median of the iterations after the
    first), the step model's for it (``benchmarks/compute_accuracy.py``'s comparison, on the
    tables' machine, priced for the GPU the run was timed on) and its config (with that GPU)."""
    from compute_accuracy import Timed, as_run, compare
    from matrix import split_of

    from memtune.config import derive, validate

    runs = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        if "measured" not in run:
            continue  # a run that failed on the device (its error is in the record)
        iterations = run["measured"]["iterations"][1:]

        def median(key: str, its: list = iterations) -> float:
            return statistics.median(it[key] for it in its)

        fb = median("forward_backward_seconds")
        config = as_run(run)
        d = derive(validate(config))
        timed = Timed(run["id"], split_of(run["id"]), d, run["pp_rank"], median("seconds"), fb,
                      median("optimizer_seconds"), True)  # fmt: skip
        runs[run["id"]] = (fb, fb * (1 + compare(timed).forward_backward), config)
    return runs


def copy_seconds_per_step(config: dict) -> tuple[float, bool]:
    """The step model's one-way copy seconds of the run's step, and whether it ran with one
    hardware queue (the run's own environment: unset is CUDA's default, not one queue)."""
    from memtune.config import derive, validate
    from memtune.perf.offload import copy_seconds

    one_queue = config.get("env", {}).get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    d = derive(validate(config))
    stage = d.chunks[d.pp_rank_of(0)]  # the measured rank is the first of its stage
    per_microbatch = sum(copy_seconds(d, chunk) for chunk in stage)
    return per_microbatch * d.num_microbatches, one_queue


def pairs(which: str = "fit") -> list[tuple[str, str, bool, float, float, float]]:
    """(run, split, one queue, exposed seconds, modelled copy seconds, the step model's exposed
    seconds) of every pair of set ``which`` (``SETS``)."""
    from matrix import split_of

    results, baselines = SETS[which]
    runs = measured(results)
    out = []
    for run_id, base in baselines.items():
        if run_id not in runs or base not in runs:
            continue  # a run the device did not finish
        copy, one_queue = copy_seconds_per_step(runs[run_id][2])
        # a pair is tune only when both its runs are: a holdout baseline checks, never fits
        split = "tune" if split_of(run_id) == split_of(base) == "tune" else "holdout"
        priced = runs[run_id][1] - runs[base][1]
        out.append((run_id, split, one_queue, runs[run_id][0] - runs[base][0], copy, priced))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--fit", action="store_true", help="print the shares the tune pairs give")
    how.add_argument("--check", action="store_true", help="the aoffm2- check of the frozen model")
    how.add_argument(
        "--copy-bound", action="store_true", help="the aoffx- check: copies outlasting the compute"
    )
    args = parser.parse_args()
    rows = pairs("check" if args.check else "copy-bound" if args.copy_bound else "fit")
    if args.fit:
        for one_queue in (False, True):
            tune = [r for r in rows if r[1] == "tune" and r[2] == one_queue]
            share = sum(r[3] for r in tune) / sum(r[4] for r in tune)
            print(f"one queue {one_queue}: {share:.3f} from {len(tune)} tune pairs")
        return 0
    print(f"{'run':30} {'split':7} {'copies ms':>9} {'exposed ms':>10} {'priced ms':>9}")
    for run_id, split, _, exposed, copy, priced in rows:
        print(f"{run_id:30} {split:7} {copy * 1e3:9.1f} {exposed * 1e3:10.1f} {priced * 1e3:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
