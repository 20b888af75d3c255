"""MoE dispatch and combine by dispatcher (memtune/perf/moe.py), counted by hand on DGX H100s."""

from __future__ import annotations

from math import comb

import pytest

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived
from memtune.perf.moe import dispatch_s, reached
from memtune.plan.query import Query, base_job

H = 2048  # Qwen3-30B-A3B: 128 experts, top-8


def qwen3_30b(dispatcher: str, ep: int, gpus: int = 16) -> Derived:
    base = base_job(Query("qwen3-30b-a3b", gpus, "H100-80GB", 8, 4096, 64, "pretrain"))
    changes = [f"model.expert_model_parallel_size={ep}", f"model.moe_token_dispatcher_type={dispatcher}"]
    return gate(with_changes(base, [Change.parse(c) for c in changes])).derived


def test_all_to_all_sends_top_k_rows_split_between_nvlink_and_the_adapter() -> None:
    # EP 16 over two nodes: tokens x 8 rows of 2 x 2048 bytes, 7/16 to NVLink peers at 370 GB/s
    # (NCCL's effective NVLink rate on DGX H100), 8/16 through the rank's own 400 Gb/s adapter at
    # 48 GB/s, concurrently; NCCL's Simple latency 8.4 + 14 us.
    d = qwen3_30b("alltoall", 16)
    rows = 4096 * 8 * 2 * H
    expected = 22.4e-6 + max(rows * 7 / 16 / 370e9, rows * 8 / 16 / 48e9)
    assert dispatch_s(d, 4096, d.network) == pytest.approx(expected)
    # Inside one node: NVLink only, 7/8 of the rows.
    one_node = qwen3_30b("alltoall", 8, gpus=8)
    assert dispatch_s(one_node, 4096, one_node.network) == pytest.approx(11.8e-6 + rows * 7 / 8 / 370e9)


def test_flex_sends_a_token_once_per_rank_and_once_per_remote_node() -> None:
    # DeepEP/HybridEP: a token goes to each rank holding one of its 8 experts (8 of 128 per rank),
    # over RDMA once to the other node when any of its 64 experts is chosen, forwarded over NVLink.
    d = qwen3_30b("flex", 16)
    rank = 1 - comb(120, 8) / comb(128, 8)
    node = 1 - comb(64, 8) / comb(128, 8)
    token = 2 * H * 4096
    nvlink = token * (7 * rank + 8 * rank - node)
    rdma = token * node
    expected = 22.4e-6 + max(nvlink / (450e9 * 153 / 160), rdma / (50e9 * 43 / 50))
    assert dispatch_s(d, 4096, d.network) == pytest.approx(expected)
    # Fewer bytes than the all-to-all's 8 rows per token: 6.2 other ranks on average, one node.
    assert 7 * rank + 8 * rank == pytest.approx(6.18, abs=0.01)
    assert dispatch_s(d, 4096, d.network) < dispatch_s(qwen3_30b("alltoall", 16), 4096, d.network)


def test_group_limited_routing_reaches_a_node_only_through_its_group() -> None:
    # DeepSeek-V3: 256 experts in 8 groups, a token's 8 experts from 4 groups; a node of 8 ranks
    # at EP 64 holds one group (32 experts): chosen with probability 4/8, then reached unless all
    # 8 experts fall in the other 3 chosen groups.
    assert reached(256, 8, 32, 8, 4) == pytest.approx(0.5 * (1 - comb(96, 8) / comb(128, 8)))
    # Ungrouped: at least one of 32 held experts among 8 of 256.
    assert reached(256, 8, 32, None, None) == pytest.approx(1 - comb(224, 8) / comb(256, 8))


def test_no_expert_parallelism_moves_nothing() -> None:
    d = qwen3_30b("alltoall", 1, gpus=8)
    assert dispatch_s(d, 4096, d.network) == 0.0


