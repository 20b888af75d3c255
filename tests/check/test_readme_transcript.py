"""The README's `memtune check` transcript is what the command prints at 80 columns: its lines
before the `...` open the report (after the title line), and its last line ends it."""

from __future__ import annotations

import re
from pathlib import Path

from memtune.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_shows_what_check_prints(capsys, monkeypatch):
    (block,) = re.findall(r"```\n(\$ memtune check .*?)```", README.read_text(encoding="utf-8"), re.S)
    first, *shown = block.rstrip("\n").split("\n")
    head, tail = shown[: shown.index("...")], shown[shown.index("...") + 1 :]
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    assert main(first.removeprefix("$ ").split("  #")[0].split()[1:]) == 1  # the transcript's exit status
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"memtune check {first.split()[3]}", ""]
    assert lines[2 : 2 + len(head)] == head
    assert lines[-len(tail) :] == tail
