"""Formatting of the benchmarks: tables for people, JSON for tools. Nothing is computed here."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from memtune.bench.accuracy import AccuracyReport, FalseFits
from memtune.bench.published import PublishedReport, PublishedSummary
from memtune.estimate.verdict import MIN_RUNS, Calibration
from memtune.output import SCHEMA_VERSION
from memtune.units import GiB


def accuracy_json(report: AccuracyReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "runs": [
            asdict(r)
            | {"family": r.family, "error": r.error, "megatron_lm_error": r.megatron_lm_error}
            | {"false_fit": r.false_fit}
            for r in report.shown
        ],
        "summary": {k: asdict(v) if v else None for k, v in report.splits.items()},
        "families": {f"{family}/{split}": asdict(v) for (family, split), v in report.families.items()},
        "collection_range": asdict(report.collection_range) if report.collection_range else None,
        "false_fits": _false_fits_json(report.false_fits),
    }


def _false_fits_json(per_split: dict[str, FalseFits | None]) -> dict[str, Any]:
    return {k: asdict(v) | {"rate": v.rate} if v else None for k, v in per_split.items()}


def _print_false_fits(console: Console, per_split: dict[str, FalseFits | None]) -> None:
    console.print(
        "[bold]Verdict false fits[/bold] (each run on the GPU that puts its estimate exactly at the "
        "'fits' boundary; false: the real peak would not have fit; docs/verdict.md)"
    )
    for name, f in per_split.items():
        if f:
            console.print(
                f"  {name:8} {f.false_fits:3} of {f.runs:3} runs ({f.rate:.1%})"
                + (f", up to {f.worst_excess:.1%} beyond the margin: {', '.join(f.ids)}" if f.ids else "")
            )


def print_accuracy(console: Console, report: AccuracyReport) -> None:
    table = Table(title="Estimated vs measured steady-state peak (GiB = 2^30 bytes)", title_justify="left")
    for col in ("run", "split", "pp", "measured", "memtune", "error", "Megatron-LM", "error"):
        table.add_column(col, justify="left" if col in ("run", "split") else "right")
    for r in report.shown:
        table.add_row(
            r.id,
            r.split,
            str(r.pp_rank),
            f"{r.measured / GiB:.2f}",
            f"{r.estimated / GiB:.2f}",
            f"{r.error:+.1%}",
            f"{r.megatron_lm / GiB:.2f}",
            f"{r.megatron_lm_error:+.1%}",
            style="red" if abs(r.error) > 0.08 else "",
        )
    console.print(table)
    for name, s in report.splits.items():
        if s:
            console.print(
                f"[bold]{name:8}[/bold] {s.runs:3} runs  memtune: mean |error| {s.mean_abs_error:.1%}, "
                f"max {s.max_abs_error:.1%} ({s.worst_id})   Megatron-LM formula: mean "
                f"{s.megatron_lm_mean_abs_error:.1%}, max {s.megatron_lm_max_abs_error:.1%}"
            )
    console.print("[bold]By family[/bold] (run id prefix)")
    for (family, split), s in report.families.items():
        console.print(
            f"  {family:20} {split:8} {s.runs:3} runs  mean |error| {s.mean_abs_error:.1%}, "
            f"max {s.max_abs_error:.1%} ({s.worst_id})"
        )
    if gc_range := report.collection_range:
        console.print(
            f"[bold]Collector-dependent[/bold] (optimizer offload without manual_gc): the estimate is the bound "
            f"with the replaced optimizer's copies; in all {gc_range.runs} runs the measured peak lies "
            f"between the figure once collected and that bound, to within {gc_range.worst_outside:.1%} "
            f"({gc_range.worst_id})"
        )
    _print_false_fits(console, report.false_fits)


def published_json(report: PublishedReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "runs": [
            asdict(r) | {"error": r.error, "under": r.under, "false_fit": r.false_fit} for r in report.shown
        ],
        "summary": {k: asdict(v) if v else None for k, v in report.splits.items()},
        "families": {
            f.family: {k: asdict(v) if v else None for k, v in f.splits.items()} for f in report.families
        },
        "false_fits": _false_fits_json(report.false_fits),
    }


def print_published(console: Console, report: PublishedReport) -> None:
    table = Table(title="Estimated vs published peak (GiB = 2^30 bytes)", title_justify="left")
    for col in ("run", "split", "published", "memtune", "error", ""):
        table.add_column(col, justify="left" if col in ("run", "split", "") else "right")
    for r in report.shown:
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
    for name, s in report.splits.items():
        if s:
            console.print(
                f"[bold]{name:8}[/bold] {s.runs:3} runs  mean |error| {s.mean_abs_error:.1%}, "
                f"max {s.max_abs_error:.1%} ({s.worst_id}); under-estimates {s.under_estimates}, "
                f"worst {s.worst_under:+.1%}"
            )
    families = Table(
        title="By feature family (a run counts in each family it exercises; mean error signed)",
        title_justify="left",
    )
    splits = [name for name in report.splits if name != "all"]
    families.add_column("family")
    for name in splits:
        families.add_column(f"{name}: runs, mean / mean |error| / max", justify="right")
    for f in report.families:
        families.add_row(f.family, *(_family_cell(f.splits[name]) for name in splits))
    console.print(families)
    _print_false_fits(console, report.false_fits)


def _family_cell(s: PublishedSummary | None) -> str:
    if s is None:
        return "-"
    return f"{s.runs}, {s.mean_error:+.1%} / {s.mean_abs_error:.1%} / {s.max_abs_error:.1%}"


def print_calibration(console: Console, cal: Calibration) -> None:
    table = Table(
        title="The verdict's calibration: worst under-estimate per family on tune runs (share of the estimate)",
        title_justify="left",
    )
    for col in ("family", "measured runs", "published runs", "worst under", "confidence", "run"):
        table.add_column(col, justify="left" if col in ("family", "run") else "right")
    for f in cal.families.values():
        table.add_row(
            f.family,
            str(f.measured_runs),
            str(f.published_runs),
            f"{f.worst_under:.1%}",
            f"{f.confidence:.0%}" if f.runs >= MIN_RUNS else f"{f.confidence:.0%} (< {MIN_RUNS} runs)",
            f.worst_id or "-",
        )
    console.print(table)
    console.print(
        f"{len(cal.combinations)} family combinations on tune runs; a job outside them, or in a family of "
        f"fewer than {MIN_RUNS} runs, gets the widest margin, {cal.widest:.1%}"
    )


def print_plan_accuracy(console: Console, sets: list[list[Any]]) -> None:
    """Predicted against measured throughput of published layout comparisons (bench/plan.py)."""
    from memtune.bench.plan import kendall_tau

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
        tau = kendall_tau([r.measured for r in runs], [r.predicted for r in runs])
        errors = [abs(r.error) for r in runs[1:]]
        console.print(
            f"[bold]{runs[0].set_id}[/bold] ({runs[0].split}): Kendall tau {tau:+.2f}, relative-throughput "
            f"error mean {sum(errors) / max(len(errors), 1):.1%}, max {max(errors, default=0):.1%}"
        )


def print_plan_speed(console: Console, args: Any, result: Any, workers: int) -> None:
    n = result.result.counts
    console.print(
        f"{args.model} on {args.gpus} x {args.gpu}, seq {args.seq}, GBS {args.gbs}: "
        f"{n.get('enumerated', 0):,} candidates ({n.get('pruned', 0):,} pruned by arithmetic, "
        f"{n.get('estimated', 0):,} estimated, {n.get('fit', 0):,} fit) in {result.wall_s:.2f} s wall, "
        f"{result.cpu_s:.2f} s CPU over {workers} process(es)"
    )
