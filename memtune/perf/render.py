"""The simulated step as text, JSON and a Gantt chart per pipeline stage: formatting only, of what
:func:`memtune.perf.step.predict_step` returned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from memtune.output import SCHEMA_VERSION
from memtune.perf.step import StepPrediction
from memtune.perf.uncertainty import StepUncertainty
from memtune.plotfile import save_figure
from memtune.tables import Column, print_lines, print_table

COMPUTE = {"forward", "backward", "output wgrad", "optimizer"}


def step_json(p: StepPrediction, uncertainty: StepUncertainty | None = None) -> dict[str, Any]:
    sim = p.simulated
    return {
        "schema_version": SCHEMA_VERSION,
        "step_time_s": p.step_time_s,
        "step_time_uncertainty": None
        if uncertainty is None
        else {"relative": uncertainty.error, "family": uncertainty.family, "held_out_runs": uncertainty.runs},
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": p.model_tflops_per_gpu,
        "bubble_fraction": sim.bubble_fraction,
        "stages": [
            {"compute_s": c, "exposed_comm_s": e, "idle_s": i}
            for c, e, i in zip(sim.stage_compute_s, sim.stage_exposed_comm_s, sim.stage_idle_s, strict=True)
        ],
        "unmeasured": list(p.unmeasured),
    }


STAGE_COLUMNS = (Column("stage"), Column("compute s"), Column("exposed comm s"), Column("idle (bubble) s"))


def stage_rows(p: StepPrediction) -> list[tuple[str, str, str, str]]:
    """Per pipeline stage: its compute, the communication on its critical path and its idle time."""
    sim = p.simulated
    return [
        (str(r), f"{c:.3f}", f"{e:.3f}", f"{i:.3f}")
        for r, (c, e, i) in enumerate(
            zip(sim.stage_compute_s, sim.stage_exposed_comm_s, sim.stage_idle_s, strict=True)
        )
    ]


def busiest_stage(p: StepPrediction) -> int:
    """The stage with the least idle time (the one ``Simulated.bubble_fraction`` reads)."""
    idle = p.simulated.stage_idle_s
    return idle.index(min(idle))


def print_step(console: Console, p: StepPrediction, uncertainty: StepUncertainty) -> None:
    sim = p.simulated
    # two lines, so that no figure wraps at 80 columns
    print_lines(
        console,
        Text(f"step {p.step_time_s:.3f} s ± {uncertainty.error:.0%}, bubble {sim.bubble_fraction:.1%}"),
    )
    print_lines(
        console,
        Text(
            f"{p.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, {p.model_tflops_per_gpu:,.0f} model TFLOP/s per GPU"
        ),
    )
    print_table(console, STAGE_COLUMNS, stage_rows(p), title="Per pipeline stage (simulated)")
    for note in p.unmeasured:
        print_lines(console, Text(f"unmeasured: {note}"))
    print_lines(console, Text(uncertainty.basis()))


def plot_step(p: StepPrediction, path: str | Path) -> None:
    """One lane per stage (compute, exposed communication; idle is the gaps: the bubble) and a
    thin lane under it for the data-parallel stream."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim = p.simulated
    stages = len(sim.stage_compute_s)
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.7 * stages))
    colours = {"forward": "#4c72b0", "backward": "#55a868", "output wgrad": "#8172b2", "optimizer": "#937860"}
    for ev in sim.events:
        y = stages - 1 - ev.stage
        if ev.stream == "dp":
            ax.broken_barh([(ev.start, ev.end - ev.start)], (y - 0.45, 0.15), color="#dd8452")
        else:
            colour = colours.get(ev.kind, "#c44e52")  # exposed communication in red
            ax.broken_barh([(ev.start, ev.end - ev.start)], (y - 0.3, 0.65), color=colour)
    ax.set_yticks(range(stages), [f"stage {stages - 1 - y}" for y in range(stages)])
    ax.set_xlim(0, sim.step_s)
    ax.set_xlabel("seconds")
    ax.set_title(
        f"simulated step {p.step_time_s:.3f} s: forward (blue), backward (green), exposed comm (red), "
        f"DP stream (orange), idle = bubble (white)",
        fontsize="small",
    )
    fig.tight_layout()
    save_figure(fig, str(path), dpi=110)
    plt.close(fig)
