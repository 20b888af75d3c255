"""Rendering a Diagnosis: a rich terminal report and a JSON document (same content)."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from memtune.diagnose import Diagnosis
from memtune.diagnose.messages import AllocatorNumbers
from memtune.diagnose.sizes import gib
from memtune.diagnose.snapshot import SnapshotSummary
from memtune.output import SCHEMA_VERSION
from memtune.tables import Column, print_lines, print_table, print_wrapped
from memtune.units import MiB

MAX_RANK_ROWS = 16
_STYLE = {
    "fragmentation": "yellow",
    "capacity": "red",
    "outside_pytorch": "magenta",
    "host_oom": "cyan",
    "configuration": "blue",
    "not_oom": "green",
}


def _numbers_line(n: AllocatorNumbers | None) -> str:
    if n is None:
        return ""
    parts = [
        (label, value)
        for label, value in (
            ("req", n.requested),
            ("free", n.free),
            ("alloc", n.allocated),
            ("unalloc", n.unallocated),
            ("pools", n.private_pools),
            ("total", n.total),
        )
        if value is not None
    ]
    return "  ".join(f"{label} {gib(value)}" for label, value in parts)


def to_json(d: Diagnosis) -> dict[str, Any]:
    v = d.verdict
    return {
        "schema_version": SCHEMA_VERSION,
        "label": v.label,
        "confidence": v.confidence,
        "reasons": v.reasons,
        "failed_ranks": v.failed_ranks,
        "known_ranks": v.known_ranks,
        "expandable_segments": {"on": v.expandable.on, "source": v.expandable.source},
        "ranks": [
            {
                "rank": r.rank,
                "label": r.label,
                "reasons": list(r.reasons),
                "evidence": {
                    "source": r.root.failure.where.source,
                    "line": r.root.failure.where.line,
                    "kind": r.root.failure.kind,
                    "text": r.root.failure.text,
                },
                "numbers": _numbers_json(r.root.failure.numbers),
                "other_findings": len(r.others),
            }
            for r in v.ranks
        ],
        "snapshot": _snapshot_json(d),
        "fixes": [
            {
                "title": f.title,
                "changes": list(f.changes),
                "why": f.why,
                "cost": f.cost,
                "saves_bytes": f.saves_bytes,
                "saves_note": f.saves_note,
                "fallback": f.fallback,
            }
            for f in d.fixes
        ],
        "sources": [
            {"name": s.name, "bytes": s.bytes_read, "lines": s.lines, "note": s.note} for s in d.scan.sources
        ],
        "suppressed_findings": dict(d.scan.suppressed),
        "units": "bytes",
    }


def _numbers_json(n: AllocatorNumbers | None) -> dict[str, Any] | None:
    if n is None:
        return None
    return {
        "requested": n.requested,
        "device": n.device,
        "total": n.total,
        "free": n.free,
        "allocated": n.allocated,
        "unallocated": n.unallocated,
        "private_pools": n.private_pools,
        "allowed": n.allowed,
        "this_process": n.this_process,
        "other_processes": {str(k): v for k, v in n.other_processes.items()},
        "outside_allocator": n.outside_allocator,
        "backend": n.backend,
        "format": n.format,
    }


def _snapshot_json(d: Diagnosis) -> dict[str, Any] | None:
    s = d.snapshot
    if s is None:
        return None
    return {
        "source": s.source,
        "label": s.label,
        "reasons": s.reasons,
        "reserved": s.reserved,
        "allocated": s.allocated,
        "inactive": s.inactive,
        "fragmented": s.fragmented,
        "fragmentation_ratio": round(s.fragmentation_ratio, 4),
        "largest_free_block": s.largest_free_block,
        "segments": s.segments,
        "segment_sizes": [{"size": size, "count": n} for size, n in s.segment_sizes],
        "private_pool_reserved": s.private_pool_reserved,
        "expandable_segments": s.expandable_segments,
        "allocator_settings": s.allocator_settings,
        "failed_request": None
        if s.failed_request is None
        else {
            "device": s.failed_request.device,
            "size": s.failed_request.size,
            "device_free": s.failed_request.device_free,
        },
        "top_sites": [{"frame": t.frame, "bytes": t.bytes, "blocks": t.blocks} for t in s.top_sites],
    }


def render(d: Diagnosis, console: Console, advice: bool = True) -> None:
    """The report; without ``advice`` when the caller prints ``memtune fix``'s ranked list instead."""
    v = d.verdict
    if v.label is None:
        headline = Text("no failure found", style="bold")
    else:
        headline = Text.assemble(
            ("diagnosis: ", "bold"),
            (v.label, f"bold {_STYLE.get(v.label, '')}"),
            (f"  ({v.confidence} confidence)", "dim"),
        )
    why = Text("\n".join(f"• {reason}" for reason in v.reasons))
    print_lines(console, Panel(Group(headline, why), title="memtune diagnose", expand=False))
    if v.ranks:
        _print_ranks(d, console)
    if d.snapshot:
        _print_snapshot(console, d.snapshot)
    if d.fixes and advice:
        _print_fixes(console, d)
    skipped = [s for s in d.scan.sources if s.note]
    total = sum(s.bytes_read for s in d.scan.sources)
    lines = sum(s.lines for s in d.scan.sources)
    footer = f"read {len(d.scan.sources)} input(s), {total / MiB:.1f} MiB, {lines} lines; GiB = 2^30 bytes"
    print_lines(console, Text(footer, style="dim"))
    for s in skipped:
        print_lines(console, Text(f"{s.name}: {s.note}", style="dim"))
    if d.scan.suppressed:
        print_lines(
            console,
            Text(
                "repeated findings not listed: "
                + ", ".join(f"{k} ×{n}" for k, n in d.scan.suppressed.items()),
                style="dim",
            ),
        )


