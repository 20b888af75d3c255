"""Long searches print a progress line every few seconds where no live bar can show (not a TTY)."""

from __future__ import annotations

import io

import memtune.progress
from memtune.cli import main
from memtune.progress import ProgressLines


def test_one_line_per_interval_with_counts_and_share():
    now = [100.0]
    out = io.StringIO()
    lines = ProgressLines("searching", every=5.0, clock=lambda: now[0], stream=out)
    for done, t in [(10, 101.0), (20, 104.9), (30, 105.0), (40, 109.0), (50, 110.5)]:
        now[0] = t
        lines(done, 200)
    assert out.getvalue().splitlines() == [
        "searching: 30 of 200 (15%) after 5 s",
        "searching: 50 of 200 (25%) after 10 s",
    ]


def test_plan_prints_progress_lines_when_not_on_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(memtune.progress, "PROGRESS_SECONDS", 0.0)
    assert main(["plan", "llama3-8b", "--gpus", "8", "--gbs", "128", "--seq", "8192", "--top", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    progress = [line for line in err if line.startswith("memtune plan: searching layouts: ")]
    assert progress and progress[-1].split(": ")[2].split(" (")[0].split(" of ")[0] != "0"
