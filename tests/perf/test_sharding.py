"""The data-parallel collectives of each sharding strategy (memtune/perf/sharding.py) and the
worked example of docs/plan.md (benchmarks/fsdp_price.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived
from memtune.estimate.params import chunk_params
from memtune.perf.collectives import Op, bus_bandwidth, collective
from memtune.perf.sharding import chunk_work, exposed, groups
from memtune.perf.step import predict_step
from memtune.plan.query import Query, base_job

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fsdp_price import DIST_OPT, FSDP, job

H = 12288  # GPT-3 175B


def test_exposed_is_the_first_gather_and_what_compute_does_not_cover() -> None:
    assert exposed(10.0, 1.0, 5.0) == pytest.approx(5.0)  # 1 + (10 - 1 - 5)
    assert exposed(3.0, 1.0, 5.0) == pytest.approx(1.0)  # the rest hides behind compute


def test_fsdp_gathers_each_layer_in_forward_and_backward_and_reduce_scatters_it() -> None:
    # GPT-3 175B at TP 8 on 32 H100s: DP 4, one member per node, so every collective crosses the
    # adapters: the rank's one 400 Gb/s NIC at 80%, 40 GB/s of bus bandwidth.
    d = job("GPT-3 175B", 32, 8, FSDP)
    chunk = d.chunks[0][0]
    held = chunk_params(d, chunk)
    dense, _ = groups(d)
    assert (dense.size, dense.domains(d.network), dense.per_domain(d.network)) == (4, 4, 1)
    assert bus_bandwidth(dense, d.network) == pytest.approx(40e9)
    # One layer at TP 8, counted by hand: QKV and FC1 column-parallel (weights and biases split),
    # projection and FC2 row-parallel (biases whole), two LayerNorms (weight and bias).
    layer = 12 * H * H // 8 + (3 * H + 4 * H) // 8 + 2 * H + 4 * H
    vocab_rows = d.padded_vocab_size * H / 8
    positions, final_norm = 2048 * H, 2 * H
    assert held.dense + held.replicated == pytest.approx(96 * layer + vocab_rows + positions + final_norm)
    # Its bf16 gather: a ring over 4 ranks on 4 nodes moves 3/4 of it at 40 GB/s, after NCCL's
    # Simple-protocol latency (8.4 us base, 14 us per network step, 3 steps).
    one = collective(Op.ALL_GATHER, 2 * layer, dense, d.network, "H100-80GB")
    assert (one.algorithm, one.protocol) == ("ring", "Simple")
    assert one.seconds == pytest.approx(0.75 * 2 * layer / 40e9 + (8.4 + 3 * 14) * 1e-6)
    work = chunk_work(d, d.network, "H100-80GB", held.dense + held.replicated, held.expert, 96, None)
    unit = (held.dense + held.replicated) / 96
    gather = collective(Op.ALL_GATHER, 2 * unit, dense, d.network, "H100-80GB").seconds
    scatter = collective(Op.REDUCE_SCATTER, 2 * unit, dense, d.network, "H100-80GB").seconds
    assert work.forward_s == pytest.approx(96 * gather)
    assert work.backward_s == pytest.approx(96 * (gather + scatter))
    assert work.first_gather_s == pytest.approx(gather)
    assert (work.grad_reduce_s, work.param_gather_s) == (0.0, 0.0)


def _strategy(strategy: str) -> dict[str, bool]:
    base = base_job(Query("llama3-8b", 16, "H100-80GB", 8, 4096, 64, "pretrain"))
    changes = [
        "ddp.use_megatron_fsdp=true",
        f"ddp.data_parallel_sharding_strategy={strategy}",
        "ddp.use_distributed_optimizer=false",
        "optimizer.use_distributed_optimizer=false",
        "ddp.overlap_grad_reduce=true",
    ]
    d = gate(with_changes(base, [Change.parse(c) for c in changes])).derived
    held = chunk_params(d, d.chunks[0][0])
    w = chunk_work(d, d.network, "H100-80GB", held.dense + held.replicated, held.expert, 32, None)
    return {
        "gathers per microbatch": w.forward_s > 0,
        "reduces per microbatch": w.backward_s > w.forward_s,
        "reduces once": w.grad_reduce_s > 0,
        "gathers once": w.param_gather_s > 0,
    }


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("no_shard", (False, False, True, False)),
        ("optim", (False, False, True, True)),
        ("optim_grads", (False, True, False, True)),
        ("optim_grads_params", (True, True, False, False)),
    ],
)
def test_each_strategy_moves_what_megatron_fsdp_moves(strategy: str, expected: tuple[bool, ...]) -> None:
    assert tuple(_strategy(strategy).values()) == expected


def test_fsdp_gathers_routed_experts_over_the_expert_data_parallel_group() -> None:
    base = base_job(Query("qwen3-30b-a3b", 64, "H100-80GB", 8, 4096, 256, "pretrain"))
    changes = FSDP + ["model.expert_model_parallel_size=8", "model.tensor_model_parallel_size=1"]
    d = gate(with_changes(base, [Change.parse(c) for c in changes])).derived
    dense, experts = groups(d)
    assert (dense.size, dense.stride, experts.size, experts.stride) == (64, 1, 8, 8)
    held = chunk_params(d, d.chunks[0][0])
    with_experts = chunk_work(d, d.network, "H100-80GB", held.dense + held.replicated, held.expert, 48, None)
    without = chunk_work(d, d.network, "H100-80GB", held.dense + held.replicated, 0.0, 48, None)
    per_unit = collective(Op.ALL_GATHER, 2 * held.expert / 48, experts, d.network, "H100-80GB").seconds
    assert with_experts.forward_s - without.forward_s == pytest.approx(48 * per_unit)


def _vs_distributed_optimizer(model: str, gpus: int, tp: int) -> float:
    fsdp, dist = predict_step(job(model, gpus, tp, FSDP)), predict_step(job(model, gpus, tp, DIST_OPT))
    return fsdp.tokens_per_s_per_gpu / dist.tokens_per_s_per_gpu - 1


def test_worked_example_fsdp_is_free_only_where_compute_hides_its_bytes() -> None:
    # docs/plan.md, "Megatron-FSDP, from its bytes": Llama 3 70B at TP 1 hides 1.3-2.2 s of
    # communication behind 6.5 s of compute per microbatch at every size; GPT-3 175B at TP 8 moves
    # 131 GB per GPU and microbatch through one NIC behind 0.44 s of compute.
    for gpus in (32, 256, 1536):
        assert abs(_vs_distributed_optimizer("Llama 3 70B", gpus, 1)) < 0.01
    tp1 = [_vs_distributed_optimizer("GPT-3 175B", gpus, 1) for gpus in (32, 256, 1536)]
    assert tp1[0] > tp1[1] > tp1[2] and tp1[2] < -0.15  # the ring's latency grows with its span
    tp8 = [_vs_distributed_optimizer("GPT-3 175B", gpus, 8) for gpus in (32, 256, 1536)]
    assert tp8[0] > tp8[1] > tp8[2] and tp8[0] < -0.6


def _lora_70b(gpus: int) -> Derived:
    # MLPerf's Llama 2 70B LoRA on GB200 NVL72 racks (v5.1: 18x4 and 128x4 at CP 8): adapters
    # of rank 16 on the attention's QKV and output projection, bf16 gradients, the
    # distributed optimizer without overlap.
    base = base_job(Query("llama3-70b", gpus, "GB200", 4, 8192, gpus // 8, "lora"))
    changes = [
        "model.vocab_size=32000",
        "model.tensor_model_parallel_size=1",
        "model.context_parallel_size=8",
        "peft.dim=16",
        "peft.target_modules=[linear_qkv,linear_proj]",
        "optimizer.use_distributed_optimizer=true",
        "ddp.use_distributed_optimizer=true",
        "ddp.grad_reduce_in_fp32=false",
        "ddp.overlap_grad_reduce=false",
        "ddp.overlap_param_gather=false",
    ]
    return gate(with_changes(base, [Change.parse(c) for c in changes])).derived


def test_lora_reduces_and_gathers_its_adapters_alone() -> None:
    # Megatron's DDP puts only parameters that require a gradient in its buffers: under LoRA
    # the adapters. Per layer, rank 16: QKV's A (16 x 8192) and B (10240 x 16), the projection's
    # A (16 x 8192) and B (8192 x 16); 80 layers.
    adapters = 80 * 16 * (8192 + 10240 + 8192 + 8192)
    assert adapters == 44_564_480
    for gpus in (72, 512):
        d = _lora_70b(gpus)
        held = chunk_params(d, d.chunks[0][0])
        dense, _ = groups(d)
        assert dense.size == gpus  # DP x CP
        work = chunk_work(
            d, d.network, "GB200", held.dense + held.replicated, held.expert, 80, (adapters, 0.0)
        )
        scatter = collective(Op.REDUCE_SCATTER, 2 * adapters, dense, d.network, "GB200").seconds
        gather = collective(Op.ALL_GATHER, 2 * adapters, dense, d.network, "GB200").seconds
        assert (work.grad_reduce_s, work.param_gather_s) == (pytest.approx(scatter), pytest.approx(gather))
        assert (work.forward_s, work.backward_s, work.buckets) == (0.0, 0.0, 1)
    # inside one 72-GPU NVLink domain the ring runs at NVLink's 900 GB/s x 0.8; over 512 GPUs it
    # leaves each of 8 racks through the adapters, a tray's four at 50 GB/s x 0.8 = 160 GB/s
    inside, across = groups(_lora_70b(72))[0], groups(_lora_70b(512))[0]
    network = _lora_70b(512).network
    assert (inside.domains(network), across.domains(network)) == (1, 8)
    assert bus_bandwidth(inside, network) == pytest.approx(720e9)
    assert bus_bandwidth(across, network) == pytest.approx(160e9)


def test_a_lora_step_across_racks_pays_for_its_adapters_gradients() -> None:
    # without overlap the adapters' reduce-scatter and gather follow the backward in full: the
    # step grows by what the two cost more across racks than inside one
    adapters = 80 * 16 * (8192 + 10240 + 8192 + 8192)

    def both(d: Derived) -> float:
        group = groups(d)[0]
        return sum(
            collective(op, 2 * adapters, group, d.network, "GB200").seconds
            for op in (Op.REDUCE_SCATTER, Op.ALL_GATHER)
        )

    small, large = _lora_70b(72), _lora_70b(512)
    grown = predict_step(large).step_time_s - predict_step(small).step_time_s
    assert grown == pytest.approx(both(large) - both(small), rel=0.05)
