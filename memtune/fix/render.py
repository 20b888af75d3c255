"""``memtune fix``'s output (and the ranked list ``memtune run`` prints when a run fails): the
failing rank and phase, expandable segments first where they lead, the suggestions cheapest
first, every other remedy tried with what it saves and costs, and what was never tried, at the
console's width."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from memtune.config.changes import Change
from memtune.estimate import Estimate
from memtune.fix.search import FITS, FixResult, Tried, judged_peak
from memtune.tables import print_lines, print_text
from memtune.units import gib, human

_NOT_CHOSEN_SHOWN = 14


def render(result: FixResult, label: str | None, console: Console) -> None:
    print_text(console, escape(headline(result, label)))
    if result.fits_already:
        est = result.before
        spare = est.capacity_bytes - est.needed_bytes(est.ranks[result.failing_rank])
        print_text(
            console, f"It fits with {human(spare)} to spare beyond the verdict's margins: nothing to change."
        )
        if not result.headroom_bytes:
            print_text(console, "[dim]--headroom GIB asks for changes that leave that much free[/dim]")
        return
    print_suggestions(result, console)
    print_not_chosen(result, console)
    print_text(
        console,
        "[dim]savings on the failing rank at the judged phase; throughput predicted by memtune's "
        "step model (docs/plan.md; --json lists its assumptions)[/dim]",
    )


def headline(result: FixResult, label: str | None) -> str:
    est = result.before
    rank = est.ranks[result.failing_rank]
    which = "Most-loaded rank" if est.verdict() == "fits" else "Failing rank"
    return (
        f"{which}: pipeline rank {result.failing_rank} ({result.phase}), peak "
        f"{gib(judged_peak(est, result.failing_rank))} GiB, needs {gib(est.needed_bytes(rank))} of "
        f"{gib(est.capacity_bytes)} GiB ({est.verdict()})" + (f"; logs: {label}" if label else "")
    )


def print_suggestions(result: FixResult, console: Console) -> None:
    """The warnings and the ranked suggestions, the part ``memtune run`` shares."""
    for warning in result.warnings:
        print_text(console, f"[yellow]warning:[/yellow] {escape(warning)}")
    rest = [s for s in result.suggestions if s is not result.lead]
    if result.lead is not None:
        _suggestion(console, 1, result.lead, result, lead=True)
        if rest:
            console.print()
            print_text(console, "[bold]Then one of these, with expandable segments on:[/bold]")
    if not rest and (result.lead is None or result.lead.status != FITS):
        console.print()
        print_text(console, "[bold red]No single change or pair of changes makes it fit.[/bold red]")
    first = 2 if result.lead is not None else 1
    for i, s in enumerate(rest, first):
        _suggestion(console, i, s, result, last_resort=len(rest) == 1)


def _suggestion(
    console: Console, number: int, s: Tried, result: FixResult, lead: bool = False, last_resort: bool = False
) -> None:
    console.print()
    title = f"{number}. {s.title}"
    if lead:
        title += ": first, at zero cost"
    elif last_resort and all(f == "tensor-parallel" for f in s.families):
        title += " (nothing else fits: more tensor parallelism is the last resort)"
    # a long title (a pair) wraps under its own text, past the number
    _indented(console, Text(title, style="bold"), 0, hanging=len(f"{number}. "))
    _indented(console, Text(effect(s, result, lead)), 3)
    shown = s.changes if lead or result.lead is None else _own_changes(s, result.lead)
    _indented(console, Text(" ".join(str(c) for c in shown)), 3, hanging=4)
    for r in s.remedies:
        _indented(console, Text(f"why: {r.why}; cost: {r.cost}", style="dim"), 3, hanging=2)
    for effect_ in s.side_effects:
        _indented(console, Text(f"beyond throughput: {effect_}", style="yellow"), 3, hanging=2)


def _own_changes(s: Tried, lead: Tried) -> tuple[Change, ...]:
    led = {str(c) for c in lead.changes}
    return tuple(c for c in s.changes if str(c) not in led)


def price(s: Tried) -> str:
    if s.throughput_change is None:
        return f"price unknown ({s.unpriced})"
    return f"predicted throughput {s.throughput_change:+.1%}"


def effect(s: Tried, result: FixResult, lead: bool = False) -> str:
    """What the remedy does to the failing rank, in words."""
    est = s.estimate
    assert est is not None and s.saved_bytes is not None
    verdict = s.reason if s.status != FITS else "now fits"
    if s.status == FITS and result.headroom_bytes:
        verdict += f" with {human(_spare(est))} to spare"
    if lead:
        before = result.before
        return (
            f"changes no peak: the fragmentation margin drops {before.margin:.0%} → {est.margin:.0%}; "
            f"{verdict}; {price(s)}"
        )
    peak = judged_peak(result.before, result.failing_rank)
    return (
        f"saves {human(s.saved_bytes)} on the failing rank ({gib(peak)} → {gib(peak - s.saved_bytes)}), "
        f"{verdict}; {price(s)}"
    )


def _spare(est: Estimate) -> int:
    return est.capacity_bytes - est.needed_bytes(max(est.ranks, key=est.verdict_peak_bytes))


def not_chosen_line(s: Tried) -> str:
    """One tried remedy that is not proposed: its saving and price, or why it is not offered."""
    if s.status == "refused":
        return f"{s.title}: refused by memtune check: {s.reason}"
    if s.status == "warned":
        return f"{s.title}: memtune check warns: {s.reason}"
    saved = f"saves {human(s.saved_bytes or 0)}" if (s.saved_bytes or 0) >= 0 else s.reason
    head = "fits" if s.status == FITS else ("no effect" if s.status == "no effect" else "not enough")
    tail = "" if s.status in (FITS, "no effect") else f"; {s.reason}"
    if s.status == "no effect":
        return f"{s.title}: {head}: {s.reason}; {price(s)}"
    return f"{s.title}: {head}: {saved}, {price(s)}{tail}"


def print_not_chosen(result: FixResult, console: Console) -> None:
    if result.not_chosen:
        console.print()
        print_text(console, "[bold]Not chosen[/bold]")
        for s in result.not_chosen[:_NOT_CHOSEN_SHOWN]:
            _indented(console, Text(not_chosen_line(s)), 2, hanging=2)
        if len(result.not_chosen) > _NOT_CHOSEN_SHOWN:
            more = len(result.not_chosen) - _NOT_CHOSEN_SHOWN
            print_text(console, f"  [dim]... {more} more (--json lists all)[/dim]")
    if result.notes:
        console.print()
        print_text(console, "[bold]Not tried[/bold]")
        for title, why in result.notes:
            _indented(console, Text(f"{title}: {why}"), 2, hanging=2)


def _indented(console: Console, text: Text, indent: int, hanging: int = 0) -> None:
    """``text`` wrapped ``indent`` columns in, its continuation lines ``hanging`` further in."""
    for n, line in enumerate(text.wrap(console, max(20, console.width - indent - hanging))):
        print_lines(console, Text(" " * (indent + (hanging if n else 0))) + line)
