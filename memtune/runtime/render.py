"""``memtune report``'s output: the per-rank table, the findings, JSON, and the plot."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memtune.runtime.records import MonitorRun
from memtune.runtime.report import Report
from memtune.units import GiB, gib


def _cell(nbytes: int | None) -> str:
    return "—" if nbytes is None else gib(nbytes)


def render(report: Report, console: Console) -> None:
    table = Table(title="measured peak vs estimate per rank (GiB = 2^30 bytes)")
    for column in (
        "rank",
        "pp rank",
        "steps",
        "peak alloc",
        "peak reserved",
        "device used",
        "retries",
        "estimate",
        "diff",
    ):
        table.add_column(column, justify="right")
    for row in report.rows:
        diff = row.difference_bytes
        fraction = row.difference_fraction
        table.add_row(
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
    console.print(table)
    console.print(
        Text(
            "peaks leave out each process's first step; estimate from "
            + (report.estimate_source or "nowhere (give --config)"),
            style="dim",
        )
    )
    if not report.findings:
        console.print("no growth, resume jump, allocation retries or outlier rank found")
    for finding in report.findings:
        console.print(f"• {finding.message}", highlight=False)


def to_json(report: Report) -> dict:
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
