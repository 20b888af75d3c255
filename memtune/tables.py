"""Tables that fit the terminal: every command's table goes through :func:`print_table`.

A table is given at its natural width. When that is wider than the console (80 columns when the
output is piped), the columns the row is not defined by are left out one by one, lowest priority
first, as uv and rich-based tools do, and one dim line names what was left out; then text columns
wrap between words and paths are shortened in the middle (their ``:line`` kept). A column that
defines the row (a layout, its recompute, a rank) is never left out and a number is never cut:
when even that does not fit, each row is printed as stacked ``key: value`` lines instead, every
column shown. Lines carry no trailing blanks, so output piped to a file is what a terminal of that
width shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# A column that defines the row and is never left out (its name, the figure the table is about,
# what tells one layout from another).
ALWAYS = 100
# A text column wraps no narrower than this (or its widest word that must stay whole): narrower
# it reads worse than the stacked layout.
WRAP_FLOOR = 12
# A path column is shortened no narrower than this.
PATH_FLOOR = 24
STACK_INDENT = "  "  # a stacked row's continuation lines
STACK_GAP = "  "  # between two key: value pairs on one line
ELLIPSIS = "…"

Cell = str | Text


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "right"  # "left" for names and labels
    keep: int = ALWAYS  # below ALWAYS: left out when space runs short, the lowest first
    wrap: bool = False  # text that may wrap between words; a long name folds, a number never breaks
    path: bool = False  # a file path (with its :line): shortened in the middle, never at the end

    @property
    def defines(self) -> bool:
        """The row is defined by this column: it is never left out."""
        return self.keep >= ALWAYS


@dataclass(frozen=True)
class Fit:
    """How a table is printed at a width: the columns shown and their widths, or stacked."""

    width: int
    shown: tuple[int, ...]  # indices of the columns shown (all of them when stacked)
    widths: tuple[int, ...]  # per shown column, its cells' width (not when stacked)
    stacked: bool = False

    def dropped(self, columns: Sequence[Column]) -> list[str]:
        return [c.header for i, c in enumerate(columns) if i not in self.shown]


def print_table(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    *,
    title: str | None = None,
    row_styles: Sequence[str] | None = None,
) -> None:
    """Print ``rows`` under ``title`` so that every line fits ``console.width``."""
    fit = fit_table(console.width, columns, rows)
    if title:
        print_lines(console, Text(title, style="bold"))
    if fit.stacked:
        _print_stacked(console, columns, rows, row_styles)
    else:
        print_lines(console, _table(columns, fit, rows, row_styles))
    if dropped := fit.dropped(columns):
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


def print_wrapped(console: Console, line: str | Text, hanging: int | None = None) -> None:
    """``line`` wrapped between words at the console's width, its continuation lines indented
    ``hanging`` columns (default: two past its own indent); a word longer than the width folds."""
    text = Text(line) if isinstance(line, str) else line
    indent = " " * (hanging if hanging is not None else len(text.plain) - len(text.plain.lstrip(" ")) + 2)
    first, *_ = text.wrap(console, console.width)
    print_lines(console, first)
    rest = text[len(first.plain) :]
    rest = rest[len(rest.plain) - len(rest.plain.lstrip()) :]
    if rest.plain:
        for part in rest.wrap(console, max(1, console.width - len(indent))):
            print_lines(console, Text(indent) + part)


def shorten_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, its middle replaced by an ellipsis: a path keeps its
    file name and ``:line`` (the end), and as much of its start as fits."""
    if cell_len(text) <= width:
        return text
    name = text[text.rfind("/") + 1 :]
    tail = max(min(len(name), width - 1), (width - 1) * 2 // 3)
    head = width - 1 - tail
    return text[:head] + ELLIPSIS + text[len(text) - tail :]


def fit_table(width: int, columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> Fit:
    """The columns shown at ``width`` and their widths: non-defining columns left out while the
    table is wider than ``width``, then text wrapped and paths shortened down to their floors;
    stacked when the defining columns do not fit even so."""
    natural = [_natural(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    least = [_least(c, [r[i] for r in rows], natural[i]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))

    def total(widths: list[int]) -> int:
        return sum(widths[i] for i in shown) + _gaps(len(shown))

    while total(natural) > width:
        droppable = [i for i in shown if not columns[i].defines]
        if not droppable:
            break
        shown.remove(min(droppable, key=lambda i: (columns[i].keep, -i)))
    if total(least) > width:
        return Fit(width, tuple(range(len(columns))), (), stacked=True)
    widths = {i: natural[i] for i in shown}
    excess = total(natural) - width
    # Shrink the text and path columns, the widest first, one cell at a time down to their floors.
    while excess > 0:
        i = max((i for i in shown if widths[i] > least[i]), key=lambda i: (widths[i], -i))
        widths[i] -= 1
        excess -= 1
    return Fit(width, tuple(shown), tuple(widths[i] for i in shown))


def _text(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _has_digit(word: str) -> bool:
    return any(ch.isdigit() for ch in word)


def _natural(column: Column, cells: list[Cell]) -> int:
    return max([cell_len(column.header), *(cell_len(_text(c)) for c in cells)])


def _least(column: Column, cells: list[Cell], natural: int) -> int:
    """The narrowest the column may be: its widest word when it wraps, its floor for a path."""
    if column.path:
        return min(natural, max(PATH_FLOOR, cell_len(column.header)))
    if column.wrap:
        # A word with a digit in it, or any word of a column that defines the row, is never
        # broken; a longer name in another column folds onto the next line.
        words = [w for c in [column.header, *map(_text, cells)] for w in c.split()]
        whole = [cell_len(w) for w in words if column.defines or _has_digit(w)]
        return min(natural, max([WRAP_FLOOR, *whole]))
    return natural


@cache
def _gaps(n: int) -> int:
    """What ``n`` columns add to their cells' widths (the padding between them)."""
    table = _new_table()
    for _ in range(n):
        table.add_column(no_wrap=True)
    table.add_row(*(["x"] * n))
    console = Console(width=10_000)
    return Measurement.get(console, console.options, table).maximum - n


def _new_table() -> Table:
    return Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        header_style="bold",
    )


def _cell(cell: Cell, column: Column, width: int) -> Text:
    text = cell.copy() if isinstance(cell, Text) else Text(cell)
    if column.path and text.cell_len > width:
        return Text(shorten_middle(text.plain, width), style=text.style)
    return text


def _table(
    columns: Sequence[Column],
    fit: Fit,
    rows: Sequence[Sequence[Cell]],
    row_styles: Sequence[str] | None,
) -> Table:
    table = _new_table()
    for i, width in zip(fit.shown, fit.widths, strict=True):
        c = columns[i]
        table.add_column(
            c.header,
            justify="left" if c.justify == "left" else "right",
            no_wrap=not c.wrap,
            overflow="fold",  # a word longer than its column goes on, never "…"
            width=width,
        )
    for n, row in enumerate(rows):
        cells = [_cell(row[i], columns[i], w) for i, w in zip(fit.shown, fit.widths, strict=True)]
        table.add_row(*cells, style=row_styles[n] if row_styles else None)
    return table


def _print_stacked(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    row_styles: Sequence[str] | None,
) -> None:
    """Each row as ``key: value`` pairs packed into lines of the console's width, its first
    line flush left and the rest indented; a pair is never split, only a text value wraps."""
    room = console.width - len(STACK_INDENT)
    for n, row in enumerate(rows):
        style = row_styles[n] if row_styles else ""
        lines: list[Text] = []
        for i, column in enumerate(columns):
            value = _text(row[i])
            if not value:
                continue
            key = f"{column.header}: " if column.header else ""
            if column.path:
                shown = Text(shorten_middle(value, max(room - cell_len(key), PATH_FLOOR)))
            else:
                cell = row[i]
                shown = cell.copy() if isinstance(cell, Text) else Text(value)
            pair = Text(key, style="dim") + shown
            limit = console.width if len(lines) == 1 else room
            if lines and lines[-1].cell_len + len(STACK_GAP) + pair.cell_len <= limit:
                lines[-1] += Text(STACK_GAP) + pair
            elif column.wrap and pair.cell_len > room:
                lines += list(pair.wrap(console, room))
            else:
                lines.append(pair)
        for k, line in enumerate(lines):
            line.stylize(style)
            print_lines(console, Text(STACK_INDENT if k else "") + line)
