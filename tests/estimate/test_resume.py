"""The resume phase (estimate/resume.py) by hand-computed byte counts.

The model is tests/estimate/conftest.py's TINY: 4 layers, hidden 64, 4 heads in 2 query groups
(kv channels 16), SwiGLU MLP 256, RMSNorm, no biases, vocabulary 1000, untied output layer, bf16,
2 GPUs (DP 2). Parameters:
- one layer: qkv (4 + 2 * 2) * 16 * 64 = 8192, proj 4 * 16 * 64 = 4096, fc1 2 * 256 * 64 = 32768,
  fc2 256 * 64 = 16384, two norms 128: 61568;
- outside the layers: embedding and output layer 1000 * 64 = 64000 each, final norm 64;
- in all 4 * 61568 + 128064 = 374336, half of it (the distributed optimizer's shard) 187168.
The four gated fc1 weights hold 4 * 32768 = 131072 elements: 262144 bytes in bf16. With a plain
MLP (fc1 256 * 64 = 16384) a layer has 45184 parameters, the model 308800, the shard 154400.
"""

from __future__ import annotations

import pytest

from memtune.check import gate
from memtune.config import derive, load_job, validate
from memtune.estimate import estimate
from memtune.estimate.render import estimate_json
from memtune.perf.step import throughput_of
from tests.estimate.conftest import make_job

PARAMS = 374_336
SHARD = 187_168
SHARD_PLAIN_MLP = 154_400
FC1_BF16 = 262_144
TE = {"transformer_impl": "transformer_engine", "attention_backend": "flash"}
DISTOPT = {"use_distributed_optimizer": True}


def resume_of(model=None, checkpoint=None, optimizer=None, ddp=None, stack=None, **sections):
    job = make_job(
        model={**TE, **(model or {})},
        checkpoint={"load": "/ckpt", **(checkpoint or {})},
        optimizer=optimizer or {},
        ddp=ddp or {},
        **sections,
    )
    if stack:  # the same values, built by another stack
        job = validate({**job.model_dump(mode="json"), "defaults": stack})
    est = estimate(gate(job))
    rank = est.ranks[0]
    return est, rank, est.resume(rank)


def test_torch_dist_with_the_distributed_optimizer_rebuilds_the_moments_and_merges_fc1():
    _, rank, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT)
    assert rank.state.optimizer_params == SHARD
    # TE FusedAdam's load_state_dict: a second exp_avg and exp_avg_sq, fp32, of the shard.
    assert resume.parts == {
        "optimizer.rebuilt_by_load_state_dict": 8 * SHARD,
        "model.linear_fc1_merged": FC1_BF16,
    }
    assert resume.load_bytes == round(rank.state.total + 8 * SHARD + FC1_BF16)
    assert resume.first_step_bytes == rank.peak_bytes


def test_megatron_bridge_keeps_the_scaffold_of_a_plain_distributed_fused_adam():
    bridge = {"stack": "megatron-bridge"}
    _, _, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT, **bridge)
    assert "optimizer.rebuilt_by_load_state_dict" not in resume.parts
    precision_aware = {**DISTOPT, "use_precision_aware_optimizer": True}
    _, _, resume = resume_of(optimizer=precision_aware, ddp=DISTOPT, **bridge)
    assert "optimizer.rebuilt_by_load_state_dict" in resume.parts  # Bridge keeps TE's loader there


def test_fully_parallel_load_adds_and_saves_no_device_memory():
    plain = resume_of(optimizer=DISTOPT, ddp=DISTOPT)[2]
    parallel = resume_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"fully_parallel_load": True})[2]
    assert parallel == plain


def test_without_the_distributed_optimizer_fc1_state_is_merged_too():
    _, rank, resume = resume_of()
    assert rank.state.optimizer_params == PARAMS
    fc1 = 4 * 32768
    # fp32 main weight + two fp32 moments per fc1 element, rebuilt by the same factory.
    assert resume.parts == {
        "optimizer.rebuilt_by_load_state_dict": 8 * PARAMS,
        "model.linear_fc1_merged": 2 * fc1,
        "optimizer.linear_fc1_merged": 12 * fc1,
    }


def test_without_the_optimizer_state_only_the_model_loads():
    _, rank, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"load_optim": False})
    assert resume.parts == {"model.linear_fc1_merged": FC1_BF16}
    # FusedAdam creates its moments at the first step: they do not exist during the load.
    assert resume.resident == rank.state.total - 8 * SHARD


def test_legacy_torch_format_without_distributed_optimizer_adds_nothing_on_the_device():
    _, rank, resume = resume_of(checkpoint={"ckpt_format": "torch"})
    assert resume.parts == {}
    assert resume.load_bytes == round(rank.state.total)
    assert resume.peak_bytes == rank.peak_bytes


