"""Where unfused attention's and recompute's host time goes on a TP rank, from the
``hostfeat-`` runs, by the rule in their docstring (benchmarks/measured/matrix.py
``host_profile_by_feature``), fixed before they were measured; raw
``benchmarks/gpu/results/hostfeat-<gpu>.results.jsonl`` (``compute_relations.py run
--host-profile``: the last iteration's host side under ``cProfile``).

    python benchmarks/host_features.py [--gpu h100|h100-pass2]

The categories of ``host_profile.py``, with the final ``synchronize`` (the host waiting for the
GPU) set apart first; per feature run, its own time per layer and microbatch by category less
the plain run's, and the category with the largest share of that excess, beside the functions
whose own time grows most; then that excess without the wait: the feature's own host work.

Measured on a lent H100 (GPU-27a43300), the plans of
``benchmarks/gpu/results/hostfeat-h100.plans.jsonl`` run as ``compute_relations.py run PLANS
RESULTS --host-profile``, twice in one lease: ``hostfeat-h100`` (the rule's run) and
``hostfeat-h100-pass2`` (the same plans again, a new process: how far a host-bound reading
moves).
"""

from __future__ import annotations

import json
import sys

from host_profile import CATEGORIES, RESULTS, by_category, grown

FEATURE_CATEGORIES = (("waiting for the GPU (synchronize)", ("_cuda_synchronize",)), *CATEGORIES)
FEATURES = ("unfused", "rcfull", "rcsel")
SHOWN = 8


def main() -> int:
    gpu = sys.argv[sys.argv.index("--gpu") + 1] if "--gpu" in sys.argv else "h100"
    path = RESULTS / f"hostfeat-{gpu}.results.jsonl"
    records = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "measured" not in record:
            raise SystemExit(f"{record['id']} failed on the device: {record.get('error')}")
        records[record["id"].removeprefix("hostfeat-").split("-")[0]] = record
    per = {name: by_category(record, FEATURE_CATEGORIES) for name, record in records.items()}
    runs = ("plain", *FEATURES)
    print(f"{'ms per layer and microbatch':40s}" + "".join(f"{name:>9s}" for name in runs))
    for name in per["plain"]:
        print(f"{name:40s}" + "".join(f"{per[run][name] * 1e3:9.3f}" for run in runs))
    for feature in FEATURES:
        excess = {name: per[feature][name] - per["plain"][name] for name in per["plain"]}
        largest = max(excess, key=lambda name: excess[name])
        total = sum(excess.values())
        print(
            f"{feature} over plain: {total * 1e3:.3f} ms; the largest share: {largest} {excess[largest] * 1e3:.3f} ms"
        )
        own = total - excess[FEATURE_CATEGORIES[0][0]]
        print(f"  its own host work (the wait set apart): {own * 1e3:+.3f} ms per layer and microbatch")
        for where, seconds, calls in grown(records["plain"], records[feature])[:SHOWN]:
            print(f"  {seconds * 1e3:7.3f}  {calls:+6d} calls  {where[:60]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
