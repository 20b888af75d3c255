"""Transformer Engine's own run-long allocations (memtune/estimate/te.py), hand-computed."""

from memtune.check import gate
from memtune.config.derived import derive
from memtune.estimate import estimate
from memtune.estimate.core import persistent_buffers
from memtune.estimate.flavour import flavour_of
from memtune.estimate.te import persistent_allocations

MIB = 2**20
TE_WORKSPACE = 32 * MIB + 1024  # transformer_engine/pytorch/cpp_extensions/gemm.py on Hopper
TE = {"transformer_impl": "transformer_engine", "attention_backend": "flash"}
MOE = {**TE, "num_moe_experts": 4, "moe_ffn_hidden_size": 128, "moe_router_topk": 2}


def _allocations(job):
    d = derive(job)
    return persistent_allocations(d, d.chunks[0])


def test_local_spec_allocates_nothing_of_transformer_engine(job_factory):
    job = job_factory(model={"moe_grouped_gemm": True, "num_moe_experts": 4, "fp8": "hybrid"})
    assert _allocations(job) == {}


def test_grouped_gemm_takes_one_workspace_per_compute_stream(job_factory):
    assert _allocations(job_factory(model={**MOE, "moe_grouped_gemm": True})) == {
        "te.grouped_gemm_workspaces": 4 * TE_WORKSPACE
    }
    assert _allocations(job_factory(model=MOE)) == {}  # SequentialMLP: TE's single workspace only


def test_userbuffers_gemm_workspace_is_three_workspaces(job_factory):
    job = job_factory(
        model={**TE, "tp_comm_overlap": True, "tensor_model_parallel_size": 2, "sequence_parallel": True}
    )
    assert _allocations(job) == {"te.userbuffers_gemm_workspace": 3 * TE_WORKSPACE}


def test_fp8_weight_cache_is_two_bytes_per_linear_weight(job_factory):
    # Per layer: qkv 64 x (4 + 2 x 2 groups) x 16 = 8192, proj 4096, fc1 2 x 256 x 64 = 32768,
    # fc2 16384: 61440; 4 layers; norms are not quantized.
    job = job_factory(model={**TE, "fp8": "hybrid"})
    assert _allocations(job) == {"te.fp8_weight_caches": 2 * 4 * 61440}
    # FP8 parameters are the FP8 copies themselves: no cache beside them.
    job = job_factory(
        model={**TE, "fp8": "hybrid", "fp8_param_gather": True},
        optimizer={"use_distributed_optimizer": True},
        ddp={"use_distributed_optimizer": True},
    )
    assert _allocations(job) == {}


def test_allocations_are_in_the_persistent_buffers_and_the_explanation(job_factory):
    plain = job_factory(model=MOE)
    grouped = job_factory(model={**MOE, "moe_grouped_gemm": True})
    d_plain, d_grouped = derive(plain), derive(grouped)
    added = persistent_buffers(d_grouped, flavour_of(d_grouped), d_grouped.chunks[0]) - persistent_buffers(
        d_plain, flavour_of(d_plain), d_plain.chunks[0]
    )
    assert added == 4 * TE_WORKSPACE
    rank = estimate(gate(grouped)).ranks[0]
    assert rank.te_allocations == {"te.grouped_gemm_workspaces": 4 * TE_WORKSPACE}
