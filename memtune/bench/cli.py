"""``memtune bench accuracy [FILES...]``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from memtune.bench.accuracy import evaluate, read_runs, summarize
from memtune.units import GiB

DEFAULT_SET = Path("benchmarks/measured")
DEFAULT_LAYOUTS_TEXT = "benchmarks/published/layouts"


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
    plan = bench.add_parser(
        "plan",
        help="the planner's search speed; with --accuracy, the throughput model against published layouts",
        description="Time an exhaustive `memtune plan` search (default: Llama 3.1 405B on 1,024 H100s), or with "
        "--accuracy compare predicted and measured throughput of published layout comparisons.",
    )
    plan.add_argument("--model", default="llama3.1-405b", help="model preset (default llama3.1-405b)")
    plan.add_argument("--gpus", type=int, default=1024, help="GPU count (default 1024)")
    plan.add_argument("--gpu", default="H100-80GB", help="GPU type (default H100-80GB)")
    plan.add_argument("--seq", type=int, default=8192, help="sequence length (default 8192)")
    plan.add_argument("--gbs", type=int, default=1536, help="global batch size (default 1536)")
    plan.add_argument("--workers", type=int, default=0, help="search processes (default: CPU count, up to 8)")
    plan.add_argument(
        "--accuracy",
        nargs="*",
        type=Path,
        metavar="PATH",
        help=f"published comparisons to score (default {DEFAULT_LAYOUTS_TEXT})",
    )
    plan.set_defaults(handler=run_plan)


def run(args: argparse.Namespace) -> int:
    results = [evaluate(r) for r in read_runs(args.paths)]
    shown = [r for r in results if args.split == "all" or r.split == args.split]
    names = sorted({r.split for r in results}, key=lambda n: (n != "tune", n != "holdout", n))
    splits = {name: summarize([r for r in results if r.split == name]) for name in names}
    splits["all"] = summarize(results)
    if args.json:
        print(
            json.dumps(
                {
                    "runs": [
                        asdict(r) | {"error": r.error, "megatron_lm_error": r.megatron_lm_error}
                        for r in shown
                    ],
                    "summary": {k: asdict(v) if v else None for k, v in splits.items()},
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
    return 0


def run_plan(args: argparse.Namespace) -> int:
    from memtune.bench import plan as bench_plan
    from memtune.plan.search import default_workers

    console = Console()
    if args.accuracy is not None:
        sets = bench_plan.accuracy(args.accuracy or [bench_plan.DEFAULT_LAYOUTS])
        table = Table(
            title="Predicted vs measured throughput, relative to each set's first run", title_justify="left"
        )
        for col in ("set", "split", "run", "measured", "predicted", "meas rel", "pred rel", "error"):
            table.add_column(col, justify="left" if col in ("set", "split", "run") else "right")
        for runs in sets:
            for r in runs:
                table.add_row(
                    r.set_id,
                    r.split,
                    r.label,
                    f"{r.measured:g}",
                    f"{r.predicted:.1f}",
                    f"{r.measured_relative:.3f}",
                    f"{r.predicted_relative:.3f}",
                    f"{r.error:+.1%}",
                )
        console.print(table)
        for runs in sets:
            tau = bench_plan.kendall_tau([r.measured for r in runs], [r.predicted for r in runs])
            errors = [abs(r.error) for r in runs[1:]]
            console.print(
                f"[bold]{runs[0].set_id}[/bold] ({runs[0].split}): Kendall tau {tau:+.2f}, "
                f"relative-throughput error mean {sum(errors) / max(len(errors), 1):.1%}, max {max(errors, default=0):.1%}"
            )
        return 0
    workers = args.workers or default_workers()
    result = bench_plan.speed(args.model, args.gpus, args.seq, args.gbs, args.gpu, workers)
    n = result.result.counts
    console.print(
        f"{args.model} on {args.gpus} x {args.gpu}, seq {args.seq}, GBS {args.gbs}: {n.get('enumerated', 0):,} candidates "
        f"({n.get('pruned', 0):,} pruned by arithmetic, {n.get('estimated', 0):,} estimated, {n.get('fit', 0):,} fit) "
        f"in {result.wall_s:.2f} s wall, {result.cpu_s:.2f} s CPU over {workers} process(es)"
    )
    return 0
