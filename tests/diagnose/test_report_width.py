"""`memtune diagnose` fits 80 and 120 columns without trailing blanks."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.cli import main

ROOT = Path(__file__).resolve().parents[2]
LOG = str(ROOT / "tests" / "diagnose" / "fixtures" / "h200" / "capacity.log")
EXAMPLE = str(ROOT / "examples" / "llama3-70b-sft.yaml")


@pytest.mark.parametrize("width", [80, 120])
def test_report_fits(capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    main(["diagnose", LOG, "--config", EXAMPLE])
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width and line == line.rstrip() for line in lines)
    ranks = lines.index("per rank")
    assert lines[ranks + 1].split() == ["rank", "verdict", "evidence", "numbers"]
    assert lines[ranks + 3].split()[:2] == ["—", "capacity"]
