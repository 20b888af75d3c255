"""Formatting of a measurement: the JSON record and the terminal table. Nothing is computed here."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from memtune.estimate.resume import ResumeEstimate
from memtune.measure.plan import MeasurePlan
from memtune.measure.run import Measurement, ResumeMeasurement
from memtune.output import SCHEMA_VERSION
from memtune.tables import Column, print_table, print_text
from memtune.units import GiB

# A measured iteration: its number and peak define it; the other figures give way on a narrow
# terminal, the seconds first.
ITERATION_COLUMNS = (
    Column("iteration", "left"),
    Column("peak allocated"),
    Column("fwd/bwd peak", keep=60),
    Column("peak reserved", keep=70),
    Column("after step", keep=50),
    Column("alloc retries", keep=40),
    Column("s", keep=30),
)
RESUME_COLUMNS = (Column("phase", "left"), Column("peak allocated"), Column("estimate"), Column("difference"))


def report_json(plan: MeasurePlan, result: Measurement, estimate: int) -> dict[str, Any]:
    measured = result.measured["peak_allocated_bytes"]
    return {
        "schema_version": SCHEMA_VERSION,
        "config": plan.config,
        "rank": plan.rank,
        "pp_rank": result.pp_rank,
        "measured": result.measured,
        "environment": result.environment,
        "wall_seconds": result.wall_seconds,
        "estimate": {"peak_bytes": estimate, "difference_bytes": estimate - measured},
    }


def print_report(console: Console, plan: MeasurePlan, result: Measurement, estimate: int) -> None:
    m = result.measured
    env = result.environment
    rows = [
        (
            str(it["iteration"]) + ("" if it["iteration"] >= 2 else " (warm-up)"),
            f"{it['peak_allocated_bytes'] / GiB:.2f}",
            f"{it['fwd_bwd_peak_bytes'] / GiB:.2f}",
            f"{it['peak_reserved_bytes'] / GiB:.2f}",
            f"{it['allocated_after_step'] / GiB:.2f}",
            str(it["num_alloc_retries"]),
            f"{it['seconds']:.1f}",
        )
        for it in m["iterations"]
    ]
    title = f"rank {plan.rank} of {plan.world_size} (pipeline stage {result.pp_rank}), GiB = 2^30 bytes"
    print_table(console, ITERATION_COLUMNS, rows, title=title)
    print_text(
        console,
        f"allocated after build {m['allocated_after_build'] / GiB:.2f}, after DDP {m['allocated_after_ddp'] / GiB:.2f}, "
        f"after optimizer {m['allocated_after_optimizer'] / GiB:.2f}; state after the last step {m['state_bytes'] / GiB:.2f}",
    )
    peak = m["peak_allocated_bytes"]
    line = f"[bold]steady-state peak allocated {peak / GiB:.2f}[/bold]"
    diff = estimate - peak
    line += f"   estimate {estimate / GiB:.2f}   difference {diff / GiB:+.2f} ({diff / peak:+.1%})"
    print_text(console, line)
    notes = [
        f"{env['gpu']}, torch {env['torch']}, megatron-core {env['megatron_core']}",
        f"attention {env['core_attention']}",
    ]
    if env.get("expert_mlp"):
        notes.append(f"experts {env['expert_mlp']}, routing forced balanced")
    print_text(console, f"[dim]{escape('; '.join(notes))}[/dim]")


def resume_report_json(
    plan: MeasurePlan, result: ResumeMeasurement, estimate: int, resume: ResumeEstimate
) -> dict[str, Any]:
    """The training record of the save run, with the load run's resume phase beside the estimate's."""
    measured = result.resumed.measured["resume"]
    return {
        **report_json(plan, result.training, estimate),
        "resume": {
            "measured": measured,
            "first_iteration": result.resumed.measured["iterations"][0],
            "estimate": {
                "load_bytes": resume.load_bytes,
                "first_step_bytes": resume.first_step_bytes,
                "load_parts": {name: round(nbytes) for name, nbytes in resume.parts.items()},
                "load_difference_bytes": resume.load_bytes - measured["load_peak_bytes"],
                "first_step_difference_bytes": resume.first_step_bytes - measured["first_step_peak_bytes"],
            },
        },
    }


def print_resume_report(console: Console, result: ResumeMeasurement, resume: ResumeEstimate) -> None:
    m = result.resumed.measured["resume"]
    rows = (
        ("checkpoint load", m["load_peak_bytes"], resume.load_bytes),
        ("first iteration after it", m["first_step_peak_bytes"], resume.first_step_bytes),
    )
    cells = []
    for phase, peak, estimated in rows:
        diff = estimated - peak
        cells.append(
            (phase, f"{peak / GiB:.2f}", f"{estimated / GiB:.2f}", f"{diff / GiB:+.2f} ({diff / peak:+.1%})")
        )
    title = f"resume from a {m['format']} checkpoint (fresh process), GiB"
    print_table(console, RESUME_COLUMNS, cells, title=title)
    print_text(
        console,
        f"[dim]allocated before the load {m['allocated_before_load'] / GiB:.2f}, "
        f"after it {m['allocated_after_load'] / GiB:.2f}[/dim]",
    )
