"""`memtune run --config`, `memtune diagnose --config` and `memtune fix --oom-log` rank the same
fixes for the same failure."""

from __future__ import annotations

import sys
from pathlib import Path

from memtune.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "llama3-70b-sft.yaml")
CAPACITY_LOG = ROOT / "tests" / "diagnose" / "fixtures" / "h200" / "capacity.log"


def _suggestions(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("warning: the log's GPU"))
    end = next((i for i, line in enumerate(lines) if line == "Not chosen"), len(lines))
    return [line for line in lines[start:end] if line]


def test_run_prints_the_list_fix_prints(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code = f"import sys; sys.stderr.write(open({str(CAPACITY_LOG)!r}).read()); sys.exit(1)"
    assert (
        main(["run", "--config", EXAMPLE, "--out", str(tmp_path / "run"), "--", sys.executable, "-c", code])
        == 1
    )
    ran = capfd.readouterr().err
    assert main(["fix", EXAMPLE, "--oom-log", str(CAPACITY_LOG)]) == 0
    fixed = capfd.readouterr().out
    listed = _suggestions(ran)
    assert listed == _suggestions(fixed)
    assert listed[2].startswith("1. ") and "what to change, cheapest first" not in ran


def test_a_config_the_checks_refuse_keeps_the_runs_status_and_diagnosis(tmp_path, capfd):
    broken = str(ROOT / "examples" / "broken-llama3-8b.yaml")
    code = f"import sys; sys.stderr.write(open({str(CAPACITY_LOG)!r}).read()); sys.exit(1)"
    assert (
        main(["run", "--config", broken, "--out", str(tmp_path / "run"), "--", sys.executable, "-c", code])
        == 1
    )
    err = capfd.readouterr().err
    assert "diagnosis: capacity" in err and "warning: the log's GPU" not in err


def test_diagnose_with_the_config_prints_the_list_fix_prints(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    main(["diagnose", str(CAPACITY_LOG), "--config", EXAMPLE])
    diagnosed = capsys.readouterr().out
    assert main(["fix", EXAMPLE, "--oom-log", str(CAPACITY_LOG)]) == 0
    assert _suggestions(diagnosed) == _suggestions(capsys.readouterr().out)
    assert (
        "what to change, cheapest first" not in diagnosed
    )  # the field's ladder gives way to the ranked list


def test_diagnose_json_carries_the_ranked_fixes_fix_json_gives(capsys):
    import json

    main(["diagnose", str(CAPACITY_LOG), "--config", EXAMPLE, "--json"])
    diagnosed = json.loads(capsys.readouterr().out)
    main(["fix", EXAMPLE, "--oom-log", str(CAPACITY_LOG), "--json"])
    fixed = json.loads(capsys.readouterr().out)
    fixed.pop("ignored_keys")
    assert diagnosed["ranked_fixes"] == fixed
    main(["diagnose", str(CAPACITY_LOG), "--json"])  # no config: the field's ladder alone
    assert json.loads(capsys.readouterr().out)["ranked_fixes"] is None


def test_an_oom_at_checkpoint_load_keeps_diagnoses_resume_advice(capsys):
    import json

    log = str(ROOT / "skills" / "memtune-memory-tuning" / "evals" / "files" / "resume-oom.log")
    main(["diagnose", log, "--config", EXAMPLE, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranked_fixes"] is None
    assert any("checkpoint.load_optim=false" in change for f in doc["fixes"] for change in f["changes"])


def test_memory_held_outside_pytorch_keeps_diagnoses_own_advice(tmp_path, capsys):
    import json

    log = tmp_path / "nccl.log"
    log.write_text("node:2134736:2285781 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n")
    main(["diagnose", str(log), "--config", EXAMPLE, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["label"] == "outside_pytorch"
    assert doc["ranked_fixes"] is None  # fix's training changes do not shrink NCCL's buffers
    assert doc["fixes"][0]["title"] == "Shrink NCCL's own buffers"
