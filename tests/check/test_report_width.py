"""`memtune check` and its rule list fit 80 and 120 columns without trailing blanks."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.cli import main

BROKEN = str(Path(__file__).resolve().parents[2] / "examples" / "broken-llama3-8b.yaml")


def _lines(capsys, monkeypatch, width: int, args: list[str]) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    main(args)
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width and line == line.rstrip() for line in lines)
    return lines


@pytest.mark.parametrize("width", [80, 120])
def test_the_rule_list_keeps_codes_and_gives_up_names_first(capsys, monkeypatch, width):
    lines = _lines(capsys, monkeypatch, width, ["check", "--list"])
    par001 = next(line for line in lines if line.startswith("PAR001"))
    if width == 80:  # a 31-character name column would leave the summary 28 columns
        assert par001 == "PAR001 error   The GPU count is not a multiple of TP × PP × CP."
        assert lines[-1] == "rule names (for --select and --ignore) not shown at 80 columns"
    else:
        assert par001.split()[:3] == ["PAR001", "error", "world-size-not-divisible"]


@pytest.mark.parametrize("width", [80, 120])
def test_findings_fit(capsys, monkeypatch, width):
    lines = _lines(capsys, monkeypatch, width, ["check", BROKEN, "--show-info"])
    assert lines[-1].startswith("4 errors")
