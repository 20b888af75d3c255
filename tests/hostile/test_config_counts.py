"""A launch script's GPU count that memtune cannot read is reported, not dropped; ``check`` refuses
an unknown ``cluster.gpu`` as ``estimate`` does (issue 29 item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.config import load_job
from memtune.config.schema import ClusterConfig
from memtune.numbers import echo
from tests.hostile.conftest import run_cli

MEGATRON = (
    "pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
    "--micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 --bf16"
)
UNREAD = "(not a number memtune reads; set cluster.num_gpus)"
GPUS = "A100-40GB, A100-80GB, H100-80GB, H100-NVL, H200, B200, GB200, B300, GB300, MI300X"


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "train.sh"
    path.write_text("#!/bin/bash\n" + body + "\n")
    return str(path)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--nproc-per-node", "²"),
        ("--nproc_per_node", "gpu"),
        ("--nnodes", "٣"),
        ("--nproc-per-node", "9" * 5000),
    ],
)
def test_an_unreadable_launcher_count_is_listed_as_ignored(tmp_path, flag, value):
    loaded = load_job(script(tmp_path, f"torchrun {flag} {value} {MEGATRON}"))
    assert f"{flag} {echo(value)} {UNREAD}" in loaded.ignored
    assert loaded.job.cluster.num_gpus == ClusterConfig().num_gpus  # the default, and said so


def test_an_unreadable_world_size_is_listed_as_ignored(capsys, tmp_path):
    path = script(tmp_path, f"WORLD_SIZE=³\ntorchrun {MEGATRON}")
    status, _, err = run_cli(capsys, "check", path)
    assert status == 0
    assert err == f"memtune check: {path}: ignored 1 keys memtune does not use: WORLD_SIZE='³' {UNREAD}\n"


def test_a_readable_count_is_used(tmp_path):
    loaded = load_job(script(tmp_path, f"torchrun --nnodes 2 --nproc-per-node 4 {MEGATRON}"))
    assert (loaded.job.cluster.num_gpus, loaded.job.cluster.gpus_per_node) == (8, 4)
    assert not any("nproc" in i or "nnodes" in i for i in loaded.ignored)


def test_check_refuses_an_unknown_gpu_like_estimate(capsys, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text(
        "model: {preset: llama3-8b}\ncluster: {num_gpus: 8, gpu: NOPE-1}\ntrain: {global_batch_size: 64}\n"
    )
    line = f"unknown GPU 'NOPE-1'; known: {GPUS} (`memtune gpus` lists aliases)\n"
    for command in ("check", "estimate"):
        status, out, err = run_cli(capsys, command, str(config))
        assert (status, out, err) == (2, "", f"memtune {command}: {line}")


def test_check_accepts_an_unknown_gpu_with_its_memory_given(capsys, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text(
        "model: {preset: llama3-8b}\ncluster: {num_gpus: 8, gpu: NOPE-1, gpu_memory_gib: 96}\n"
        "train: {global_batch_size: 64}\n"
    )
    status, _, _ = run_cli(capsys, "check", str(config))
    assert status == 0
