"""The README's `memtune fix` transcripts are what the command prints (at 80 columns), so the
ranked lists it quotes cannot drift from the code."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from memtune.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"


def transcripts() -> list[tuple[str, list[str]]]:
    """(command, the lines shown) of every README block that starts with `$ memtune fix`."""
    found = []
    for block in re.findall(r"```\n(\$ memtune fix .*?)```", README.read_text(encoding="utf-8"), re.S):
        first, *shown = block.rstrip("\n").split("\n")
        found.append((first.removeprefix("$ "), shown))
    return found


def output_of(command: str, capsys, monkeypatch) -> list[str]:
    """The command's lines at 80 columns; a trailing `| head -n N` keeps the first N."""
    words = shlex.split(command.split("  #")[0])
    keep = None
    if "|" in words:
        bar = words.index("|")
        keep, words = int(words[bar + 3]), words[:bar]
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    main(words[1:])
    lines = capsys.readouterr().out.splitlines()
    return lines[:keep] if keep else lines


def test_the_readme_has_the_issue_cases():
    commands = [c for c, _ in transcripts()]
    assert any("llama3-70b-sft-fp8.yaml" in c and "--oom-log" not in c for c in commands)
    assert any("llama3-70b-sft-fp8.yaml" in c and "--oom-log" in c for c in commands)
    assert any(c.split()[2] == "examples/llama3-70b-sft.yaml" for c in commands)


@pytest.mark.parametrize(("command", "shown"), transcripts(), ids=[c for c, _ in transcripts()])
def test_the_readme_shows_what_fix_prints(command, shown, capsys, monkeypatch):
    assert output_of(command, capsys, monkeypatch) == shown
