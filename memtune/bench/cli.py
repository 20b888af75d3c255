"""``memtune bench accuracy [FILES...]``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from memtune.bench import render
from memtune.bench.accuracy import accuracy_report, evaluate, read_runs
from memtune.bench.published import evaluate_published, published_report, read_published

DEFAULT_SET = Path("benchmarks/measured")
DEFAULT_PUBLISHED = Path("benchmarks/published")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks: estimator accuracy against measured runs")
    bench = p.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    acc = bench.add_parser(
        "accuracy",
        help="estimate every measured run and report the error",
        description="Compare memtune's estimate (and Megatron-LM's theoretical formula) with measured "
        "steady-state peaks (max_memory_allocated, iteration 2 onward).",
    )
    acc.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[DEFAULT_SET],
        help=f"*.jsonl files or folders (default {DEFAULT_SET})",
    )
    acc.add_argument("--json", action="store_true", help="print machine-readable JSON")
    acc.add_argument(
        "--split",
        default="all",
        metavar="NAME",
        help="report only runs of this split (tune, holdout, fresh, ...; default all)",
    )
    acc.set_defaults(handler=run)
    pub = bench.add_parser(
        "published",
        help="estimate every published real run and report the error",
        description="Compare memtune's estimate with peaks (max_memory_allocated) published for real "
        "multi-GPU runs (benchmarks/published/README.md). Under-estimates are flagged: they say 'fits' "
        "before an out-of-memory.",
    )
    pub.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[DEFAULT_PUBLISHED],
        help=f"*.yaml files or folders (default {DEFAULT_PUBLISHED})",
    )
    pub.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pub.add_argument("--split", default="all", metavar="NAME", help="tune or holdout (default all)")
    pub.set_defaults(handler=run_published)


def run(args: argparse.Namespace) -> int:
    report = accuracy_report([evaluate(r) for r in read_runs(args.paths)], args.split)
    if args.json:
        print(json.dumps(render.accuracy_json(report), indent=2))
    else:
        render.print_accuracy(Console(), report)
    return 0


def run_published(args: argparse.Namespace) -> int:
    report = published_report([evaluate_published(r) for r in read_published(args.paths)], args.split)
    if args.json:
        print(json.dumps(render.published_json(report), indent=2))
    else:
        render.print_published(Console(), report)
    return 0
