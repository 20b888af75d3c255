"""Rendering snapshot comparisons: lines that fit 80 columns, and a JSON document (same content)."""

from __future__ import annotations

from typing import Any

from memtune.diagnose.compare import Comparison, Delta, Profile, RankComparison
from memtune.limits import MAX_COMPARED_ROWS
from memtune.numbers import cut
from memtune.output import SCHEMA_VERSION
from memtune.units import GiB


def _gib(n: int) -> str:
    return f"{n / GiB:.2f}"


def _signed(n: int) -> str:
    return f"{n / GiB:+.2f}"


def _peak_line(label: str, p: Profile) -> str:
    when = f"during {p.peak_phase}" if p.traced else "at the snapshot (no trace recorded)"
    return f"{label} {cut(p.source, 44)}: peak {_gib(p.peak_bytes)} GiB {when}"


def _table(title: str, rows: list[Delta], width: int) -> list[str]:
    lines = [f"{title:<{width}} {'A':>8} {'B':>8} {'B−A':>8}"]
    shown = rows[:MAX_COMPARED_ROWS]
    for r in shown:
        lines.append(f"{cut(r.key, width):<{width}} {_gib(r.a):>8} {_gib(r.b):>8} {_signed(r.change):>8}")
    if len(rows) > len(shown):
        rest = rows[len(shown) :]
        lines.append(f"{f'… {len(rest)} more (--json lists all)':<{width}} {'':>8} {'':>8} "
                     f"{_signed(sum(r.change for r in rest)):>8}")  # fmt: skip
    return lines


def comparison_lines(c: Comparison) -> list[str]:
    growth = c.growth
    share = f" ({growth / c.a.peak_bytes:+.1%})" if c.a.peak_bytes else ""
    lines = [
        _peak_line("A", c.a),
        _peak_line("B", c.b),
        f"B − A at the peak: {_signed(growth)} GiB{share}. GiB (2^30 B), blocks live at each peak.",
        "",
        *_table("by category", c.categories, 50),
        "",
        *_table("by phase (when the block was allocated)", c.phases, 50),
        "",
        *_table("by allocation site", c.sites, 50),
    ]
    return lines


def _delta_json(rows: list[Delta]) -> list[dict[str, Any]]:
    return [{"key": r.key, "a_bytes": r.a, "b_bytes": r.b, "change_bytes": r.change} for r in rows]


def _profile_json(p: Profile) -> dict[str, Any]:
    return {
        "source": p.source,
        "rank": p.rank,
        "peak_bytes": p.peak_bytes,
        "snapshot_bytes": p.snapshot_bytes,
        "peak_phase": p.peak_phase,
        "traced": p.traced,
    }


def comparison_json(c: Comparison) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "a": _profile_json(c.a),
        "b": _profile_json(c.b),
        "growth_bytes": c.growth,
        "categories": _delta_json(c.categories),
        "phases": _delta_json(c.phases),
        "sites": _delta_json(c.sites),
    }


def ranks_lines(r: RankComparison) -> list[str]:
    lines = [f"{'rank':>5} {'peak GiB':>9}  phase of peak  snapshot"]
    for p in r.profiles:
        mark = " highest" if p is r.highest else " median" if p is r.median else ""
        lines.append(f"{p.rank:>5} {_gib(p.peak_bytes):>9}  {p.peak_phase:<13}  {cut(p.source, 40)}{mark}")
    lines += ["", f"rank {r.highest.rank} (highest) against rank {r.median.rank} (median):", ""]
    return lines + comparison_lines(r.comparison)[3:]


def ranks_json(r: RankComparison) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "ranks": [_profile_json(p) for p in r.profiles],
        "highest_rank": r.highest.rank,
        "median_rank": r.median.rank,
        "comparison": comparison_json(r.comparison),
    }
