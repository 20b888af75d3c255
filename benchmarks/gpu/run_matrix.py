"""Measure the matrix of benchmarks/measured/matrix.py on a GPU machine.

Two steps, because the GPU machine has torch and megatron-core but not memtune's own
dependencies (pydantic):

    # here: turn matrix entries into measurement plans (JSON lines)
    python benchmarks/gpu/run_matrix.py plan OUT.jsonl [--smoke | --rest | --ids a,b] [--shard K/N] [--resume | --save]
    # on the GPU machine: run the plans, several at once, each in its own process
    python3 benchmarks/gpu/run_matrix.py run PLANS.jsonl RESULTS.jsonl --logs DIR [--budget-gib 120]
    # here: fold results into the measured set, checking each against the current matrix
    python benchmarks/gpu/run_matrix.py merge RESULTS.jsonl... --plans PLANS.jsonl... --into SET.jsonl

Each result line is a measured-set record (README.md beside the measured set): id, split,
config, rank and either ``measured`` + ``environment`` or ``error``. Runs are packed onto the one
GPU by their estimated need (memtune's estimate plus headroom) within ``--budget-gib``; the
allocator figures each process reports are its own, whatever runs beside it. A run that ran out
of memory beside others is tried once more alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

GiB = 2**30
CUDA_CONTEXT_GIB = 1.0  # outside the allocator: context, cuBLAS/cuDNN handles, kernels
HEADROOM = 1.25  # on top of the estimate: its error and the allocator's cache
UNKNOWN_NEED_GIB = 30.0


# --- plan (here) ------------------------------------------------------------------------


def need_gib(job, rank: int) -> float:
    """Device memory to set aside for a run when packing the GPU."""
    from memtune.check import gate
    from memtune.errors import InputError
    from memtune.estimate import estimate

    try:
        est = estimate(gate(job))
        peak = est.verdict_peak_bytes(est.rank(rank))  # the largest phase: training, load or save
    except InputError:
        return UNKNOWN_NEED_GIB
    return round(peak / GiB * HEADROOM + CUDA_CONTEXT_GIB, 1)


def make_plans(args) -> int:
    from matrix import split_of

    from memtune.check import gate
    from memtune.config import validate
    from memtune.measure.plan import plan_measurement

    chosen = _entries(args)
    if args.smoke:
        chosen = [e for e in chosen if e.smoke]
    if args.rest:
        chosen = [e for e in chosen if not e.smoke]
    if args.ids:
        wanted = set(args.ids.split(","))
        chosen = [e for e in chosen if e.id in wanted]
    if args.shard:
        k, n = map(int, args.shard.split("/"))
        chosen = chosen[k - 1 :: n]
    with open(args.out, "w") as fh:
        for entry in chosen:
            job = validate(entry.config)
            plan = plan_measurement(gate(job), entry.rank, args.iters, resume=args.resume or args.save)
            line = {
                "id": entry.id,
                "split": split_of(entry.id),
                "config": entry.config,
                "rank": entry.rank,
                "solo": entry.solo,
                "need_gib": need_gib(job, entry.rank),
                "plan": plan.to_json(),
            }
            fh.write(json.dumps(line) + "\n")
    print(f"{len(chosen)} plans -> {args.out}")
    return 0


def _entries(args) -> list:
    """The matrix entries a plan or merge step works on: the training runs, the resume round
    trips (``--resume``) or the save runs (``--save``)."""
    from matrix import entries, resume_entries, save_entries

    return save_entries() if args.save else resume_entries() if args.resume else entries()


# --- merge (here) -----------------------------------------------------------------------


def _plan_without_record(plan: dict) -> dict:
    return {k: v for k, v in plan.items() if k != "config"}


def merge(args) -> int:
    """Fold successful results into the set, in matrix order. A result is taken only if its
    entry is still in the matrix and the matrix's config still plans exactly what ran, so a
    record never claims a config other than the one measured; its config is then the matrix's."""
    from matrix import split_of

    from memtune.check import gate
    from memtune.config import validate
    from memtune.measure.plan import plan_measurement

    ran = {}
    for path in args.plans:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                item = json.loads(line)
                ran[item["id"]] = item["plan"]

    def measured_records(paths):
        found = {}
        for path in paths:
            for line in Path(path).read_text().splitlines():
                if line.strip():
                    record = json.loads(line)
                    if "measured" in record:
                        found[record["id"]] = record
        return found

    already = measured_records([args.into] if Path(args.into).exists() else [])
    results = measured_records(args.results)
    merged, skipped, unstepped = [], [], []
    for entry in _entries(args):
        record = results.get(entry.id)
        if record is not None and any(
            not it.get("optimizer_stepped", True) for it in record["measured"]["iterations"][1:]
        ):
            unstepped.append(entry.id)  # no Adam state: not the job's steady state
            record = None
        if record is not None:
            planned = plan_measurement(
                gate(validate(entry.config)),
                entry.rank,
                len(record["measured"]["iterations"]),
                resume=args.resume or args.save,
            )
            if entry.id in ran and _plan_without_record(planned.to_json()) != _plan_without_record(
                ran[entry.id]
            ):
                skipped.append(entry.id)
                record = None
        # a result not taken leaves the set's earlier record of that run as it was
        record = record or already.get(entry.id)
        if record is None:
            continue
        merged.append(dict(record, split=split_of(entry.id), config=entry.config, rank=entry.rank))
    with open(args.into, "w") as fh:
        for record in merged:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
    counts = {name: sum(r["split"] == name for r in merged) for name in sorted({r["split"] for r in merged})}
    print(f"{len(merged)} runs ({', '.join(f'{n} {name}' for name, n in counts.items())}) -> {args.into}")
    if skipped:
        print(f"not taken, the matrix now plans them differently: {', '.join(skipped)}")
    if unstepped:
        print(f"not taken, the optimizer skipped a measured step (fp16 loss scaler): {', '.join(unstepped)}")
    return 0