# The rank, what it ran out of and where the log says so define a row; a long path is shortened
# in the middle (its file name and :line kept), and the kind of finding gives way first.
_RANK_COLUMNS = (
    Column("rank"),
    Column("verdict", "left"),
    Column("evidence", "left", path=True),
    Column("kind", "left", keep=40),
    Column("numbers", "left", wrap=True),
)


def _print_ranks(d: Diagnosis, console: Console) -> None:
    rows = d.verdict.ranks
    cells = [
        (
            "—" if r.rank is None else str(r.rank),
            r.label,
            f"{r.root.failure.where.source}:{r.root.failure.where.line}",
            r.root.failure.kind,
            _numbers_line(r.root.failure.numbers) or r.root.failure.text[:90],
        )
        for r in rows[:MAX_RANK_ROWS]
    ]
    if len(rows) > MAX_RANK_ROWS:
        cells.append(("…", f"{len(rows) - MAX_RANK_ROWS} more", "", "", ""))
    styles = [_STYLE.get(r.label, "") for r in rows[:MAX_RANK_ROWS]] + [""] * (
        len(cells) - len(rows[:MAX_RANK_ROWS])
    )
    print_table(console, _RANK_COLUMNS, cells, title="per rank", row_styles=styles)


_SNAPSHOT_COLUMNS = (Column("", "left"), Column("", "left", wrap=True))
_SITE_COLUMNS = (Column("bytes"), Column("blocks", keep=50), Column("site", "left", wrap=True))


def _print_snapshot(console: Console, s: SnapshotSummary) -> None:
    req = s.failed_request
    rows = [
        ("reserved / allocated", f"{gib(s.reserved)} / {gib(s.allocated)}"),
        (
            "free inside segments",
            f"{gib(s.inactive)} (stranded next to live blocks: {gib(s.fragmented)}, "
            f"ratio {s.fragmentation_ratio:.1%} of reserved)",
        ),
        (
            "largest free block",
            gib(s.largest_free_block) + (f" vs failed request {gib(req.size)}" if req else ""),
        ),
        ("segments", f"{s.segments}: " + ", ".join(f"{n}×{gib(size)}" for size, n in s.segment_sizes)),
        ("private pools", gib(s.private_pool_reserved)),
        (
            "allocator settings",
            ", ".join(f"{k}={v}" for k, v in s.allocator_settings.items()) or "not recorded",
        ),
    ]
    print_table(console, _SNAPSHOT_COLUMNS, rows, title=f"snapshot {s.source}")
    if s.top_sites:
        sites = [(gib(site.bytes), str(site.blocks), site.frame) for site in s.top_sites]
        print_table(console, _SITE_COLUMNS, sites, title="top allocation sites (live bytes)")


def _print_fixes(console: Console, d: Diagnosis) -> None:
    print_lines(console, Text("what to change, cheapest first", style="bold"))
    shown_fallback = False
    for i, fix in enumerate(d.fixes, 1):
        if fix.fallback and not shown_fallback:
            print_lines(console, Text("  if that is not enough:", style="dim"))
            shown_fallback = True
        head = Text.assemble((f"{i:>2}. ", "bold"), (fix.title, "bold"), (f"  cost: {fix.cost}", "dim"))
        if fix.saves_bytes is not None:
            verb = "recovers up to" if fix.saves_note.startswith("recovers") else "saves"
            head.append(f"  {verb} {gib(fix.saves_bytes)}", style="green")
        elif fix.saves_note:
            head.append(f"  ({fix.saves_note})", style="dim")
        print_wrapped(console, head, hanging=4)
        for change in fix.changes:
            print_wrapped(console, Text(f"      {change}", style="cyan"), hanging=8)
        print_wrapped(console, Text(f"      {fix.why}", style="dim"), hanging=6)
