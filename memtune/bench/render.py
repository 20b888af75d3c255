"""Formatting of the benchmarks: tables for people, JSON for tools. Nothing is computed here."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from memtune.bench.accuracy import AccuracyReport
from memtune.bench.published import PublishedReport
from memtune.output import SCHEMA_VERSION
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
    }


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
            f"  {family:18} {split:8} {s.runs:3} runs  mean |error| {s.mean_abs_error:.1%}, "
            f"max {s.max_abs_error:.1%} ({s.worst_id})"
        )


def published_json(report: PublishedReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "runs": [asdict(r) | {"error": r.error, "under": r.under} for r in report.shown],
        "summary": {k: asdict(v) if v else None for k, v in report.splits.items()},
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