# --- run (GPU machine) ------------------------------------------------------------------


def _record(item: dict, result: dict) -> dict:
    record = {"id": item["id"], "split": item["split"], "config": item["config"], "rank": item["rank"]}
    if "error" in result:
        record["error"] = result["error"]
    else:
        record.update(
            pp_rank=result["pp_rank"],
            measured=result["measured"],
            environment=result["environment"],
            wall_seconds=result["wall_seconds"],
        )
    return record


class Packer:
    """Starts runs while their summed need stays within the budget; big ones first."""

    def __init__(self, items: list[dict], budget_gib: float, max_jobs: int):
        self.pending = sorted(items, key=lambda x: -x["need_gib"])
        self.budget, self.max_jobs = budget_gib, max_jobs
        self.running: dict[Future, dict] = {}

    def in_use(self) -> float:
        return sum(self.need(x) for x in self.running.values())

    def need(self, item: dict) -> float:
        return self.budget if item.get("alone") else min(item["need_gib"], self.budget)

    def next_fitting(self) -> dict | None:
        if len(self.running) >= self.max_jobs:
            return None
        for item in self.pending:
            if self.in_use() + self.need(item) <= self.budget:
                self.pending.remove(item)
                return item
        return None


def run_plans(args) -> int:
    from memtune.measure.run import run_plan_json, run_resume_json

    items = [json.loads(line) for line in Path(args.plans).read_text().splitlines() if line.strip()]
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    packer = Packer(items, args.budget_gib, args.jobs)
    started = time.monotonic()
    done = 0

    def measure(item: dict) -> dict:
        timeout = args.timeout_solo if item["solo"] else args.timeout
        with open(logs / f"{item['id']}.log", "a") as log:
            if not item["plan"].get("resume"):
                return run_plan_json(item["plan"], item["plan"]["env"], sys.executable, timeout, log)
            both = run_resume_json(item["plan"], item["plan"]["env"], sys.executable, timeout, log)
            if "error" in both or item["plan"]["resume"].get("save_only"):
                return both  # a save run's result is its one process's
            # The save run's training record, with the load run's phase and first iteration.
            result = both["training"]
            resumed = both["resumed"]["measured"]
            result["measured"]["resume"] = {**resumed["resume"], "first_iteration": resumed["iterations"][0]}
            return result

    with open(args.results, "a") as out, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        while packer.pending or packer.running:
            while (item := packer.next_fitting()) is not None:
                packer.running[pool.submit(measure, item)] = item
            finished, _ = wait(list(packer.running), return_when=FIRST_COMPLETED)
            for future in finished:
                item = packer.running.pop(future)
                result = future.result()
                crowded = len(packer.running) > 0 and not item.get("alone")
                if result.get("error", {}).get("kind") == "oom" and crowded:
                    packer.pending.append(dict(item, alone=True))
                    status = "oom beside others, retrying alone"
                else:
                    out.write(json.dumps(_record(item, result)) + "\n")
                    out.flush()
                    done += 1
                    status = (
                        result["error"]["message"]
                        if "error" in result
                        else (
                            f"peak {result['measured']['peak_allocated_bytes'] / GiB:.2f} GiB in {result['wall_seconds']} s"
                        )
                    )
                print(
                    f"[{time.monotonic() - started:6.0f}s] {done}/{len(items)} {item['id']}: {status}",
                    flush=True,
                )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("plan")
    p.add_argument("out")
    p.add_argument("--smoke", action="store_true", help="only the shake-out entries")
    p.add_argument("--rest", action="store_true", help="every entry but the shake-out ones")
    p.add_argument("--ids", help="comma-separated run ids")
    p.add_argument("--shard", metavar="K/N", help="every N-th entry starting at the K-th")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--resume", action="store_true", help="the checkpoint round trips of resume_entries()")
    p.add_argument("--save", action="store_true", help="the checkpoint saves of save_entries()")
    p.set_defaults(fn=make_plans)
    r = sub.add_parser("run")
    r.add_argument("plans")
    r.add_argument("results")
    r.add_argument("--logs", required=True)
    r.add_argument("--budget-gib", type=float, default=120.0)
    r.add_argument("--jobs", type=int, default=8)
    r.add_argument("--timeout", type=float, default=300)
    r.add_argument("--timeout-solo", type=float, default=420)
    r.set_defaults(fn=run_plans)
    m = sub.add_parser("merge")
    m.add_argument("results", nargs="+")
    m.add_argument("--plans", nargs="+", required=True, help="the plan files the results were run from")
    m.add_argument("--into", required=True)
    m.add_argument("--resume", action="store_true", help="results of resume round trips (resume_entries())")
    m.add_argument("--save", action="store_true", help="results of checkpoint saves (save_entries())")
    m.set_defaults(fn=merge)
    args = parser.parse_args()
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
