"""Stack defaults: a job gets its stack's value for every key it leaves out, and says which."""

from __future__ import annotations

from functools import partial

from memtune.check import run_checks
from memtune.config import validate
from memtune.config.changes import Change, job_data, with_changes
from memtune.config.stacks import received_defaults
from tests.jobs import build_job

MODEL = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000, "bf16": True}


_job = partial(build_job, {"model": MODEL})


def test_memtune_yaml_defaults_to_megatron_bridge():
    job = _job()
    assert job.defaults == "megatron-bridge"
    m = job.model
    assert m.masked_softmax_fusion and m.cross_entropy_loss_fusion and m.gradient_accumulation_fusion
    assert m.attention_softmax_in_fp32 is False
    assert m.position_embedding_type == "learned_absolute"
    assert m.deallocate_pipeline_outputs is True
    assert m.pipeline_dtype is None  # Bridge fills it only when pipelining
    assert m.bias_activation_fusion is False  # GPTModelProvider keeps TransformerConfig's value


def test_megatron_core_keeps_the_schema_defaults_and_receives_nothing():
    job = _job(defaults="megatron-core")
    assert job.model.masked_softmax_fusion is False
    assert job.model.position_embedding_type == "rope"
    assert received_defaults(job) == []


def test_megatron_lm_fills_pipeline_dtype_and_fp32_grad_reduction_from_bf16():
    job = _job(defaults="megatron-lm", model={"pipeline_model_parallel_size": 2})
    assert job.model.pipeline_dtype == "bf16"
    assert job.ddp.grad_reduce_in_fp32 is True
    assert job.model.bias_activation_fusion is True
    received = {d.key: d.value for d in received_defaults(job)}
    assert received["model.pipeline_dtype"] == "bf16"
    assert received["ddp.grad_reduce_in_fp32"] is True
    assert "model.cross_entropy_loss_fusion" not in received  # Megatron-LM keeps it off


def test_what_the_user_sets_wins_and_is_not_listed_as_a_default():
    job = _job(model={"masked_softmax_fusion": False, "position_embedding_type": "rope"})
    assert job.model.masked_softmax_fusion is False
    keys = {d.key for d in received_defaults(job)}
    assert "model.masked_softmax_fusion" not in keys and "model.position_embedding_type" not in keys
    assert "model.cross_entropy_loss_fusion" in keys
    assert str(next(d for d in received_defaults(job) if d.key == "model.cross_entropy_loss_fusion")) == (
        "model.cross_entropy_loss_fusion=true (megatron-bridge: "
        "megatron/bridge/models/gpt_provider.py GPTModelProvider)"
    )


def test_dump_holds_only_what_was_written_and_round_trips():
    job = _job(model={"pipeline_model_parallel_size": 2})
    data = job_data(job)
    assert "masked_softmax_fusion" not in data["model"] and "ddp" not in data
    again = validate(data)
    assert again == job and received_defaults(again) == received_defaults(job)


def test_changes_keep_stack_defaults_unset_and_a_changed_stack_applies_its_own():
    job = _job()
    changed = with_changes(job, [Change("model.hidden_size", 512)])
    assert changed.model.masked_softmax_fusion is True
    assert "masked_softmax_fusion" not in job_data(changed)["model"]
    core = validate({**job_data(job), "defaults": "megatron-core"})
    assert core.model.masked_softmax_fusion is False


def _finding(job, code):
    return next((f for f in run_checks(job) if f.code == code), None)


def test_sp_at_tp1_is_an_error_only_for_megatron_core():
    sp = {"sequence_parallel": True}
    assert _finding(_job(defaults="megatron-core", model=sp), "SEQ001").severity == "error"
    for stack in ("megatron-lm", "megatron-bridge"):
        finding = _finding(_job(defaults=stack, model=sp), "SEQ001")
        assert finding.severity == "warning"
        assert finding.message.endswith(f"{stack} turns sequence parallelism off")


def test_missing_pipeline_dtype_is_an_error_only_for_megatron_core():
    pp = {"pipeline_model_parallel_size": 2, "pipeline_dtype": None}
    assert _finding(_job(defaults="megatron-core", model=pp), "PAR006").severity == "error"
    assert _finding(_job(defaults="megatron-bridge", model=pp), "PAR006") is None


def test_a_launch_script_gets_megatron_lm_defaults_and_explain_lists_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # keep each line whole
    from memtune.cli import main
    from memtune.config import load_job

    script = tmp_path / "train.sh"
    script.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 "
        "--num-attention-heads 4 --seq-length 128 --vocab-size 1000 --micro-batch-size 1 --bf16 "
        "--no-masked-softmax-fusion --swiglu --no-bias-swiglu-fusion --unknown-flag 3\n"
    )
    loaded = load_job(script)
    assert loaded.job.defaults == "megatron-lm"
    assert loaded.job.model.masked_softmax_fusion is False  # the flag wins
    assert loaded.job.model.bias_activation_fusion is False
    assert loaded.job.model.position_embedding_type == "learned_absolute"
    assert "model.masked_softmax_fusion" not in {d.key for d in loaded.defaults}
    assert main(["estimate", str(script), "--explain"]) == 0
    out, err = capsys.readouterr()
    assert "  - model.gradient_accumulation_fusion=true (megatron-lm: megatron/training/arguments.py)" in out
    assert err == f"memtune estimate: {script}: ignored 1 keys memtune does not use: --unknown-flag 3\n"