def test_legacy_torch_format_with_the_distributed_optimizer_rebuilds_the_scaffold():
    _, _, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"ckpt_format": "torch"})
    assert resume.parts == {"optimizer.rebuilt_by_load_state_dict": 8 * SHARD}


def test_precision_aware_optimizer_rebuilds_main_weights_and_moments():
    opt = {
        **DISTOPT,
        "use_precision_aware_optimizer": True,
        "exp_avg_dtype": "bf16",
        "exp_avg_sq_dtype": "bf16",
    }
    _, rank, resume = resume_of(optimizer=opt, ddp=DISTOPT, model={"gated_linear_unit": False})
    # fp32 master_param + bf16 exp_avg + bf16 exp_avg_sq, all in FusedAdam's state.
    assert resume.parts == {"optimizer.rebuilt_by_load_state_dict": (4 + 2 + 2) * SHARD_PLAIN_MLP}
    assert rank.state.optimizer == (4 + 2 + 2) * SHARD_PLAIN_MLP


def test_torch_adamw_of_the_local_spec_loads_in_place():
    local = {"transformer_impl": "local", "gated_linear_unit": False}
    _, rank, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT, model=local)
    assert resume.parts == {}
    assert resume.resident == rank.state.total
    _, rank, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT, model=local, checkpoint={"load_optim": False})
    assert resume.resident == rank.state.total - 8 * SHARD_PLAIN_MLP


def test_routed_expert_fc1_is_merged_per_local_expert():
    moe = {"num_moe_experts": 4, "moe_ffn_hidden_size": 32, "moe_router_topk": 2}
    _, _, resume = resume_of(model=moe, ddp={}, optimizer={}, checkpoint={"load_optim": False})
    # EP 1: every layer holds 4 experts, each fc1 2 * 32 * 64 = 4096 elements.
    assert resume.parts == {"model.linear_fc1_merged": 2 * 4 * 4 * 4096}


def test_the_verdict_judges_the_larger_peak():
    # Wide and short: 128 tokens of activations against 4 * 12 bytes of state per parameter.
    wide = {**TE, "hidden_size": 2048, "ffn_hidden_size": 8192, "num_attention_heads": 16}
    job_data = {"optimizer": DISTOPT, "ddp": DISTOPT, "train": {"micro_batch_size": 1}}
    est, rank, resume = resume_of(model=wide, **job_data)
    assert resume.load_bytes > rank.peak_bytes
    assert est.verdict_peak_bytes(rank) == resume.peak_bytes == resume.load_bytes
    assert est.needed_bytes(rank) == round(
        resume.load_bytes * (1 + est.verdict_margin.total) + est.non_pytorch_bytes
    )
    fresh = estimate(gate(make_job(model=wide, **job_data)))
    assert fresh.resume(fresh.ranks[0]) is None
    assert fresh.verdict_peak_bytes(fresh.ranks[0]) == fresh.ranks[0].peak_bytes == rank.peak_bytes
    # A GPU with room for the training peak and not for the load, margins included: the resume decides.
    between = (fresh.needed_bytes(fresh.ranks[0]) + est.needed_bytes(rank)) / 2
    cluster = {"gpu_memory_gib": between / 2**30}
    tight = estimate(gate(make_job(model=wide, cluster=cluster, checkpoint={"load": "/ckpt"}, **job_data)))
    assert estimate(gate(make_job(model=wide, cluster=cluster, **job_data))).fits(fresh.ranks[0])
    # over the capacity once the margins are added: "tight" while the bare load still fits
    bare_load = resume.load_bytes + est.non_pytorch_bytes
    assert tight.verdict() == ("tight" if bare_load <= between else "does not fit")


def test_json_carries_both_figures():
    est, rank, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT)
    doc = estimate_json(est, throughput_of(est.derived))["ranks"][0]
    assert doc["peak_bytes"] == rank.peak_bytes
    assert doc["resume"] == {
        "format": "torch_dist",
        "load_bytes": resume.load_bytes,
        "first_step_bytes": rank.peak_bytes,
        "peak_bytes": rank.peak_bytes,  # 128 tokens of TINY: cuBLAS workspaces outweigh the load
        "phase": "first iteration",
        "load_parts": {
            "optimizer.rebuilt_by_load_state_dict": 8 * SHARD,
            "model.linear_fc1_merged": FC1_BF16,
        },
    }
    fresh = estimate(gate(make_job(model=TE)))
    assert estimate_json(fresh, throughput_of(fresh.derived))["ranks"][0]["resume"] is None


