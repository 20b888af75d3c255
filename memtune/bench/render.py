"""Formatting of the benchmarks: tables for people, JSON for tools. Nothing is computed here."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.markup import escape

from memtune.bench.accuracy import AccuracyReport
from memtune.bench.published import PublishedReport, PublishedSummary
from memtune.output import SCHEMA_VERSION
from memtune.tables import Column, print_table, print_text
from memtune.units import GiB


def accuracy_json(report: AccuracyReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "runs": [
            asdict(r) | {"family": r.family, "error": r.error, "megatron_lm_error": r.megatron_lm_error}
            for r in report.shown
        ],
        "summary": {k: asdict(v) if v else None for k, v in report.splits.items()},
        "families": {f"{family}/{split}": asdict(v) for (family, split), v in report.families.items()},
        "collection_range": asdict(report.collection_range) if report.collection_range else None,
    }


# Run ids are what a user looks up, so they stay; the pipeline rank and the formula's own figure
# give way first on a narrow terminal, then the formula's error.
_ACCURACY_COLUMNS = (
    Column("run", "left"),
    Column("split", "left", keep=50),
    Column("pp", keep=30),
    Column("measured"),
    Column("memtune"),
    Column("error"),
    Column("Megatron-LM", keep=10),
    Column("its error", keep=20),
)


def print_accuracy(console: Console, report: AccuracyReport) -> None:
    rows = [
        (
            r.id,
            r.split,
            str(r.pp_rank),
            f"{r.measured / GiB:.2f}",
            f"{r.estimated / GiB:.2f}",
            f"{r.error:+.1%}",
            f"{r.megatron_lm / GiB:.2f}",
            f"{r.megatron_lm_error:+.1%}",
        )
        for r in report.shown
    ]
    print_table(
        console,
        _ACCURACY_COLUMNS,
        rows,
        title="Estimated vs measured steady-state peak (GiB = 2^30 bytes)",
        row_styles=["red" if abs(r.error) > 0.08 else "" for r in report.shown],
    )
    splits = [(name, s) for name, s in report.splits.items() if s]
    print_table(
        console,
        (
            Column("split", "left"),
            Column("runs"),
            Column("mean"),
            Column("max"),
            Column("worst run", "left", keep=20),
            Column("formula mean", keep=40),
            Column("formula max", keep=40),
        ),
        [
            (
                name,
                str(s.runs),
                f"{s.mean_abs_error:.1%}",
                f"{s.max_abs_error:.1%}",
                s.worst_id,
                f"{s.megatron_lm_mean_abs_error:.1%}",
                f"{s.megatron_lm_max_abs_error:.1%}",
            )
            for name, s in splits
        ],
        title="By split: |error| of memtune and of Megatron-LM's formula",
    )
    print_table(
        console,
        (
            Column("family", "left"),
            Column("split", "left"),
            Column("runs"),
            Column("mean"),
            Column("max"),
            Column("worst run", "left", keep=20),
        ),
        [
            (family, split, str(s.runs), f"{s.mean_abs_error:.1%}", f"{s.max_abs_error:.1%}", s.worst_id)
            for (family, split), s in report.families.items()
        ],
        title="By family (run id prefix): |error| of memtune",
    )
    if gc_range := report.collection_range:
        print_text(
            console,
            f"[bold]Collector-dependent[/bold] (optimizer offload without manual_gc): the estimate is the bound "
            f"with the replaced optimizer's copies; in all {gc_range.runs} runs the measured peak lies "
            f"between the figure once collected and that bound, to within {gc_range.worst_outside:.1%} "
            f"({gc_range.worst_id})",
        )


def published_json(report: PublishedReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "runs": [asdict(r) | {"error": r.error, "under": r.under} for r in report.shown],
        "summary": {k: asdict(v) if v else None for k, v in report.splits.items()},
        "families": {
            f.family: {k: asdict(v) if v else None for k, v in f.splits.items()} for f in report.families
        },
    }


def print_published(console: Console, report: PublishedReport) -> None:
    rows = [
        (
            r.id,
            r.split,
            f"{r.published / GiB:.2f}",
            f"{r.estimated / GiB:.2f}",
            f"{r.error:+.1%}",
            "UNDER" if r.under else "",
        )
        for r in report.shown
    ]
    print_table(
        console,
        (
            Column("run", "left"),
            Column("split", "left", keep=50),
            Column("published"),
            Column("memtune"),
            Column("error"),
            Column("", "left"),
        ),
        rows,
        title="Estimated vs published peak (GiB = 2^30 bytes)",
        row_styles=["red" if r.under and r.error < -0.05 else "" for r in report.shown],
    )
    for name, s in report.splits.items():
        if s:
            print_text(
                console,
                f"[bold]{name:8}[/bold] {s.runs:3} runs  mean |error| {s.mean_abs_error:.1%}, "
                f"max {s.max_abs_error:.1%} ({s.worst_id}); under-estimates {s.under_estimates}, "
                f"worst {s.worst_under:+.1%}",
            )
    splits = [name for name in report.splits if name != "all"]
    print_table(
        console,
        (Column("family", "left"), *(Column(f"{name}: n, mean / |err| / max") for name in splits)),
        [(f.family, *(_family_cell(f.splits[name]) for name in splits)) for f in report.families],
        title="By feature family (a run counts in each family it exercises; mean error signed)",
    )


def _family_cell(s: PublishedSummary | None) -> str:
    if s is None:
        return "-"
    return f"{s.runs}, {s.mean_error:+.1%} / {s.mean_abs_error:.1%} / {s.max_abs_error:.1%}"


def print_plan_accuracy(console: Console, sets: list[list[Any]]) -> None:
    """Predicted against measured throughput of published layout comparisons (bench/plan.py)."""
    from memtune.bench.plan import kendall_tau

    rows = [
        (
            r.set_id,
            r.split,
            r.label,
            f"{r.measured:g}",
            f"{r.predicted:.1f}",
            f"{r.measured_relative:.3f}",
            f"{r.predicted_relative:.3f}",
            f"{r.error:+.1%}",
        )
        for runs in sets
        for r in runs
    ]
    print_table(
        console,
        (
            Column("set", "left"),
            Column("split", "left", keep=40),
            Column("run", "left", wrap=True),
            Column("measured", keep=20),
            Column("predicted", keep=20),
            Column("meas rel"),
            Column("pred rel"),
            Column("error"),
        ),
        rows,
        title="Predicted vs measured throughput, relative to each set's first run",
    )
    for runs in sets:
        tau = kendall_tau([r.measured for r in runs], [r.predicted for r in runs])
        errors = [abs(r.error) for r in runs[1:]]
        print_text(
            console,
            f"[bold]{runs[0].set_id}[/bold] ({runs[0].split}): Kendall tau {tau:+.2f}, relative-throughput "
            f"error mean {sum(errors) / max(len(errors), 1):.1%}, max {max(errors, default=0):.1%}",
        )


def print_plan_speed(console: Console, args: Any, result: Any, workers: int) -> None:
    n = result.result.counts
    print_text(
        console,
        f"{escape(args.model)} on {args.gpus} x {escape(args.gpu)}, seq {args.seq}, GBS {args.gbs}: "
        f"{n.get('enumerated', 0):,} candidates ({n.get('pruned', 0):,} pruned by arithmetic, "
        f"{n.get('estimated', 0):,} estimated, {n.get('fit', 0):,} fit) in {result.wall_s:.2f} s wall, "
        f"{result.cpu_s:.2f} s CPU over {workers} process(es)",
    )