def test_the_sinkhorn_router_adds_its_measured_call_to_each_moe_forward_and_waits() -> None:
    from memtune.catalog.gpus import get_gpu
    from memtune.perf import constants as K
    from memtune.perf.layer import ShapePricer

    def moe_layer(balancing: str):  # type: ignore[no-untyped-def]
        d = gate(
            with_changes(
                qwen3_30b("alltoall", 8).job,
                [Change.parse(f"model.moe_router_load_balancing_type={balancing}")],
            )
        ).derived
        return d, ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP).layer(is_moe=True)

    plain_job, plain = moe_layer("aux_loss")
    sinkhorn_job, sinkhorn = moe_layer("sinkhorn")
    assert sinkhorn_job.sinkhorn_routing and not plain_job.sinkhorn_routing
    # under no_grad: the forward's host work grows by one measured call, the backward's not
    assert sinkhorn.host_fwd - plain.host_fwd == pytest.approx(K.SINKHORN_ROUTER_HOST_S)
    assert sinkhorn.host_bwd == plain.host_bwd and sinkhorn.syncs


def test_a_moe_layers_host_work_is_its_block_its_experts_and_its_exchanges() -> None:
    from memtune.catalog.gpus import get_gpu
    from memtune.perf import constants as K
    from memtune.perf.layer import ShapePricer

    def host(dispatcher: str, *more: str) -> tuple[float, float]:
        changes = ["model.tensor_model_parallel_size=1", *more]
        d = gate(with_changes(qwen3_30b(dispatcher, 8).job, [Change.parse(c) for c in changes])).derived
        pricer = ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP)
        moe, dense = pricer.layer(is_moe=True), pricer.layer(is_moe=False)
        return moe.host_fwd - dense.host_fwd, moe.host_bwd - dense.host_bwd

    backward = K.MEGATRON_LM_LOOP.backward_factor
    exchanged = K.MOE_DISPATCHER_HOST_FWD_S["alltoall"]
    # grouped experts at EP 8: the measured layer (1.554 ms, 0.569 ms) and 128 experts of the
    # model at 1.8 us and 0.6 us, plus what the exchanges add (the backward backward_factor times)
    grouped = host("alltoall")
    assert grouped[0] == pytest.approx(1.554e-3 + 128 * 1.8e-6 + exchanged)
    assert grouped[1] == pytest.approx(0.569e-3 + 128 * 0.6e-6 + backward * exchanged)
    # sequential experts add their 16 local modules, 180.5 us and 228.0 us each
    sequential = host("alltoall", "model.moe_grouped_gemm=false")
    assert sequential[0] - grouped[0] == pytest.approx(16 * 180.5e-6)
    assert sequential[1] - grouped[1] == pytest.approx(16 * 228.0e-6)
    # the all-gather dispatcher: its own layer's work, none per expert of the model
    assert host("allgather")[0] == pytest.approx(0.641e-3 + K.MOE_DISPATCHER_HOST_FWD_S["allgather"])


def test_the_moe_host_constants_are_what_the_hostmoe_runs_give() -> None:
    """benchmarks/host_moe.py's rule on the committed runs, forward and backward together."""
    import runpy
    from pathlib import Path

    from memtune.perf import constants as K

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "host_moe.py"))
    runs = script["medians"](script["RESULTS"] / "hostmoe-h100.results.jsonl")
    a_a2a, b_a2a, c_a2a = script["parts"](runs, "alltoall")
    a_ag, b_ag, c_ag = script["parts"](runs, "allgather")
    # the all-gather dispatcher's cost per expert of the model comes out negative: not taken,
    # its cost per local expert then the EP-1 slope alone
    assert b_ag < 0 and "allgather" not in K.MOE_EXPERT_HOST_S
    expert = K.SEQUENTIAL_EXPERT_FWD_S + K.SEQUENTIAL_EXPERT_BWD_S
    assert expert == pytest.approx((a_a2a + (a_ag + b_ag)) / 2, rel=1e-3)
    assert sum(K.MOE_LAYER_HOST_S["alltoall"]) == pytest.approx(c_a2a, rel=1e-3)
    assert sum(K.MOE_LAYER_HOST_S["allgather"]) == pytest.approx(c_ag, rel=1e-3)
    assert sum(K.MOE_EXPERT_HOST_S["alltoall"]) == pytest.approx(b_a2a, rel=0.05)
