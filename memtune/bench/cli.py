"""``memtune bench accuracy [FILES...]``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from memtune.bench.accuracy import evaluate, read_runs, summarize
from memtune.bench.published import evaluate_published, read_published, summarize_published
from memtune.errors import InputError
from memtune.output import SCHEMA_VERSION
from memtune.units import GiB

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
    results = [evaluate(r) for r in read_runs(args.paths)]
    known = sorted({r.split for r in results})
    if args.split != "all" and args.split not in known:
        raise InputError(
            f"--split: no run is in split {args.split!r}; the splits are all, {', '.join(known)}"
        )
    shown = [r for r in results if args.split == "all" or r.split == args.split]
    names = sorted({r.split for r in results}, key=lambda n: (n != "tune", n != "holdout", n))
    splits = {name: summarize([r for r in results if r.split == name]) for name in names}
    splits["all"] = summarize(results)
    families = {
        (family, split): summarize([r for r in results if r.family == family and r.split == split])
        for family in sorted({r.family for r in results})
        for split in names
    }
    if args.json:
        print(
            json.dumps(
                {
                    "schema_version": SCHEMA_VERSION,
                    "runs": [
                        asdict(r)
                        | {"family": r.family, "error": r.error, "megatron_lm_error": r.megatron_lm_error}
                        for r in shown
                    ],
                    "summary": {k: asdict(v) if v else None for k, v in splits.items()},
                    "families": {
                        f"{family}/{split}": asdict(v) for (family, split), v in families.items() if v
                    },
                },
                indent=2,
            )
        )
        return 0
    console = Console()
    table = Table(title="Estimated vs measured steady-state peak (GiB = 2^30 bytes)", title_justify="left")
    for col in ("run", "split", "pp", "measured", "memtune", "error", "Megatron-LM", "error"):
        table.add_column(col, justify="left" if col in ("run", "split") else "right")
    for r in shown:
        style = "red" if abs(r.error) > 0.08 else ""
        table.add_row(
            r.id,
            r.split,
            str(r.pp_rank),
            f"{r.measured / GiB:.2f}",
            f"{r.estimated / GiB:.2f}",
            f"{r.error:+.1%}",
            f"{r.megatron_lm / GiB:.2f}",
            f"{r.megatron_lm_error:+.1%}",
            style=style,
        )
    console.print(table)
    for name, s in splits.items():
        if s:
            console.print(
                f"[bold]{name:8}[/bold] {s.runs:3} runs  memtune: mean |error| {s.mean_abs_error:.1%}, max {s.max_abs_error:.1%}"
                f" ({s.worst_id})   Megatron-LM formula: mean {s.megatron_lm_mean_abs_error:.1%}, max {s.megatron_lm_max_abs_error:.1%}"
            )
    console.print("[bold]By family[/bold] (run id prefix)")
    for (family, split), s in families.items():
        if s:
            console.print(
                f"  {family:18} {split:8} {s.runs:3} runs  mean |error| {s.mean_abs_error:.1%}, max {s.max_abs_error:.1%}"
                f" ({s.worst_id})"
            )
    return 0


def run_published(args: argparse.Namespace) -> int:
    results = [evaluate_published(r) for r in read_published(args.paths)]
    shown = [r for r in results if args.split == "all" or r.split == args.split]
    names = ("tune", "holdout") if args.split == "all" else (args.split,)
    splits = {name: summarize_published([r for r in results if r.split == name]) for name in names}
    if args.split == "all":
        splits["all"] = summarize_published(results)
    if args.json:
        print(
            json.dumps(
                {
                    "schema_version": 1,
                    "runs": [asdict(r) | {"error": r.error, "under": r.under} for r in shown],
                    "summary": {k: asdict(v) if v else None for k, v in splits.items()},
                },
                indent=2,
            )
        )
        return 0
    console = Console()
    table = Table(title="Estimated vs published peak (GiB = 2^30 bytes)", title_justify="left")
    for col in ("run", "split", "published", "memtune", "error", ""):
        table.add_column(col, justify="left" if col in ("run", "split", "") else "right")
    for r in shown:
        table.add_row(
            r.id,
            r.split,
            f"{r.published / GiB:.2f}",
            f"{r.estimated / GiB:.2f}",
            f"{r.error:+.1%}",
            "UNDER" if r.under else "",
            style="red" if r.under and r.error < -0.05 else "",
        )
    console.print(table)
    for name, s in splits.items():
        if s:
            console.print(
                f"[bold]{name:8}[/bold] {s.runs:3} runs  mean |error| {s.mean_abs_error:.1%}, max {s.max_abs_error:.1%}"
                f" ({s.worst_id}); under-estimates {s.under_estimates}, worst {s.worst_under:+.1%}"
            )
    return 0
