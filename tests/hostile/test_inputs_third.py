"""Issue 43 items 4 and 10: the words, options and files of the third campaign, each refused in
one line (or taken as what it is) rather than dropped, echoed at full length or run unbounded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memtune import infile
from tests.hostile.conftest import assert_well_behaved, run_cli

SMALL = Path("examples/llama3-8b-lora.yaml")
LONG = "x" * 100_000


# --- duplicate keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "before", "message"),
    [
        (
            "job.yaml",
            "model:\n  preset: llama3-8b\n  num_layers: 8\ntrain:\n  micro_batch_size: 1\nmodel:\n  num_layers: 16\n",
            (),
            "key 'model' is given twice, at lines 1 and 6 (YAML would keep only the last); remove one",
        ),
        (  # a Megatron-Bridge override file over a recipe
            "override.yaml",
            "model:\n  tensor_model_parallel_size: 2\n  tensor_model_parallel_size: 4\n",
            ("--recipe", "llama3_8b_pretrain_2gpu_h100_bf16_config"),
            "key 'tensor_model_parallel_size' is given twice, at lines 2 and 3 (YAML would keep only the last); "
            "remove one",
        ),
        (
            "flow.yaml",
            "model: {preset: llama3-8b, num_layers: 8, num_layers: 4}\n",
            (),
            "key 'num_layers' is given twice, at line 1 (YAML would keep only the last); remove one",
        ),
        (
            "config.json",
            '{"model": {"preset": "llama3-8b"}, "model": {}}',
            (),
            "key 'model' is given twice in one object (JSON readers keep only the last); remove one",
        ),
    ],
)
def test_a_duplicate_key_is_refused_naming_both_lines(capsys, tmp_path, name, text, before, message):
    path = tmp_path / name
    path.write_text(text)
    status, _, err = run_cli(capsys, "estimate", *before, str(path))
    assert (status, err) == (2, f"memtune estimate: {path}: {message}\n")


def test_keys_beside_a_merge_are_not_duplicates(capsys, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text(
        "base: &b {num_layers: 8, hidden_size: 4096}\nmodel:\n  <<: *b\n  preset: llama3-8b\n  num_layers: 4\n"
    )
    status, _, err = run_cli(capsys, "estimate", str(config))
    assert status == 2 and err.startswith(
        "memtune estimate: base: unknown key"
    )  # read; only `base` is refused


# --- words that are not files ---------------------------------------------------------------------


def test_an_override_longer_than_a_file_name_is_an_override(capsys, tmp_path):
    """A 128-stage layout (292 bytes as one word) used to be "File name too long"."""
    config = tmp_path / "job.yaml"
    config.write_text(
        "model:\n  preset: llama3.1-405b\n  tensor_model_parallel_size: 8\n  pipeline_model_parallel_size: 16\n"
        "  virtual_pipeline_model_parallel_size: 8\ntrain:\n  micro_batch_size: 1\n  global_batch_size: 64\n"
    )
    word = "model.pipeline_model_parallel_layout=E|" + "t|" * 126 + "L"
    assert len(word.encode()) > 255
    status, out, err = run_cli(capsys, "estimate", str(config), word, "--json")
    assert (status, err) == (0, "")
    ranks = json.loads(out)["ranks"]
    assert [r["layers"] for r in ranks][:2] == [7, 8]  # the embedding, then one layer, in each of 8 chunks


@pytest.mark.parametrize("command", ["recipes", "models"])
def test_an_empty_name_is_a_name_not_the_list(capsys, command):
    status, out, err = run_cli(capsys, command, "")
    what = "Megatron-Bridge recipe" if command == "recipes" else "model preset"
    assert (status, out) == (2, "") and err.startswith(f"memtune {command}: unknown {what} ''")


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (("recipes", LONG), "memtune recipes: unknown Megatron-Bridge recipe 'xxx"),
        (("models", LONG), "memtune models: unknown model preset 'xxx"),
        (("check", "--explain", LONG), "memtune check: --explain: no rule 'xxx"),
        (("check", str(SMALL), "--select", LONG), "memtune check: check: unknown rule or prefix 'xxx"),
        (("plan", LONG, "--gpus", "8"), "memtune plan: MODEL: 'xxx"),
    ],
)
def test_an_unknown_name_is_quoted_cut(capsys, argv, start):
    status, _, err = run_cli(capsys, *argv)
    assert status == 2 and err.startswith(start)
    assert len(err) < 1000 and "x" * 81 not in err


# --- files that are not regular -------------------------------------------------------------------


def test_an_override_file_that_is_a_directory_or_device_is_named_as_such(capsys, tmp_path):
    for path, what in ((tmp_path, "a directory"), (Path("/dev/zero"), "larger than 16 MiB")):
        status, _, err = run_cli(capsys, "estimate", str(SMALL), str(path))
        assert status == 2 and what in err and "no such file" not in err, err


def test_a_config_fifo_nobody_writes_is_not_waited_on_forever(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(infile, "FIFO_WAIT_SECONDS", 0.2)
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    status, _, err = run_cli(capsys, "estimate", str(fifo))
    assert (status, err) == (2, f"memtune estimate: {fifo}: a pipe nothing wrote to in 0.2 s\n")


# --- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--seq", "0"), "--seq: must be at least 1, got 0"),
        (("--gbs", "-3"), "--gbs: must be at least 1, got -3"),
        (("--gpus", "0"), "--gpus: must be at least 1, got 0"),
        (("--gpu", ""), "--gpu: unknown GPU ''"),
        (("--json",), "--json and --split go with --accuracy (the speed run prints a table)"),
        (("--accuracy", "--gpus", "2"), "--gpus time a search; --accuracy takes none of them"),
    ],
)
def test_bench_plan_options_are_checked_before_any_search(capsys, options, message):
    status, out, err = run_cli(capsys, "bench", "plan", *options)
    assert status == 2 and (out == "" or "--json" in options)
    assert err.startswith(f"memtune bench: {message}"), err


def test_diff_snapshots_refuses_all(capsys, tmp_path):
    status, _, err = run_cli(capsys, "diff", "--snapshots", str(tmp_path), "--all")
    assert (status, err) == (
        2,
        "memtune diff: --all goes with --logs (it lists every rank and step of two runs)\n",
    )


@pytest.mark.parametrize("command", [("estimate", str(SMALL)), ("check", str(SMALL)), ("gpus",)])
def test_json_output_is_json(capsys, command):
    status, out, err = run_cli(capsys, *command, "--json")
    assert_well_behaved(status, err)
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
