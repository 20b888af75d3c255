"""Every checkpoint key the loaders meet is used or refused, in Megatron-LM's flag spelling and in
a Megatron-Bridge dump's; what memtune does not model is said in --json ``assumptions``."""

from __future__ import annotations

import json

import pytest

from memtune.check import gate
from memtune.cli import main
from memtune.config import derive, load_job
from memtune.estimate import estimate

ARCH = (
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
    "--vocab-size 1000 --micro-batch-size 1"
)
BRIDGE_MODEL = "model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, vocab_size: 1000}\n"


def _launch(tmp_path, flags):
    script = tmp_path / "train.sh"
    script.write_text(f"torchrun pretrain_gpt.py {ARCH} {flags}\n")
    return load_job(script)


@pytest.mark.parametrize(
    "flag, key, value",
    [
        ("--save /ckpt", "save", "/ckpt"),
        ("--no-save-optim", "save_optim", False),
        ("--no-save-rng", "save_rng", False),
        ("--no-load-rng", "load_rng", False),
        ("--no-load-optim", "load_optim", False),
        ("--finetune", "finetune", True),
        ("--pretrained-checkpoint /base", "pretrained_checkpoint", "/base"),
        ("--async-save", "async_save", True),
        ("--use-persistent-ckpt-worker", "use_persistent_ckpt_worker", True),
        ("--no-ckpt-fully-parallel-save", "fully_parallel_save", False),
        ("--ckpt-fully-parallel-save", "fully_parallel_save", True),  # deprecated: the default
        ("--ckpt-assume-constant-structure", "ckpt_assume_constant_structure", True),
        ("--dist-ckpt-optim-fully-reshardable", "dist_ckpt_optim_fully_reshardable", True),
        (
            "--distrib-optim-fully-reshardable-mem-efficient",
            "distrib_optim_fully_reshardable_mem_efficient",
            True,
        ),
    ],
)
def test_megatron_lm_checkpoint_flags_are_used(tmp_path, flag, key, value):
    loaded = _launch(tmp_path, flag)
    assert getattr(loaded.job.checkpoint, key) == value
    assert loaded.ignored == []


def test_a_bridge_dump_with_finetune_loads_no_optimizer_state(tmp_path):
    dump = tmp_path / "config.yaml"
    dump.write_text(
        BRIDGE_MODEL
        + "checkpoint: {load: /ckpt, finetune: true, load_optim: true, save: /out, save_interval: 100}\n"
    )
    loaded = load_job(dump)
    assert loaded.ignored == ["checkpoint.save_interval"]
    d = derive(loaded.job)
    assert d.resumes and not d.optimizer_loaded_at_resume
    est = estimate(gate(loaded.job))
    resume = est.resume(est.ranks[0])
    assert resume is not None
    assert "optimizer.rebuilt_by_load_state_dict" not in resume.parts
    # nothing allocates the optimizer's moments before the first step
    assert resume.resident < est.ranks[0].state.total


def test_a_pretrained_checkpoint_is_loaded_as_a_finetune(tmp_path):
    dump = tmp_path / "config.yaml"
    dump.write_text(BRIDGE_MODEL + "checkpoint: {pretrained_checkpoint: /base, save: /out}\n")
    d = derive(load_job(dump).job)
    assert d.resumes and not d.optimizer_loaded_at_resume and d.saves


def test_a_bridge_dump_takes_every_save_key(tmp_path):
    dump = tmp_path / "config.yaml"
    dump.write_text(
        BRIDGE_MODEL + "checkpoint: {save: /out, save_optim: false, save_rng: false, load_rng: false,"
        " async_save: true, use_persistent_ckpt_worker: true, fully_parallel_save: false,"
        " ckpt_assume_constant_structure: true, dist_ckpt_optim_fully_reshardable: true,"
        " distrib_optim_fully_reshardable_mem_efficient: true}\n"
    )
    loaded = load_job(dump)
    assert loaded.ignored == []
    c = loaded.job.checkpoint
    assert (c.save, c.save_optim, c.async_save, c.fully_parallel_save) == ("/out", False, True, False)


def test_json_assumptions_list_the_checkpoint_keys_memtune_does_not_use(tmp_path, capsys):
    dump = tmp_path / "config.yaml"
    dump.write_text(
        BRIDGE_MODEL + "checkpoint: {save: /out, save_interval: 100, most_recent_k: 2, load_rng: false}\n"
    )
    assert main(["estimate", str(dump), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    notes = doc["assumptions"]
    assert (
        notes[0]
        == "not used, their memory effect not modeled: checkpoint.save_interval, checkpoint.most_recent_k"
    )
    assert any(n.startswith("checkpoint.load_rng: no memory effect") for n in notes)
    assert doc["ranks"][0]["save"]["format"] == "torch_dist"


def test_async_save_without_the_persistent_worker_is_said_to_be_synchronous(tmp_path, capsys):
    loaded = _launch(tmp_path, "--save /ckpt --async-save")
    est = estimate(gate(loaded.job))
    assert not est.derived.async_save
    from memtune.estimate.render import assumptions

    assert any("without use_persistent_ckpt_worker" in note for note in assumptions(est))
