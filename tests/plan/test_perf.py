"""Properties of the throughput model that follow from its definition."""

from dataclasses import replace

from memtune.catalog.gpus import get_gpu
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.perf import constants as K
from memtune.perf import predict, predict_derived
from memtune.perf.model import gemm_efficiency


def _checked(base, **model):
    return gate(with_changes(base, [Change(f"model.{k}", v) for k, v in model.items()]))


def test_gemm_efficiency_follows_the_half_size_curve():
    assert (
        abs(gemm_efficiency(1e9, 1e9, 1e9) - K.GEMM_PEAK_FRACTION / (1 + 3 * K.GEMM_HALF_SIZE / 1e9)) < 1e-12
    )
    h = K.GEMM_HALF_SIZE
    assert abs(gemm_efficiency(h, 1e12, 1e12) - K.GEMM_PEAK_FRACTION / 2) < 1e-6
    # A smaller tensor-parallel shard (smaller K) runs less efficiently.
    assert gemm_efficiency(8192, 8192, 14336 // 8) < gemm_efficiency(8192, 8192, 14336 // 2)


def test_bubble_is_p_minus_1_over_v_m_of_a_microbatch(dense_base):
    checked = _checked(dense_base, pipeline_model_parallel_size=4, pipeline_dtype="bf16")
    d = checked.derived
    gpu = get_gpu(dense_base.cluster.gpu)
    one = predict_derived(d, gpu)
    two = predict_derived(d.with_knobs(replace(d.knobs, vpp=2)), gpu)
    m = d.num_microbatches
    per_microbatch = one.breakdown["pipeline bubble"] / 3
    assert (
        abs(
            one.breakdown["compute"] / m
            - (per_microbatch - one.breakdown["tensor/expert/context parallel comm"] / m)
        )
        < 1e-9
    )
    assert abs(two.breakdown["pipeline bubble"] - one.breakdown["pipeline bubble"] / 2) < 1e-12


def test_recompute_adds_forward_time_and_lora_drops_weight_gradients(dense_base, moe_lora_base):
    plain = predict(_checked(dense_base))
    full = predict(
        _checked(dense_base, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    )
    assert full.breakdown["compute: recompute"] > 0 == plain.breakdown["compute: recompute"]
    assert full.step_time_s > plain.step_time_s
    lora = gate(moe_lora_base)
    tuned = gate(moe_lora_base.model_copy(update={"peft": None}))
    assert predict(lora).breakdown["compute"] < predict(tuned).breakdown["compute"]


def test_tokens_per_second_is_the_batch_over_the_step(dense_base):
    checked = _checked(dense_base)
    p = predict(checked)
    d = checked.derived
    tokens = d.global_batch_size * d.model.seq_length
    assert abs(p.tokens_per_s_per_gpu - tokens / p.step_time_s / d.world_size) < 1e-6
    assert abs(p.step_time_s - sum(p.breakdown.values())) < 1e-12


def test_a_config_keeps_its_own_grad_reduce_overlap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Issue 23 item 6: the planner's base job is the job as written; only a preset (which has no
    # job) starts with overlap_grad_reduce on.
    from memtune.plan.query import Query, base_job

    config = tmp_path / "job.yaml"
    config.write_text("model: {preset: llama3-8b}\ncluster: {num_gpus: 8}\ntrain: {global_batch_size: 32}\n")
    assert (
        base_job(Query(str(config), 8, None, None, None, None, "pretrain")).ddp.overlap_grad_reduce is False
    )
    assert base_job(Query("llama3-8b", 8, None, None, None, 32, "pretrain")).ddp.overlap_grad_reduce is True
