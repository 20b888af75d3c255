"""``memtune plan`` arguments that used to be taken silently or run for minutes (issue 29 items 5
and 6): one line, exit 2, before any search."""

from __future__ import annotations

import pytest

from memtune.plan.cli import MAX_TOP, MAX_WORKERS
from tests.hostile.conftest import run_cli

PLAN = ("plan", "llama3-8b", "--gpus", "8", "--gbs", "64")
GPUS = "A100-40GB, A100-80GB, H100-80GB, H100-NVL, H200, B200, GB200, B300, GB300, MI300X"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--seq", "0"), "--seq: must be at least 1, got 0"),
        (("--gpus-per-node", "0"), "--gpus-per-node: must be at least 1, got 0"),
        (("--gbs", "-4"), "--gbs: must be at least 1, got -4"),
        (("--gpu", ""), f"--gpu: unknown GPU ''; known: {GPUS} (`memtune gpus` lists aliases)"),
        (("--top", "1000000000"), f"--top: must be from 1 to {MAX_TOP}, got 1000000000"),
        (("--top", "0"), f"--top: must be from 1 to {MAX_TOP}, got 0"),
        (("--explain", "1000000000"), f"--explain: must be from 1 to {MAX_TOP}, got 1000000000"),
        (("--explain", "0"), f"--explain: must be from 1 to {MAX_TOP}, got 0"),
        (("--workers", "100000"), f"--workers: must be from 0 to {MAX_WORKERS}, got 100000"),
        (
            ("--pin", "model.sequence_parallel=maybe"),
            "--pin model.sequence_parallel: must be true or false, got 'maybe'",
        ),
        (("--pin", "garbage"), "--pin change 'garbage': expected section.key=value"),
    ],
)
def test_a_bad_argument_is_refused_in_one_line(capsys, extra, message):
    status, out, err = run_cli(capsys, *PLAN, *extra)
    assert (status, out, err) == (2, "", f"memtune plan: {message}\n")


def test_an_unknown_pinned_key_is_named_as_the_pin(capsys):
    status, _, err = run_cli(capsys, *PLAN, "--pin", "model.nope=3")
    assert status == 2 and err.startswith("memtune plan: --pin model.nope: unknown key; allowed: ")
    assert len(err.splitlines()) == 1


def test_gpus_zero_is_not_the_configs_count(capsys):
    status, _, err = run_cli(capsys, "plan", "llama3-8b", "--gpus", "0", "--gbs", "64")
    assert (status, err) == (2, "memtune plan: --gpus: must be at least 1, got 0\n")


def test_plot_into_a_directory_is_refused_before_the_search(capsys, tmp_path):
    status, _, err = run_cli(capsys, *PLAN, "--plot", str(tmp_path))
    assert status == 2
    assert err == (
        f"memtune plan: --plot {tmp_path}: the file name must end in .png, .pdf, .svg (the extension picks the format)\n"
    )
    assert list(tmp_path.parent.glob(f"{tmp_path.name}.*")) == []
    status, _, err = run_cli(capsys, *PLAN, "--plot", f"{tmp_path}/x.png/")
    assert (status, err) == (
        2,
        f"memtune plan: --plot {tmp_path}/x.png/: names a directory; give a file name such as plot.png\n",
    )


@pytest.mark.parametrize(
    ("pin", "reasons"),
    [
        ("model.tensor_model_parallel_size=3", "PAR001: The GPU count is not a multiple of TP × PP × CP"),
        (
            "train.micro_batch_size=128",
            "BAT001: The global batch is not a multiple of micro-batch × data-parallel size, "
            "PAR001: The GPU count is not a multiple of TP × PP × CP",
        ),
    ],
)
def test_a_pin_no_layout_can_have_is_refused_not_reported_as_not_fitting(capsys, pin, reasons):
    status, out, err = run_cli(capsys, *PLAN, "--pin", pin)
    assert (status, out.strip()) == (2, "")  # the search's progress display leaves a newline
    assert err == f"memtune plan: --pin {pin}: no layout on 8 GPUs has it ({reasons})\n"