def test_torch_dcp_is_not_modeled():
    _, _, resume = resume_of(checkpoint={"ckpt_format": "torch_dcp"})
    assert resume is None


@pytest.mark.parametrize(
    "flags, expected",
    [
        ("--load /ckpt", ("/ckpt", True, "torch_dist", False)),
        (
            "--load /ckpt --no-load-optim --ckpt-format torch --ckpt-fully-parallel-load",
            ("/ckpt", False, "torch", True),
        ),
        ("--load /ckpt --finetune", ("/ckpt", False, "torch_dist", False)),
        ("", (None, True, "torch_dist", False)),
    ],
)
def test_megatron_lm_flags(tmp_path, flags, expected):
    script = tmp_path / "train.sh"
    script.write_text(
        "torchrun pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        f"--seq-length 128 --max-position-embeddings 128 --vocab-size 1000 --micro-batch-size 1 {flags}\n"
    )
    job = load_job(script).job
    c = job.checkpoint
    # without a load there is no resume; the job keeps Megatron's default of loading the optimizer
    loaded = derive(job).optimizer_loaded_at_resume or c.load is None
    assert (c.load, loaded, c.ckpt_format, c.fully_parallel_load) == expected


def test_bridge_checkpoint_section(tmp_path):
    dump = tmp_path / "config.yaml"
    dump.write_text(
        "model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, vocab_size: 1000}\n"
        "checkpoint: {load: /ckpt, load_optim: false, ckpt_format: fsdp_dtensor, fully_parallel_load: true,"
        " save: /ckpt}\n"
    )
    loaded = load_job(dump)
    c = loaded.job.checkpoint
    assert (c.load, c.load_optim, c.ckpt_format, c.fully_parallel_load) == (
        "/ckpt",
        False,
        "fsdp_dtensor",
        True,
    )
    assert loaded.ignored == []
    assert c.save == "/ckpt"


def test_text_shows_a_resume_row_per_rank_within_80_columns():
    from rich.console import Console

    from memtune.estimate.render import print_table

    model = {"pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16"}
    est, _, _ = resume_of(model=model, optimizer=DISTOPT, ddp=DISTOPT)
    console = Console(record=True, width=80)
    print_table(est, console, throughput_of(est.derived))
    lines = console.export_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Resume from a torch_dist checkpoint"))
    rows = [line.split() for line in lines[start + 3 : start + 3 + len(est.ranks)]]
    assert [row[0] for row in rows] == ["0", "1"]
    for row, rank in zip(rows, est.ranks):
        resume = est.resume(rank)
        assert row[2] == f"{resume.load_bytes / 2**30:.2f}" and row[4] == f"{resume.peak_bytes / 2**30:.2f}"
    assert max(len(line.rstrip()) for line in lines) <= 80


def test_first_step_without_the_optimizer_state_runs_forward_and_backward_before_adam_exists():
    _, rank, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"load_optim": False})
    assert rank.peak_phase == "forward/backward"
    without_moments = rank.peak_bytes - 8 * SHARD
    step = rank.state.total + rank.state.optimizer_step_transient + rank.buffers
    assert resume.first_step_bytes == round(max(without_moments, step))
    assert resume.first_step_bytes < rank.peak_bytes
    _, rank, resume = resume_of(optimizer=DISTOPT, ddp=DISTOPT)
    assert resume.first_step_bytes == rank.peak_bytes  # the loaded state is there from the start


def test_fsdp_dtensor_creates_the_optimizer_state_with_one_step_on_zero_gradients():
    # Megatron-FSDP at DP 2, local spec (torch's foreach AdamW): the zero gradients are fp32 main
    # weights' worth of the shard, and the step adds its foreach sqrt(v) of the same size.
    fsdp = {**DISTOPT, "use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}
    ddp = {**fsdp, "megatron_fsdp_main_params_dtype": "fp32"}
    local = {"transformer_impl": "local", "gated_linear_unit": False}
    _, rank, resume = resume_of(
        model=local, optimizer=DISTOPT, ddp=ddp, checkpoint={"ckpt_format": "fsdp_dtensor"}
    )
    assert rank.state.optimizer_params == SHARD_PLAIN_MLP
    assert resume.parts == {"optimizer.dummy_step": 4 * SHARD_PLAIN_MLP + 4 * SHARD_PLAIN_MLP}
    _, _, resume = resume_of(
        model=local,
        optimizer=DISTOPT,
        ddp=ddp,
        checkpoint={"ckpt_format": "fsdp_dtensor", "load_optim": False},
    )
    assert resume.parts == {}
