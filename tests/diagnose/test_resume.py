"""A resume OOM: inside load_checkpoint, or in the first iteration after it (docs/resume.md)."""

from __future__ import annotations

import yaml

from memtune.check import gate
from memtune.config import validate
from memtune.diagnose import diagnose_text
from memtune.estimate import estimate
from tests.diagnose.diagnose_samples import MSG_211_CAPACITY

JOB = {
    "model": {
        "num_layers": 8,
        "hidden_size": 4096,
        "ffn_hidden_size": 14336,
        "num_attention_heads": 32,
        "num_query_groups": 8,
        "gated_linear_unit": True,
        "activation_func": "silu",
        "normalization": "RMSNorm",
        "add_bias_linear": False,
        "vocab_size": 32000,
        "seq_length": 2048,
        "bf16": True,
    },
    "train": {"micro_batch_size": 1, "global_batch_size": 8},
    "optimizer": {"use_distributed_optimizer": True},
    "ddp": {"use_distributed_optimizer": True},
    "checkpoint": {"load": "/ckpt"},
    "cluster": {"num_gpus": 8, "gpus_per_node": 8},
}

TRACEBACK_IN_LOAD = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/opt/Megatron-LM/pretrain_gpt.py", line 300, in <module>
[rank0]:   File "/opt/Megatron-LM/megatron/training/training.py", line 740, in setup_model_and_optimizer
[rank0]:     args.iteration, args.num_floating_point_operations_so_far = load_checkpoint(
[rank0]:   File "/opt/Megatron-LM/megatron/training/checkpointing.py", line 2976, in load_checkpoint
[rank0]:     optimizer.load_state_dict(state_dict['optimizer'])
[rank0]:   File "/usr/local/lib/python3.12/site-packages/transformer_engine/pytorch/optimizers/fused_adam.py", line 540, in load_state_dict
[rank0]: {msg}
"""

AFTER_LOAD = """\
[rank0]:  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 1000
[rank0]: Traceback (most recent call last):
[rank0]:   File "/opt/Megatron-LM/megatron/training/training.py", line 2100, in train_step
[rank0]: {msg}
"""

TRAINING_AFTER_LOAD = """\
[rank0]:  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 1000
[rank0]:  [2026-12-01 10:00:00] iteration     1001/  500000 | consumed samples: 8 | lm loss: 2.1
[rank0]: {msg}
"""


def _config(tmp_path, **changes):
    data = {k: dict(v) for k, v in JOB.items()}
    for section, values in changes.items():
        data.setdefault(section, {}).update(values)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path), data


def test_oom_inside_load_checkpoint_points_at_the_resume_row_with_the_saving(tmp_path):
    path, data = _config(tmp_path)
    d = diagnose_text(TRACEBACK_IN_LOAD.format(msg=MSG_211_CAPACITY), config=path)
    assert d.verdict.phase == "checkpoint load"
    assert any("while loading the checkpoint" in r for r in d.verdict.reasons)
    first = d.fixes[0]
    assert first.changes == ("checkpoint.load_optim=false",)
    est = estimate(gate(validate(data)))
    loads = [est.resume(r).load_bytes for r in est.ranks]
    data["checkpoint"]["load_optim"] = False
    after = estimate(gate(validate(data)))
    without = [after.resume(r).load_bytes for r in after.ranks]
    assert first.saves_bytes == max(loads) - max(without) > 0
    assert "resume row" in first.why


def test_a_config_without_checkpoint_load_is_estimated_as_resuming(tmp_path):
    path, _ = _config(tmp_path, checkpoint={"load": None})
    d = diagnose_text(TRACEBACK_IN_LOAD.format(msg=MSG_211_CAPACITY), config=path)
    first = d.fixes[0]
    assert first.changes == ("checkpoint.load_optim=false",) and first.saves_bytes > 0
    assert "the config sets no checkpoint.load" in first.why


def test_oom_in_the_first_iteration_after_the_load_offers_a_collection(tmp_path):
    path, _ = _config(tmp_path)
    d = diagnose_text(AFTER_LOAD.format(msg=MSG_211_CAPACITY), config=path)
    assert d.verdict.phase == "first iteration after resume"
    assert d.fixes[0].changes == ("train.manual_gc=true",)
    assert d.fixes[0].saves_bytes is None and d.fixes[0].saves_note.startswith("not estimated")
    path, _ = _config(tmp_path, train={"manual_gc": True})
    d = diagnose_text(AFTER_LOAD.format(msg=MSG_211_CAPACITY), config=path)
    assert "train.manual_gc=true" not in [c for f in d.fixes for c in f.changes]


def test_an_oom_after_a_logged_iteration_is_a_training_oom(tmp_path):
    path, _ = _config(tmp_path)
    d = diagnose_text(TRAINING_AFTER_LOAD.format(msg=MSG_211_CAPACITY), config=path)
    assert d.verdict.phase is None
    assert "checkpoint.load_optim=false" not in [c for f in d.fixes for c in f.changes]


def test_without_a_config_the_resume_remedy_is_named_without_a_saving():
    d = diagnose_text(TRACEBACK_IN_LOAD.format(msg=MSG_211_CAPACITY))
    assert d.fixes[0].changes == ("checkpoint.load_optim=false",) and d.fixes[0].saves_bytes is None


def test_a_healthy_resumed_log_reports_no_failure():
    d = diagnose_text(
        "[rank0]:  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 10\n"
    )
    assert d.verdict.label is None
