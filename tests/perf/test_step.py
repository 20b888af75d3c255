"""The step of a job as configured: properties the simulated model must have."""

from __future__ import annotations

import pytest

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.perf import constants as K
from memtune.perf.step import predict_step
from memtune.plan.query import Query, base_job


def job(*overrides: str):  # type: ignore[no-untyped-def]
    base = base_job(Query("llama3-8b", 8, "H100-80GB", 8, 4096, 32, "pretrain"))
    return gate(with_changes(base, [Change.parse(o) for o in overrides])).derived


def test_throughput_is_tokens_over_step() -> None:
    d = job("model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "train.micro_batch_size=1")
    p = predict_step(d)
    tokens = 32 * 4096
    assert p.tokens_per_s_per_gpu == pytest.approx(tokens / p.step_time_s / 8)
    sim = p.simulated
    for compute, exposed, idle in zip(
        sim.stage_compute_s, sim.stage_exposed_comm_s, sim.stage_idle_s, strict=True
    ):
        assert compute + exposed + idle == pytest.approx(p.step_time_s)


def test_overlap_flags_are_read_from_the_job_not_assumed() -> None:
    plain = predict_step(job("model.tensor_model_parallel_size=1", "ddp.overlap_grad_reduce=false"))
    overlapped = predict_step(job("model.tensor_model_parallel_size=1", "ddp.overlap_grad_reduce=true"))
    assert overlapped.step_time_s < plain.step_time_s


def test_pipeline_adds_a_bubble() -> None:
    flat = predict_step(job("model.pipeline_model_parallel_size=1", "train.micro_batch_size=1"))
    piped = predict_step(job("model.pipeline_model_parallel_size=4", "train.micro_batch_size=1"))
    assert min(piped.simulated.stage_idle_s) > 0
    assert piped.simulated.bubble_fraction > flat.simulated.bubble_fraction


def test_small_layers_hit_the_host_floor() -> None:
    # A 512-wide layer's kernels take far less than the host's launch work: each layer's forward
    # costs the floor, so the step grows with layers at LAYER_FIXED_FWD_S x (1 + backward factor).
    small = ["model.hidden_size=512", "model.ffn_hidden_size=2048", "model.num_attention_heads=8",
             "model.num_query_groups=8", "model.kv_channels=64", "train.micro_batch_size=4"]  # fmt: skip
    twelve = predict_step(job(*small, "model.num_layers=12")).step_time_s
    six = predict_step(job(*small, "model.num_layers=6")).step_time_s
    per_layer = K.LAYER_FIXED_FWD_S * (1 + K.BACKWARD_FIXED_FACTOR)
    assert twelve - six == pytest.approx(6 * per_layer * 1, rel=0.05)  # one microbatch per rank


def test_fp8_is_reported_unmeasured() -> None:
    p = predict_step(job("model.fp8=hybrid", "model.fp8_recipe=tensorwise"))
    assert any("FP8" in u for u in p.unmeasured)


def test_layer_wise_activation_offload_costs_its_exposed_host_copies() -> None:
    # TP 1, PP 1, DP 8, GBS 32: 4 microbatches of 4,096 tokens. A layer's activations at the
    # analytic model's 17 bytes per token and hidden unit in bf16 are 2 x 4,096 x 4,096 x 17 =
    # 570 MB, down and back over PCIe at 50 GB/s: 22.8 ms per layer and microbatch at most.
    common = [
        "model.tensor_model_parallel_size=1",
        "train.micro_batch_size=1",
        "ddp.overlap_grad_reduce=false",
    ]
    plain = predict_step(job(*common)).step_time_s
    offload = ["model.cpu_offloading=true", "model.cpu_offloading_num_layers=16"]
    offloaded = predict_step(job(*common, *offload)).step_time_s
    transfer = 2 * 2 * 4096 * 4096 * 17 / 50e9
    assert 0 < offloaded - plain <= 4 * 16 * transfer
