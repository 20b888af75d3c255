"""Tables that fit the terminal: every command's table goes through :func:`print_table`.

A table is given at its natural width; when that is wider than the console (80 columns when the
output is piped), the lowest-priority columns are left out one by one, as uv and rich-based tools
do, and one dim line names what was left out. Lines carry no trailing blanks, so output piped to a
file is what a terminal of that width shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# A column that is never left out (the row's name, the figure the table is about).
ALWAYS = 100


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "right"  # "left" for names and labels
    keep: int = ALWAYS  # columns with the lowest ``keep`` are left out first when space runs short
    wrap: bool = False  # may wrap once no column is left to leave out (others are never cut)


def print_table(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    row_styles: Sequence[str] | None = None,
) -> None:
    """Print ``rows`` under ``title`` with as many ``columns`` as fit ``console.width``."""
    shown = list(range(len(columns)))
    table = _table(columns, shown, rows, row_styles)
    while _width(console, table) > console.width:
        droppable = [i for i in shown if columns[i].keep < ALWAYS]
        if not droppable:
            break  # the wrapping column (if any) takes what is left
        gone = min(droppable, key=lambda i: (columns[i].keep, -i))
        shown.remove(gone)
        table = _table(columns, shown, rows, row_styles)
    if title:
        print_lines(console, Text(title, style="bold"))
    print_lines(console, table)
    if dropped := [c.header for i, c in enumerate(columns) if i not in shown]:
        print_text(console, f"[dim]not shown at {console.width} columns: {', '.join(dropped)}[/dim]")


def print_text(console: Console, markup: str) -> None:
    """Print rich ``markup`` wrapped at the console's width, without trailing blanks."""
    print_lines(console, Text.from_markup(markup))


def print_lines(console: Console, renderable: RenderableType) -> None:
    """Print ``renderable`` at the console's width with trailing blanks removed from every line."""
    for line in console.render_lines(renderable, console.options, pad=False):
        text = Text.assemble(*((s.text, s.style or "") for s in line if not s.control))
        text.rstrip()
        console.print(text, no_wrap=True, crop=False)


def _table(
    columns: Sequence[Column],
    shown: list[int],
    rows: Sequence[Sequence[str]],
    row_styles: Sequence[str] | None,
) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        header_style="bold",
    )
    for i in shown:
        c = columns[i]
        table.add_column(c.header, justify="left" if c.justify == "left" else "right", no_wrap=not c.wrap)
    for n, row in enumerate(rows):
        table.add_row(*(row[i] for i in shown), style=row_styles[n] if row_styles else None)
    return table


def _width(console: Console, table: Table) -> int:
    wide = console.options.update(width=10_000)
    return Measurement.get(console, wide, table).maximum
