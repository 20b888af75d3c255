"""``memtune report``'s output: the per-rank table, the findings, JSON, and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from memtune.plotfile import save_figure
from memtune.runtime.records import MonitorRun
from memtune.runtime.report import Report
from memtune.tables import Column, print_table, print_text
from memtune.units import GiB, gib


def _cell(nbytes: int | None) -> str:
    return "—" if nbytes is None else gib(nbytes)


# The measured peak and its estimate are the point; the device-level figure, the reserved peak,
# the step count and the pipeline rank give way in that order on a narrow terminal.
_COLUMNS = (
    Column("rank"),
    Column("pp", keep=20),
    Column("steps", keep=30),
    Column("allocated"),
    Column("reserved", keep=40),
    Column("device", keep=35),
    Column("retries", keep=50),
    Column("estimate"),
    Column("diff"),
)


def render(report: Report, console: Console) -> None:
    rows = []
    for row in report.rows:
        diff = row.difference_bytes
        fraction = row.difference_fraction
        rows.append(
            (
                str(row.rank),
                "—" if row.pp_rank is None else str(row.pp_rank),
                str(row.steps),
                _cell(row.peak_allocated_bytes),
                _cell(row.peak_reserved_bytes),
                _cell(row.device_used_bytes),
                "—" if row.num_alloc_retries is None else str(row.num_alloc_retries),
                _cell(row.estimate_bytes),
                "—" if diff is None or fraction is None else f"{diff / GiB:+.2f} ({100 * fraction:+.1f}%)",
            )
        )
    print_table(console, _COLUMNS, rows, title="Measured peak vs estimate per rank, GiB (2^30 bytes)")
    print_text(
        console,
        "[dim]allocated and reserved: the allocator's peaks; device: NVML's use of the whole GPU. Peaks "
        "leave out each process's first step; estimate from "
        + escape(report.estimate_source or "nowhere (give --config)")
        + "[/dim]",
    )
    if not report.findings:
        print_text(console, "no growth, resume jump, allocation retries or outlier rank found")
    for finding in report.findings:
        print_text(console, f"• {escape(finding.message)}")


def to_json(report: Report) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "estimate_source": report.estimate_source,
        "ranks": [
            {
                "rank": r.rank,
                "pp_rank": r.pp_rank,
                "steps": r.steps,
                "peak_allocated_bytes": r.peak_allocated_bytes,
                "peak_reserved_bytes": r.peak_reserved_bytes,
                "device_used_bytes": r.device_used_bytes,
                "num_alloc_retries": r.num_alloc_retries,
                "estimate_bytes": r.estimate_bytes,
                "difference_bytes": r.difference_bytes,
            }
            for r in report.rows
        ],
        "findings": [
            {"kind": f.kind, "rank": f.rank, "steps": list(f.steps), "message": f.message}
            for f in report.findings
        ],
    }


def plot(run: MonitorRun, report: Report, path: str | Path) -> None:
    """Peak allocated and reserved per rank over the steps, the estimate dashed, resumes dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    estimates = {row.rank: row.estimate_bytes for row in report.rows}
    for rank, records in sorted(run.ranks.items()):
        steps = records.steps
        for ax, key in zip(axes, ("peak_allocated_bytes", "peak_reserved_bytes")):
            points = [(s["step"], s[key] / GiB) for s in steps if s.get(key) is not None]
            if points:
                xs, ys = zip(*points)
                line = ax.plot(xs, ys, label=f"rank {rank}", linewidth=1)[0]
                expected = estimates.get(rank)
                if key == "peak_allocated_bytes" and expected is not None:
                    ax.axhline(expected / GiB, color=line.get_color(), linestyle="--", linewidth=0.8)
        for segment in records.segments:
            if segment.resumed_at is not None:
                for ax in axes:
                    ax.axvline(segment.resumed_at, color="grey", linestyle=":", linewidth=0.8)
    axes[0].set_ylabel("peak allocated (GiB)")
    axes[1].set_ylabel("peak reserved (GiB)")
    axes[1].set_xlabel("step")
    axes[0].set_title("memory per rank per step (dashed: estimate; dotted: resume)")
    if len(run.ranks) <= 16:
        axes[0].legend(fontsize="small", ncol=4)
    fig.tight_layout()
    save_figure(fig, str(path), dpi=110)
    plt.close(fig)
