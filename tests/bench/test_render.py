"""`memtune bench accuracy` fits 80 and 120 columns: run ids whole, memtune's error always shown."""

from __future__ import annotations

import pytest

from memtune.cli import main


@pytest.mark.parametrize("width", [80, 120])
def test_accuracy_tables_fit(capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["bench", "accuracy", "--split", "fresh2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width and line == line.rstrip() for line in lines)
    assert lines[0] == "Estimated vs measured steady-state peak (GiB = 2^30 bytes)"
    splits = lines.index("By split: |error| of memtune and of Megatron-LM's formula")
    if width == 80:  # the formula's columns give way; memtune's error stays
        assert lines[1].split() == ["run", "split", "pp", "measured", "memtune", "error"]
        assert lines[splits - 1] == "not shown at 80 columns: Megatron-LM, its error"
        runs = lines[3 : splits - 1]
    else:
        assert lines[1].split() == [
            "run",
            "split",
            "pp",
            "measured",
            "memtune",
            "error",
            "Megatron-LM",
            "its",
            "error",
        ]
        runs = lines[3:splits]
    assert runs and all(row.split()[0].startswith("fresh2-") and row.split()[1] == "fresh2" for row in runs)
    assert lines[splits + 1].split()[:4] == ["split", "runs", "mean", "max"]
    fresh2 = next(line.split() for line in lines[splits + 3 :] if line.startswith("fresh2 "))
    assert fresh2[1] == str(len(runs))  # the split's count is the runs the first table listed
