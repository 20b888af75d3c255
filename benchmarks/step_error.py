"""The uncertainty memtune states on every predicted step time: the step model's error on its
held-out runs, per feature family (``memtune/perf/data/step_error.json``, read by
``memtune/perf/uncertainty.py``).

    python benchmarks/step_error.py            # print the table
    python benchmarks/step_error.py --write    # write it
    python benchmarks/step_error.py --check    # exit 1 when the committed table differs

Two held-out sets, each split by its own rule before any comparison (docs/plan.md):

- ``published``: whole steps of real multi-GPU runs, the published timings of
  ``benchmarks/published/layouts`` (``memtune bench plan --accuracy --split holdout``): the step
  time is the published model TFLOP/s (or step time) against the predicted one, and where a run
  publishes tokens/s alone (MLPerf's), its tokens/s (``RunScore.throughput_error``; until
  session 28 those runs were left out). The GB200
  functional tests (``megatron-lm-ci-gb200``), which that command reports on a line of their own,
  are not in it (``accuracy`` leaves them out unless asked).
- ``single_rank``: one rank's compute and optimizer step timed alone on an H200 or H100 under
  the fake process group (``benchmarks/gpu/results``, ``python benchmarks/compute_accuracy.py
  --split holdout``: memtune's own sets and the checks of a frozen model), for jobs on one GPU.

A run's error is measured / predicted - 1 of its step time; a family's figure is the median of
|error| over the held-out runs in that family (a run counts in each family it exercises,
``families_of`` of the verdict), and ``all`` over every held-out run of the set. Regenerate it
whenever the step model or the sets change.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

TABLE = ROOT / "memtune" / "perf" / "data" / "step_error.json"
DIGITS = 4  # shares kept to 0.01%: the figures are medians of a few dozen runs


def published_errors() -> list[tuple[tuple[str, ...], float]]:
    from memtune.bench.plan import accuracy

    groups = accuracy([ROOT / "benchmarks" / "published" / "layouts"], "holdout")
    return [(r.families, r.throughput_error) for g in groups for r in g.runs]


def single_rank_errors() -> list[tuple[tuple[str, ...], float]]:
    """memtune's own single-rank runs of the holdout split, each compared as its loop timed it
    (``compute_accuracy.compare``: the stage run alone, as under the fake process group)."""
    from compute_accuracy import CHECK_SETS, OWN_SETS, compare, own_runs

    from memtune.estimate.verdict import families_of

    found = []
    for name in [*OWN_SETS, *CHECK_SETS]:
        for run in own_runs(name):
            if run.split != "holdout":
                continue
            predicted_over_measured = 1 + compare(run).step
            found.append((families_of(run.derived), 1 / predicted_over_measured - 1))
    return found


def per_family(errors: list[tuple[tuple[str, ...], float]]) -> dict[str, dict[str, float | int]]:
    families = sorted({f for fams, _ in errors for f in fams})
    table = {"all": _figure([e for _, e in errors])}
    for family in families:
        table[family] = _figure([e for fams, e in errors if family in fams])
    return table


def _figure(errors: list[float]) -> dict[str, float | int]:
    return {"runs": len(errors), "error": round(statistics.median(abs(e) for e in errors), DIGITS)}


def table() -> dict[str, object]:
    return {
        "statistic": "median of |measured / predicted - 1| of the step time over held-out runs",
        "generated_by": "python benchmarks/step_error.py --write",
        "sets": {
            "published": {
                "description": "whole steps of real multi-GPU runs (published timings, "
                "benchmarks/published/layouts; memtune bench plan --accuracy --split holdout)",
                "families": per_family(published_errors()),
            },
            "single_rank": {
                "description": "one rank's compute and optimizer step timed alone on one H200 or H100 "
                "(benchmarks/gpu/results; python benchmarks/compute_accuracy.py --split holdout)",
                "families": per_family(single_rank_errors()),
            },
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table differs")
    args = parser.parse_args()
    text = json.dumps(table(), indent=2) + "\n"
    if args.check:
        same = TABLE.read_text(encoding="utf-8") == text
        print(f"{TABLE.relative_to(ROOT)} is {'up to date' if same else 'out of date: run --write'}")
        return 0 if same else 1
    if args.write:
        TABLE.write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
