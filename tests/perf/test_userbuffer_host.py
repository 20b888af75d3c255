"""What Transformer Engine's userbuffer overlap's extra GEMM calls cost: the host's work for each
(``ShapePricer.userbuffer_chunks``, ``UB_CHUNK_HOST_S``) and the GPU's own cost of each chunk
boundary (``ShapePricer.userbuffer_overlap``, ``UB_CHUNK_DEVICE_S``), counted here by hand."""

from __future__ import annotations

import pytest

from memtune.catalog.gpus import get_gpu
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived
from memtune.perf import constants as K
from memtune.perf.layer import ShapePricer
from memtune.plan.query import Query, base_job


def derived(*changes: str) -> Derived:
    base = base_job(Query("llama3-70b", 32, "H100-80GB", 8, 4096, 32, "pretrain"))
    sp = ["model.sequence_parallel=true", "train.micro_batch_size=1", *changes]
    return gate(with_changes(base, [Change.parse(c) for c in sp])).derived


def host(d: Derived) -> tuple[float, float]:
    price = ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP).layer(False)
    return price.host_fwd, price.host_bwd


@pytest.mark.parametrize("tp, forward, backward", [(8, 20, 14), (4, 12, 6), (2, 8, 2)])
def test_the_extra_calls_of_the_default_overlap(tp: int, forward: int, backward: int) -> None:
    # forward: qkv and fc1 by ring exchange (TP calls each), proj and fc2 pipelined in 4; backward:
    # proj's and fc2's data gradients by ring exchange, the rest in bulk (one call each)
    layout = f"model.tensor_model_parallel_size={tp}"
    overlapped = host(derived(layout, "model.tp_comm_overlap=true"))
    plain = host(derived(layout))
    assert overlapped[0] - plain[0] == pytest.approx(forward * K.UB_CHUNK_HOST_S)
    assert overlapped[1] - plain[1] == pytest.approx(backward * K.UB_CHUNK_HOST_S)


def test_a_ring_exchange_reduce_scatter_calls_tp_times() -> None:
    # Bridge's H100 FP8 configurations reduce-scatter proj and fc2 by ring exchange: at TP 8 the
    # forward's four GEMMs run as 8 calls each, 28 more; the backward's stay at 14
    name = "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"
    ring = host(derived("model.tensor_model_parallel_size=8", "model.tp_comm_overlap=true",
                        f"model.tp_comm_overlap_cfg={name}"))  # fmt: skip
    plain = host(derived("model.tensor_model_parallel_size=8"))
    assert ring[0] - plain[0] == pytest.approx(28 * K.UB_CHUNK_HOST_S)
    assert ring[1] - plain[1] == pytest.approx(14 * K.UB_CHUNK_HOST_S)


def test_a_layer_captured_in_a_cuda_graph_adds_no_calls() -> None:
    # a per-layer graph replays the whole layer: the host only replays it
    graphed = host(derived("model.tensor_model_parallel_size=8", "model.tp_comm_overlap=true",
                           "model.cuda_graph_impl=local"))  # fmt: skip
    plain = host(derived("model.tensor_model_parallel_size=8", "model.cuda_graph_impl=local"))
    assert graphed == plain


@pytest.mark.parametrize("tp, forward, backward", [(8, 20, 14), (4, 12, 6)])
def test_each_chunk_boundary_costs_the_gpu_its_measured_time(
    tp: int, forward: int, backward: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same extra calls as the host's: each one more chunk boundary on the GPU
    d = derived(f"model.tensor_model_parallel_size={tp}", "model.tp_comm_overlap=true")
    pricer = ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP)
    measured = pricer.layer(False)
    monkeypatch.setattr(K, "UB_CHUNK_DEVICE_S", 0.0)
    free = ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP).layer(False)
    boundary = 3.0e-6 * pricer.kernel_factor
    assert measured.fwd - free.fwd == pytest.approx(forward * boundary)
    assert measured.bwd - free.bwd == pytest.approx(backward * boundary)
