"""Where a TP rank's host time goes under the fake process group, from the ``hostprof-`` runs,
by the rule in their docstring (benchmarks/measured/matrix.py
``host_profile_by_tensor_parallel``), fixed before they were measured; raw
``benchmarks/gpu/results/hostprof-h200.results.jsonl`` (``compute_relations.py run
--host-profile``: the last iteration's host side under ``cProfile``).

    python benchmarks/host_profile.py

Each profiled function's own time goes to the first category whose pattern its file or name
holds (``CATEGORIES``, in order); per category and run, the own time per layer and microbatch;
then each TP setting's excess over TP 1 per category, and the category with the largest share
of TP 8's excess. The profiler keeps its top functions by own time (``HOST_PROFILE_TOP``); the
rest is counted as ``not kept``.

Found (a lent H200, GPU-03f209da, one call): the category the rule names is c10d and the fake
group: 1.21, 1.61 and 1.86 ms a layer and microbatch more at TP 2, 4 and 8 than at TP 1 (under
the profiler, which stretched these host-bound iterations 1.1-1.5x over the untraced ones). A
layer and microbatch makes about 6.75 ``all_gather_into_tensor`` and 4.5
``reduce_scatter_tensor`` calls (54 and 36 in an iteration of 4 layers and 2 microbatches); a
gather's own time grows with TP (88, 127 and 177 us at TP 2, 4, 8: the fake group copies the
input into every rank's slot, one launch each), a reduce-scatter's does not (53-73 us). Nothing
else grows with TP. The total over TP 1 reads negative (-1.68 ms) because TP 1's rank is
GPU-bound: 29.5 ms of its own time is the final ``synchronize`` waiting for the GPU, which the
rule's categories do not set apart. No price changes (docs/plan.md).
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "results"
LAYERS, MICROBATCHES = 4, 2
TP = (1, 2, 4, 8)
GROWN_SHOWN = 15
# (category, patterns in the function's file path or its "file:line:name"), first match wins
CATEGORIES = (
    ("c10d and the fake group", ("distributed_c10d", "c10d_logger", "fake_pg", "_functional_collectives")),
    ("Megatron's TP mappings and layers", ("tensor_parallel/mappings", "tensor_parallel/layers", "tensor_parallel/utils")),
    ("Megatron's cross entropy and embedding", ("cross_entropy", "language_model_embedding", "vocab")),
    ("autograd (backward, Function.apply)", ("autograd/", "run_backward", ":apply", "_functions")),
    ("torch ops (C calls: launches)", ("<built-in", "<method")),
    ("Megatron's transformer modules", ("megatron/core/transformer", "megatron/core/models")),
    ("Megatron's schedule and DDP", ("pipeline_parallel", "megatron/core/distributed", "megatron/core/optimizer")),
    ("torch.nn and other Python", ("",)),
)  # fmt: skip


Categories = tuple[tuple[str, tuple[str, ...]], ...]


def category(function: dict[str, object], categories: Categories = CATEGORIES) -> str:
    text = f"{function['path']} {function['where']}"
    return next(name for name, patterns in categories if any(p in text for p in patterns))


def by_category(record: dict[str, object], categories: Categories = CATEGORIES) -> dict[str, float]:
    """Own seconds per layer and microbatch by category, and what the profiler did not keep."""
    profile = record["measured"]["profile"]["host_profile"]  # type: ignore[index]
    found = {name: 0.0 for name, _ in categories}
    for function in profile["functions"]:
        found[category(function, categories)] += function["own_s"]
    found["not kept"] = profile["own_s"] - sum(found.values())
    return {name: seconds / (LAYERS * MICROBATCHES) for name, seconds in found.items()}


def main() -> int:
    records = {}
    for line in (RESULTS / "hostprof-h200.results.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "measured" not in record:
            raise SystemExit(f"{record['id']} failed on the device: {record.get('error')}")
        records[int(record["id"].split("-tp")[1].split("-")[0])] = record
    per = {tp: by_category(records[tp]) for tp in TP}
    print(f"{'ms per layer and microbatch':40s}" + "".join(f"{f'TP {tp}':>9s}" for tp in TP))
    for name in per[1]:
        print(f"{name:40s}" + "".join(f"{per[tp][name] * 1e3:9.3f}" for tp in TP))
    totals = {tp: sum(per[tp].values()) for tp in TP}
    print(f"{'all own time':40s}" + "".join(f"{totals[tp] * 1e3:9.3f}" for tp in TP))
    excess = {name: per[8][name] - per[1][name] for name in per[1]}
    largest = max(excess, key=lambda name: excess[name])
    total = totals[8] - totals[1]
    print(f"TP 8 over TP 1: {total * 1e3:.3f} ms per layer and microbatch; the largest share:")
    print(f"  {largest}: {excess[largest] * 1e3:.3f} ms ({excess[largest] / total:.0%})")
    print("the functions whose own time grows most from TP 1 to TP 8 (ms per layer and microbatch):")
    for where, seconds, calls in grown(records[1], records[8])[:GROWN_SHOWN]:
        print(f"  {seconds * 1e3:7.3f}  {calls:+6d} calls  {where[:60]}")
    return 0


def grown(low: dict[str, object], high: dict[str, object]) -> list[tuple[str, float, int]]:
    """Each kept function's own time and calls at ``high`` less at ``low``, per layer and
    microbatch for the time, the largest growth first."""

    def kept(record: dict[str, object]) -> dict[str, tuple[float, int]]:
        functions = record["measured"]["profile"]["host_profile"]["functions"]  # type: ignore[index]
        return {f["where"]: (f["own_s"], f["calls"]) for f in functions}

    a, b = kept(low), kept(high)
    rows = [
        (where, (b.get(where, (0.0, 0))[0] - a.get(where, (0.0, 0))[0]) / (LAYERS * MICROBATCHES),
         b.get(where, (0.0, 0))[1] - a.get(where, (0.0, 0))[1])
        for where in a.keys() | b.keys()
    ]  # fmt: skip
    return sorted(rows, key=lambda row: -row[1])


if __name__ == "__main__":
    raise SystemExit(main())
