"""Tables fit the console: the lowest-priority columns give way, one line says which."""

from __future__ import annotations

import re
from io import StringIO

from rich.console import Console

from memtune.tables import Column, print_table, shorten_middle

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


def _lines(width: int, columns: list[Column], rows: list[list[str]]) -> list[str]:
    out = StringIO()
    print_table(Console(file=out, width=width), columns, rows)
    return out.getvalue().splitlines()


def test_when_the_defining_columns_do_not_fit_each_row_is_stacked_whole():
    columns = [
        Column("rank", "left"),
        Column("weights"),
        Column("peak"),
        Column("free"),
        Column("note", keep=10),
    ]
    rows = [["0", "187.38", "1874.06", "-1796.51", "x"], ["1", "12.00", "40.00", "39.11", "y"]]
    assert _lines(40, columns, rows)[2] == "0      187.38  1874.06  -1796.51     x"
    # Narrower, what the row is not defined by gives way and is named...
    assert _lines(33, columns, rows)[2:] == [
        "0      187.38  1874.06  -1796.51",
        "1       12.00    40.00     39.11",
        "not shown at 33 columns: note",
    ]
    # ...and below what the defining columns need, nothing is left out and nothing cut: each
    # row as key: value pairs, the first line flush left, the rest indented.
    assert _lines(24, columns, rows) == [
        "rank: 0  weights: 187.38",
        "  peak: 1874.06",
        "  free: -1796.51",
        "  note: x",
        "rank: 1  weights: 12.00",
        "  peak: 40.00",
        "  free: 39.11  note: y",
    ]


def test_a_path_is_shortened_in_its_middle_and_keeps_its_line():
    assert shorten_middle("/very/long/directory/of/logs/rank7.log:1234", 24) == "/very/lo…/rank7.log:1234"
    assert shorten_middle("short.log:7", 24) == "short.log:7"
    columns = [Column("rank"), Column("evidence", "left", path=True), Column("what", "left")]
    rows = [["7", "/very/long/directory/of/logs/" + "x" * 40 + "/rank7.log:1234", "capacity"]]
    (line,) = _lines(50, columns, rows)[2:]
    assert line.endswith("rank7.log:1234  capacity") and "…" in line and len(line) <= 50


def test_text_wraps_between_words_and_never_breaks_a_number():
    columns = [Column("#"), Column("layout", "left", wrap=True), Column("tok/s")]
    rows = [["1", "TP2 PP4 VPP8 EP1 MBS4 SP 1234567890123", "4,665"]]
    printed = _lines(30, columns, rows)
    assert all(len(line) <= 30 for line in printed)
    assert "1234567890123" in " ".join(printed) and "4,665" in printed[2]
