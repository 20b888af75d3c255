"""``memtune plan``'s pruned search against pricing every layout that fits, on real searches.

    python benchmarks/plan_prune.py                 # the searches below, one after another
    python benchmarks/plan_prune.py --only llama3-8b

For each search: the best 5 layouts the search shows (it prices only what the step model's lower
bound cannot rule out, ``memtune/plan/search.py``), and the best 5 when every layout that fits
is estimated and priced by ``memtune.perf.step.throughput_of`` with nothing reused between
layouts, then gated in order; the two lists must be the same. CPU seconds of each, in this
process (the machine's other load slows both alike).
"""

from __future__ import annotations

import argparse
import itertools
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (model, GPUs, sequence, global batch, mode): the searches docs/plan.md quotes
SEARCHES = (
    ("llama3-8b", 16, 4096, 64, "pretrain"),
    ("qwen3-30b-a3b", 16, 4096, 256, "pretrain"),
    ("llama3-70b", 8, 4096, 32, "lora"),
    ("llama3-70b", 64, 4096, 128, "pretrain"),
)
TOP = 5


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def every_layout(base):  # type: ignore[no-untyped-def]
    """The best ``TOP`` that pass the gate when every layout that fits is priced, and how many fit."""
    from memtune.catalog.gpus import capacity_bytes
    from memtune.check import gate
    from memtune.config.changes import with_changes
    from memtune.config.derived import derive
    from memtune.errors import InputError
    from memtune.perf.step import throughput_of
    from memtune.plan.fast import FastEstimator
    from memtune.plan.space import changes_of, default_space, layouts, pruned

    d = derive(base)
    fast = FastEstimator(base, capacity_bytes(base.cluster.gpu, base.cluster.gpu_memory_gib))
    priced = []
    for index, group in enumerate(layouts(d, default_space(d))):
        for position, c in enumerate(group.members):
            if pruned(d, c, d.global_batch_size) or fast.evaluate(c).verdict != "fits":
                continue
            step = throughput_of(d.with_knobs(c)).prediction
            priced.append((step.step_time_s if step else float("inf"), (index, position), c))
    priced.sort(key=lambda p: (p[0], p[1]))

    def passes(c):  # type: ignore[no-untyped-def]
        try:
            gate(with_changes(base, changes_of(base, c)))
        except InputError:
            return False
        return True

    best = [(c, step) for step, _, c in priced if passes(c)]
    return list(itertools.islice(best, TOP)), len(priced)


def main() -> int:
    from memtune.plan.query import Query, base_job
    from memtune.plan.search import search

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", help="the searches of this model only")
    args = parser.parse_args()
    for model, gpus, seq, gbs, mode in SEARCHES:
        if args.only and model != args.only:
            continue
        base = base_job(Query(model, gpus, "H100-80GB", 8, seq, gbs, mode))
        start = cpu()
        result = search(base, top=TOP)
        pruned_s = cpu() - start
        start = cpu()
        best, fitting = every_layout(base)
        every_s = cpu() - start
        found = [(p.candidate, p.step_time_s) for p in result.layouts]
        same = "same" if found == best else "DIFFERENT"
        print(
            f"{model} {mode} on {gpus} H100s, seq {seq}, GBS {gbs}: best {TOP} {same}; search "
            f"{pruned_s:.1f} CPU-s ({result.counts.get('simulated', 0)} priced), every layout {every_s:.1f} "
            f"CPU-s ({fitting:,} priced)"
        )
        for p in result.layouts:
            print(
                f"  {p.candidate.label()} {p.candidate.recompute.label()} {p.candidate.sharding} "
                f"offload {p.candidate.offload:g}: {p.tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
