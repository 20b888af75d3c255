"""``memtune check`` as a command: exit status, JSON, --strict, --explain, --list."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from memtune.check.cli import register
from memtune.check.registry import catalogue
from memtune.cli import main
from memtune.errors import InputError


def check(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="memtune")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["check", *argv])
    return args.handler(args)


def test_clean_config_exits_zero(base_yaml, capsys):
    assert check(str(base_yaml)) == 0
    assert "no problems found" in capsys.readouterr().out


def test_errors_exit_one_and_are_grouped_by_family(base_yaml, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # keep each line whole
    status = check(
        str(base_yaml),
        "model.cpu_offloading=true",
        "model.cpu_offloading_num_layers=4",
        "model.tensor_model_parallel_size=1",
    )
    out = capsys.readouterr().out
    assert status == 1
    assert (
        out.index("Sequence, context parallelism and attention (SEQ)")
        < out.index("SEQ001")
        < out.index("CPU offloading (OFF)")
    )
    assert "Currently there is no support for Pipeline parallelism with CPU offloading" in out
    assert "2 errors, 0 warnings, 0 infos" in out


def test_warnings_fail_only_with_strict(base_yaml):
    assert check(str(base_yaml), "model.recompute_method=uniform") == 0
    assert check(str(base_yaml), "model.recompute_method=uniform", "--strict") == 1


def test_infos_never_fail(base_yaml):
    assert check(str(base_yaml), "model.sequence_parallel=false", "--strict") == 0


def test_json_output(base_yaml, capsys):
    status = check(str(base_yaml), "train.global_batch_size=62", "--json")
    data = json.loads(capsys.readouterr().out)
    assert status == 1
    assert data["schema_version"] == 1
    assert data["summary"] == {"error": 1, "warning": 0, "info": 0}
    assert data["findings"] == [
        {
            "code": "BAT001",
            "severity": "error",
            "message": "train.global_batch_size=62 is not divisible by train.micro_batch_size=1 × DP=4",
            "fix": "set train.global_batch_size to a multiple of 4, e.g. 60 or 64",
            "upstream": "global batch size (62) is not divisible by micro batch size (1) times data parallel size (4)",
            "changes": [],
            "deselected": False,
        }
    ]


def test_select_ignore_and_hidden_infos(base_yaml, capsys):
    overrides = ("model.sequence_parallel=false", "model.recompute_method=uniform")
    check(str(base_yaml), *overrides, "--json")
    assert [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["REC004"]
    check(str(base_yaml), *overrides, "--json", "--show-info")
    data = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in data["findings"]] == ["SEQ004", "REC004"] and data["hidden_info"] == 0
    check(str(base_yaml), *overrides, "--json", "--show-info", "--select", "SEQ")
    assert [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["SEQ004"]
    check(str(base_yaml), *overrides, "--json", "--show-info", "--ignore", "REC004,SEQ00")
    assert json.loads(capsys.readouterr().out)["findings"] == []
    check(str(base_yaml), *overrides, "check.ignore=[REC]", "--json")
    assert json.loads(capsys.readouterr().out)["findings"] == []


def test_unknown_rule_in_select_is_bad_input(base_yaml):
    with pytest.raises(InputError, match="check: unknown rule or prefix 'XYZ001'"):
        check(str(base_yaml), "--select", "XYZ001")


def test_explain_prints_the_rule_page(capsys):
    assert check("--explain", "pip008") == 0
    out = capsys.readouterr().out
    assert out.startswith("PIP008 (middle-rank-not-divisible-by-vpp) error")
    for heading in ("What it does", "Why it matters", "Example", "Fix"):
        assert heading in out


def test_explain_unknown_code_suggests_a_close_one():
    with pytest.raises(InputError, match=r"--explain: no rule 'OFF0001'; did you mean OFF001\?"):
        check("--explain", "OFF0001")


def test_list_shows_every_rule(capsys):
    assert check("--list", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["schema_version"] == 1
    assert [r["code"] for r in listed["rules"]] == [r.code for r in catalogue()]
    by_code = {r["code"]: r for r in listed["rules"]}
    assert by_code["ENV006"]["applies"] == "torch before 2.11.0"
    assert by_code["ENV004"]["applies"] == "megatron-core 0.14.0 up to 0.16.0"
    assert check("--list") == 0
    out = capsys.readouterr().out
    assert all(r.code in out for r in catalogue())


def test_missing_config_is_bad_input():
    with pytest.raises(InputError, match="a config file or --recipe NAME is required"):
        check()


def test_bad_override_is_bad_input(base_yaml):
    with pytest.raises(
        InputError, match="model.tensor_model_parallel_size: must be a positive integer, got 0"
    ):
        check(str(base_yaml), "model.tensor_model_parallel_size=0")


EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "llama3-70b-sft.yaml")
PAR001_30 = "PAR001 cluster.num_gpus=30 is not divisible by TP×PP×CP = 4×4×1 = 16"


@pytest.mark.parametrize(
    "selection",
    [
        ("check.ignore=[PAR]",),
        ("--ignore", "PAR001"),
        ("--select", "SEQ"),
        ("check.ignore=[world-size-not-divisible]",),
    ],
)
def test_ignoring_an_error_still_reports_it_and_fails(capsys, monkeypatch, selection):
    monkeypatch.setenv("COLUMNS", "200")
    assert check(EXAMPLE, "cluster.num_gpus=30", *selection) == 1
    out = capsys.readouterr().out
    assert "PAR001 error" in out
    assert (
        "ignored, but still fails: select/ignore cannot silence an error Megatron raises at start-up" in out
    )
    assert check(EXAMPLE, "cluster.num_gpus=30", *selection, "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["error"] == 1
    assert [(f["code"], f["deselected"]) for f in data["findings"]] == [("PAR001", True)]


def test_a_selected_error_is_not_marked_deselected(capsys):
    assert check(EXAMPLE, "cluster.num_gpus=30", "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert [(f["code"], f["deselected"]) for f in data["findings"]] == [("PAR001", False)]


def test_estimate_refuses_a_job_whose_error_is_ignored(capsys):
    assert main(["estimate", EXAMPLE, "cluster.num_gpus=30", "check.ignore=[PAR]"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        f"memtune estimate: {PAR001_30} (select/ignore cannot silence an error Megatron raises at start-up)"
    )
