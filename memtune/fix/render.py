"""``memtune fix``'s output (and the ranked list ``memtune run`` prints when a run fails): the
failing rank, the suggestions cheapest first, and what was not chosen, at the console's width."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from memtune.fix.search import FixResult, Suggestion
from memtune.tables import print_lines, print_text
from memtune.units import GiB

_NOT_CHOSEN_SHOWN = 12


def render(result: FixResult, label: str | None, console: Console) -> None:
    est = result.before
    worst = est.worst
    print_text(
        console,
        f"Failing rank: pipeline rank {result.failing_rank}, peak {worst.peak_bytes / GiB:.2f} GiB, needs "
        f"{est.needed_bytes(worst) / GiB:.2f} of {est.capacity_bytes / GiB:.2f} GiB ({est.verdict()})"
        + (f"; logs: {escape(label)}" if label else ""),
    )
    print_suggestions(result, console)
    if result.not_chosen:
        console.print()
        print_text(console, "[bold]Not chosen[/bold]")
        for title, why in result.not_chosen[:_NOT_CHOSEN_SHOWN]:
            _indented(console, Text(f"{title}: {why}"), 2, hanging=2)
        if len(result.not_chosen) > _NOT_CHOSEN_SHOWN:
            more = len(result.not_chosen) - _NOT_CHOSEN_SHOWN
            print_text(console, f"  [dim]... {more} more (--json lists all)[/dim]")
    print_text(
        console,
        "[dim]throughput predicted by memtune's model (docs/plan.md; --json lists its assumptions)[/dim]",
    )


def print_suggestions(result: FixResult, console: Console) -> None:
    """The warnings and the ranked suggestions, the part ``memtune run`` shares."""
    for warning in result.warnings:
        print_text(console, f"[yellow]warning:[/yellow] {escape(warning)}")
    if not result.suggestions:
        print_text(console, "[bold red]No single change or pair of changes makes it fit.[/bold red]")
    for i, s in enumerate(result.suggestions, 1):
        console.print()
        title = f"{i}. {s.title}"
        if len(result.suggestions) == 1 and all(r.family == "tensor-parallel" for r in s.remedies):
            title += " (nothing else fits: more tensor parallelism is the last resort)"
        print_lines(console, Text(title, style="bold"))
        _indented(console, Text(_effect(result, s)), 3)
        _indented(console, Text(" ".join(str(c) for c in s.changes)), 3, hanging=4)
        for r in s.remedies:
            _indented(console, Text(f"why: {r.why}; cost: {r.cost}", style="dim"), 3, hanging=2)


def _effect(result: FixResult, s: Suggestion) -> str:
    before = result.before
    peak = before.ranks[result.failing_rank].peak_bytes
    verdict = s.estimate.verdict()
    throughput = f"predicted throughput {s.throughput_change:+.1%}"
    if s.saved_bytes == 0 and s.estimate.margin < before.margin:
        return (
            f"changes no peak: the fragmentation margin drops {before.margin:.0%} → {s.estimate.margin:.0%} "
            f"(needs {s.estimate.needed_bytes(s.estimate.worst) / GiB:.2f} GiB), now {verdict}; {throughput}"
        )
    return (
        f"saves {s.saved_bytes / GiB:.2f} GiB on the failing rank ({peak / GiB:.2f} → "
        f"{(peak - s.saved_bytes) / GiB:.2f}), now {verdict}; {throughput}"
    )


def _indented(console: Console, text: Text, indent: int, hanging: int = 0) -> None:
    """``text`` wrapped ``indent`` columns in, its continuation lines ``hanging`` further in."""
    for n, line in enumerate(text.wrap(console, max(20, console.width - indent - hanging))):
        print_lines(console, Text(" " * (indent + (hanging if n else 0))) + line)
