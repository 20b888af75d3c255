"""The verdict's calibration and its false-fit rate (memtune/bench/calibrate.py, docs/verdict.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memtune.bench.accuracy import RunResult, accuracy_report, evaluate, false_fits, read_runs
from memtune.bench.calibrate import calibrate
from memtune.bench.published import PublishedResult, evaluate_published, published_report, read_published
from memtune.cli import main
from memtune.estimate.verdict import CALIBRATION, calibration_json

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sets() -> tuple[list[RunResult], list[PublishedResult]]:
    measured = [evaluate(r) for r in read_runs([ROOT / "benchmarks" / "measured"])]
    published = [
        evaluate_published(r) for r in read_published([ROOT / "benchmarks" / "published" / "memory"])
    ]
    return measured, published


def test_committed_calibration_is_reproduced(sets):
    committed = json.loads(CALIBRATION.read_text(encoding="utf-8"))
    assert calibration_json(calibrate(*sets)) == committed


def test_calibrate_check_passes_on_the_committed_table(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["bench", "calibrate", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def _measured(
    run_id: str, split: str, peak: int, estimate: int, *families: str, margin: float = 0.0
) -> RunResult:
    return RunResult(run_id, split, 0, peak, estimate, 0, estimate, families, margin)


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


def test_a_run_is_a_false_fit_only_beyond_its_margin():
    at = _measured("at", "holdout", 103, 100, "dense", margin=0.03)
    over = _measured("over", "holdout", 104, 100, "dense", margin=0.03)
    safe = _measured("safe", "holdout", 95, 100, "dense", margin=0.03)
    assert not at.false_fit and over.false_fit and not safe.false_fit
    f = false_fits([(r.id, r.excess) for r in (at, over, safe)])
    assert f is not None and (f.runs, f.false_fits, f.ids) == (3, 1, ("over",))
    assert f.worst_excess == pytest.approx(0.01) and f.rate == 1 / 3
    assert false_fits([]) is None


def test_no_tune_run_is_a_false_fit_and_the_splits_add_up(sets):
    measured, published = sets
    for report in (accuracy_report(measured), published_report(published)):
        per_split = report.false_fits
        assert per_split["tune"] is not None and per_split["tune"].false_fits == 0
        parts = [f for name, f in per_split.items() if name != "all" and f]
        assert per_split["all"] is not None
        assert sum(f.runs for f in parts) == per_split["all"].runs
        assert sum(f.false_fits for f in parts) == per_split["all"].false_fits


FALSE_FIT_ROW = re.compile(r"^\| (measured|published) [^|]*\|(.*)\|$")
CELL = re.compile(r"(\d+) of (\d+)")


def test_readme_false_fit_table_is_reproduced(sets):
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Accuracy", 1)[1].split("\n## ", 1)[0]
    rows = {m[1]: m[2] for line in section.splitlines() if (m := FALSE_FIT_ROW.match(line))}
    measured, published = sets
    reports = {"measured": accuracy_report(measured), "published": published_report(published)}
    assert set(rows) == set(reports)
    for name, cells in rows.items():
        want = [
            (f.false_fits, f.runs) for split, f in reports[name].false_fits.items() if split != "all" and f
        ]
        assert [(int(a), int(b)) for a, b in CELL.findall(cells)] == want
