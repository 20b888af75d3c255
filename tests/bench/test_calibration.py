"""The committed calibration is what `memtune bench calibrate` computes from the tune runs."""

from __future__ import annotations

import json
from pathlib import Path

from memtune.bench.accuracy import RunResult, evaluate, read_runs
from memtune.bench.calibrate import calibrate
from memtune.bench.published import PublishedResult, evaluate_published, read_published
from memtune.cli import main
from memtune.estimate.verdict import CALIBRATION, calibration_json

ROOT = Path(__file__).resolve().parents[2]


def test_committed_calibration_is_reproduced():
    measured = [evaluate(r) for r in read_runs([ROOT / "benchmarks" / "measured"])]
    published = [
        evaluate_published(r) for r in read_published([ROOT / "benchmarks" / "published" / "memory"])
    ]
    committed = json.loads(CALIBRATION.read_text(encoding="utf-8"))
    assert calibration_json(calibrate(measured, published)) == committed


def test_calibrate_check_passes_on_the_committed_table(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["bench", "calibrate", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def _measured(run_id: str, split: str, peak: int, estimate: int, *families: str) -> RunResult:
    return RunResult(run_id, split, 0, peak, estimate, 0, estimate, families)


def test_holdout_runs_never_reach_the_calibration():
    measured = [
        _measured("a", "tune", 102, 100, "LoRA"),
        _measured("b", "holdout", 150, 100, "LoRA"),
        _measured("c", "fresh", 150, 100, "LoRA"),
    ]
    published = [
        PublishedResult("p", "tune", 90, 100, ("LoRA", "MLA")),
        PublishedResult("q", "holdout", 200, 100, ("MLA",)),
    ]
    cal = calibrate(measured, published)
    lora, mla = cal.families["LoRA"], cal.families["MLA"]
    assert (lora.measured_runs, lora.published_runs, lora.worst_id) == (1, 1, "a")
    assert lora.worst_under == (102 - 100) / 100
    # Only over-estimates: no margin beyond the fragmentation margin, and no run to name.
    assert (mla.runs, mla.worst_under, mla.worst_id) == (1, 0.0, None)
    assert cal.combinations == {("LoRA",), ("LoRA", "MLA")}
