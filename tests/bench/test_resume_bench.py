"""`memtune bench resume`: the README's resume figures come from the committed round trips, and
a record without a resume phase is one line of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtune.bench.accuracy import read_runs
from memtune.bench.resume import evaluate_resume, resume_splits, save_splits
from memtune.cli import main

ROOT = Path(__file__).resolve().parents[2]
SET = ROOT / "benchmarks" / "measured" / "resume"


def _committed(summarize):
    """The committed round trips, the tune and holdout summaries ``summarize`` gives, the README."""
    results = [evaluate_resume(r) for r in read_runs([SET])]
    splits = summarize(results)
    assert splits["tune"] is not None and splits["holdout"] is not None
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    return results, splits["tune"], splits["holdout"], readme


def test_readme_resume_figures_are_reproduced():
    results, tune, holdout, readme = _committed(resume_splits)
    assert (
        f"tune {tune.runs} runs {tune.mean_abs_error:.1%} mean / {tune.max_abs_error:.1%} worst over both "
        f"phases, holdout {holdout.runs} run {holdout.max_abs_error:.1%}"
    ) in readme
    # the one run the README names: the load above the training peak
    qm2 = next(r for r in results if r.id == "resume-qm2-dist")
    assert qm2.load_measured > qm2.first_step_measured


def test_a_record_without_a_resume_phase_is_refused_in_one_line(tmp_path, capsys):
    record = json.loads(
        (ROOT / "benchmarks" / "measured" / "h200-mcore0.19.2.jsonl").read_text().splitlines()[0]
    )
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert main(["bench", "resume", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "runs.jsonl:1: neither measured.resume nor measured.save (not a checkpoint round trip)"
    )
    assert len(err.splitlines()) == 1


def test_json_carries_both_phases_of_every_run(capsys):
    assert main(["bench", "resume", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    resumed = [run for run in data["runs"] if run["load_measured"] is not None]
    saved = [run for run in data["runs"] if run["save_measured"] is not None]
    assert (len(resumed), len(saved)) == (17, 16)
    run = resumed[0]
    assert run["load_error"] == (run["load_estimated"] - run["load_measured"]) / run["load_measured"]
    run = saved[0]
    assert run["save_error"] == (run["save_estimated"] - run["save_measured"]) / run["save_measured"]
    assert set(data["splits"]) == set(data["save_splits"]) == {"tune", "holdout", "all"}


@pytest.mark.parametrize(
    "record, message",
    [
        (
            {"measured": {"peak_allocated_bytes": 5}},
            "runs.jsonl:1: id must be a text of 1 to 200 printable characters, got nothing",
        ),
        (
            {"id": "r", "measured": {"peak_allocated_bytes": 5}},
            "runs.jsonl:1: config must be a mapping, got nothing",
        ),
        (
            {"id": "r", "config": {}, "rank": -1, "measured": {"peak_allocated_bytes": 5}},
            "runs.jsonl:1: rank must be an integer from 0 to 999999, got -1",
        ),
        (
            {"id": "r", "config": {}, "rank": 0, "measured": {"peak_allocated_bytes": "5"}},
            "runs.jsonl:1: measured: peak_allocated_bytes must be an integer from 1 to 2^62, got '5'",
        ),
    ],
)
@pytest.mark.parametrize("benchmark", ["accuracy", "resume"])
def test_a_malformed_record_is_one_line_naming_its_line(tmp_path, capsys, benchmark, record, message):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert main(["bench", benchmark, str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(message)


def test_a_resume_phase_without_its_peaks_is_refused(tmp_path, capsys):
    record = json.loads(
        (ROOT / "benchmarks" / "measured" / "resume" / "h200-mcore0.19.2.jsonl").read_text().splitlines()[0]
    )
    del record["measured"]["resume"]["first_step_peak_bytes"]
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert main(["bench", "resume", str(path)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "runs.jsonl:1: measured.resume: first_step_peak_bytes must be an integer from 1 to 2^62, got nothing"
        )
    )


def test_readme_save_figures_are_reproduced():
    results, tune, holdout, readme = _committed(save_splits)
    assert (
        f"tune {tune.runs} runs {tune.mean_abs_error:.2%} mean / {tune.max_abs_error:.2%} worst, holdout "
        f"{holdout.runs} runs {holdout.mean_abs_error:.2%} / {holdout.max_abs_error:.2%}"
    ) in readme
    # the run the README names: the save above the training peak, by the gathered state
    fr = next(r for r in results if r.id == "save-l1b-dist-do-fr")
    run = next(r for r in read_runs([SET]) if r["id"] == fr.id)
    assert fr.save_measured is not None and fr.save_measured > run["measured"]["peak_allocated_bytes"]
    assert f"saves at {fr.save_measured / 2**30:.2f} GiB against a training peak of" in readme
    # every synchronous save's pinned staging, to within the few bytes of other pinned tensors
    for r in results:
        if r.host_staged_measured is not None and r.host_staged_estimated is not None:
            assert 0 <= r.host_staged_measured - r.host_staged_estimated < 4096, r.id
