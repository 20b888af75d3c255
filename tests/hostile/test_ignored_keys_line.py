"""The "ignored N keys" line is prefixed like every other stderr line (issue 29 item 7), by every
command that loads a config, fix, plan and diff included; the JSON documents name each key."""

from __future__ import annotations

import json

import pytest

from tests.hostile.conftest import run_cli

SCRIPT = "examples/megatron-lm-llama3-8b.sh"  # a launch script with flags memtune does not use


@pytest.mark.parametrize(
    "argv",
    [
        ("check", SCRIPT),
        ("estimate", SCRIPT),
        ("fix", SCRIPT),
        ("plan", SCRIPT, "--top", "1"),
        ("diff", SCRIPT, SCRIPT),
    ],
)
def test_the_ignored_keys_line_names_the_command(capsys, argv):
    _, _, err = run_cli(capsys, *argv)
    lines = [line for line in err.splitlines() if "keys memtune does not use" in line]
    assert lines, err
    assert all(
        line.startswith(f"memtune {argv[0]}: {SCRIPT}: ignored 24 keys memtune does not use: ")
        for line in lines
    )
    assert len(lines) == (2 if argv[0] == "diff" else 1)


def test_a_long_list_of_ignored_keys_is_counted_by_section_and_check_json_names_each(capsys):
    dump = "examples/bridge-llama3-70b-lora.yaml"  # a whole ConfigContainer, 165 keys memtune does not use
    _, _, err = run_cli(capsys, "estimate", dump)
    (line,) = [line for line in err.splitlines() if "keys memtune does not use" in line]
    assert line == (
        f"memtune estimate: {dump}: ignored 165 keys memtune does not use: 78 in model, 22 in optimizer, "
        "17 in mixed_precision, 11 in ddp, 10 in train, 9 in checkpoint, 7 in comm_overlap, 4 in peft; "
        "whole sections dataset, dist, logger, rerun_state_machine, rng, scheduler, tokenizer "
        f"(memtune check {dump} --json lists each)"
    )
    _, out, _ = run_cli(capsys, "check", dump, "--json")
    assert len(json.loads(out)["ignored_keys"]) == 165


@pytest.mark.parametrize(
    "argv",
    [
        ("fix", SCRIPT, "--json"),
        ("plan", SCRIPT, "--top", "1", "--json"),
        ("bench", "step", SCRIPT, "--json"),
    ],
)
def test_the_json_documents_name_every_ignored_key(capsys, argv):
    _, out, _ = run_cli(capsys, *argv)
    ignored = json.loads(out)["ignored_keys"]
    assert len(ignored) == 24
    assert ignored[0] == "--use-mcore-models"


def test_diff_json_names_each_configs_ignored_keys(capsys):
    _, out, _ = run_cli(capsys, "diff", SCRIPT, "examples/llama3-70b-sft.yaml", "--json")
    ignored = json.loads(out)["ignored_keys"]
    assert (len(ignored["a"]), ignored["b"]) == (24, [])


def test_diagnose_json_names_the_configs_ignored_keys(capsys):
    log = "tests/diagnose/fixtures/h200/capacity.log"
    _, out, _ = run_cli(capsys, "diagnose", log, "--config", SCRIPT, "--json")
    assert len(json.loads(out)["ignored_keys"]) == 24
    _, out, _ = run_cli(capsys, "diagnose", log, "--json")
    assert json.loads(out)["ignored_keys"] == []
