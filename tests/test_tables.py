"""Tables fit the console: the lowest-priority columns give way, one line says which."""

from __future__ import annotations

import re
from io import StringIO

from rich.console import Console

from memtune.tables import Column, print_table

COLUMNS = [
    Column("name", "left"),
    Column("size"),
    Column("detail", "left", keep=20),
    Column("share", keep=10),
]
ROWS = [["alpha", "12.50", "the long explanation", "50.0%"], ["b", "1.00", "short", "4.0%"]]


def _printed(width: int) -> list[str]:
    out = StringIO()
    print_table(Console(file=out, width=width), COLUMNS, ROWS, title="Sizes of things, GiB")
    return out.getvalue().splitlines()


def test_everything_at_its_natural_width():
    assert _printed(80) == [
        "Sizes of things, GiB",
        "name    size  detail                share",
        "─────────────────────────────────────────",
        "alpha  12.50  the long explanation  50.0%",
        "b       1.00  short                  4.0%",
    ]


def test_the_lowest_priority_goes_first_and_is_named():
    assert _printed(36)[1:] == [
        "name    size  detail",
        "──────────────────────────────────",
        "alpha  12.50  the long explanation",
        "b       1.00  short",
        "not shown at 36 columns: share",
    ]
    narrow = _printed(24)
    assert narrow[1:3] == ["name    size", "────────────"]
    assert " ".join(narrow[-2:]) == "not shown at 24 columns: detail, share"


def test_a_terminal_shows_what_a_pipe_gets_but_in_colour():
    piped, terminal = StringIO(), StringIO()
    print_table(Console(file=piped, width=36), COLUMNS, ROWS, title="Sizes of things, GiB")
    print_table(
        Console(file=terminal, width=36, force_terminal=True), COLUMNS, ROWS, title="Sizes of things, GiB"
    )
    assert "\x1b[" in terminal.getvalue() and "\x1b[" not in piped.getvalue()
    assert re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue()) == piped.getvalue()
