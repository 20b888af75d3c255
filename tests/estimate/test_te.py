"""Transformer Engine's own run-long allocations (memtune/estimate/te.py), hand-computed."""

from memtune.check import gate
from memtune.config.derived import derive
from memtune.estimate import activations as act
from memtune.estimate import estimate
from memtune.estimate.core import EstimateOptions, layer_saved, persistent_buffers
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


UNFUSED_TE = {"transformer_impl": "transformer_engine", "attention_backend": "unfused"}


def test_te_unfused_attention_follows_te_softmax_kernel_rule(job_factory):
    # TINY: micro-batch 2, 4 heads: b x heads = 8, a multiple of 4.
    long = job_factory(model={**UNFUSED_TE, "seq_length": 8192})
    assert derive(long).fused_softmax_kernel  # 16 < 8192 < 16384 on TE
    assert not derive(
        job_factory(model={"seq_length": 8192, "masked_softmax_fusion": True})
    ).fused_softmax_kernel
    assert not derive(job_factory(model={**UNFUSED_TE, "seq_length": 16384})).fused_softmax_kernel
    # b x heads = 1 x 4 is still a multiple of 4; 1 x 2 heads is not, and TE falls back to fp32.
    odd = job_factory(
        model={**UNFUSED_TE, "num_attention_heads": 2, "num_query_groups": 2}, train={"micro_batch_size": 1}
    )
    assert (derive(odd).fused_softmax_kernel, derive(odd).softmax_dtype) == (False, "fp32")
    # Megatron's masked_softmax_fusion does not reach TE's kernel; MLA runs it too.
    mla = job_factory(
        model={
            **UNFUSED_TE,
            "masked_softmax_fusion": False,
            "multi_latent_attention": True,
            "kv_lora_rank": 32,
        }
    )
    assert derive(mla).fused_softmax_kernel and derive(mla).softmax_dtype == "bf16"


def test_te_kernel_keeps_only_the_bf16_probabilities(job_factory):
    job = job_factory(model={**UNFUSED_TE, "attention_softmax_in_fp32": True})
    rank = estimate(gate(job)).ranks[0]
    # 4 layers x micro-batch 2 x 4 heads x 128 x 128 scores x 2 bytes, one microbatch in flight.
    assert rank.modules["decoder.self_attention.core_attention.softmax_output"] == 4 * 2 * 4 * 128 * 128 * 2
    attention = [name for name in rank.modules if ".core_attention." in name]
    assert not any("softmax_fp32" in name or "causal_mask" in name for name in attention)


def test_te_paths_not_pinned_down_widen_the_fit_margin(job_factory):
    assert derive(job_factory(model={"cuda_graph_impl": "local"})).fit_uncertainty == {}  # local spec
    graphs = derive(job_factory(model={**MOE, "cuda_graph_impl": "transformer_engine"}))
    assert graphs.fit_uncertainty == {"CUDA graphs": 0.10, "TE MoE": 0.06}
    assert graphs.fit_margin == graphs.fragmentation_margin + 0.16


def test_the_verdict_is_not_fits_when_the_uncertainty_exceeds_the_headroom(job_factory):
    def at_capacity(gib: float):
        return estimate(
            gate(job_factory(model=MOE, cluster={"num_gpus": 2, "gpu": "H200", "gpu_memory_gib": gib}))
        )

    est = at_capacity(100.0)
    rank = est.worst
    assert est.uncertainty == {"TE MoE": 0.06}
    with_fragmentation_only = rank.peak_bytes * (1 + est.margin) + est.non_pytorch_bytes
    # Room for the fragmentation margin and half the uncertainty: not "fits", still "tight".
    between = (with_fragmentation_only + 0.03 * rank.peak_bytes) / 2**30
    assert at_capacity(between).verdict() == "tight"
    assert at_capacity((with_fragmentation_only + 0.07 * rank.peak_bytes) / 2**30).verdict() == "fits"


def test_fp8_weight_copies_follow_the_settings(job_factory):
    sharded = {"optimizer": {"use_distributed_optimizer": True}, "ddp": {"use_distributed_optimizer": True}}
    cases = [
        ({**TE}, "none"),  # bf16: no FP8 weights at all
        ({"fp8": "hybrid"}, "none"),  # the local spec has no TE linears
        ({**TE, "fp8": "hybrid"}, "cached"),
        ({**TE, "fp8": "hybrid", "disable_parameter_transpose_cache": True}, "per_microbatch"),
        (
            {**TE, "fp8": "hybrid", "fp8_param_gather": True, "disable_parameter_transpose_cache": True},
            "none",
        ),
    ]
    for model, copies in cases:
        assert derive(job_factory(model=model, **sharded)).fp8_weight_copies == copies, model


def test_weights_quantized_every_microbatch_are_saved_with_it_not_cached(job_factory):
    # The same 61,440 linear weights a layer (above), 2 bytes each, now saved by every
    # microbatch's forward for its backward: 4 layers x 2 x 61,440 per microbatch in flight.
    job = job_factory(model={**TE, "fp8": "hybrid", "disable_parameter_transpose_cache": True})
    d = derive(job)
    assert _allocations(job) == {}
    saved = layer_saved(d, act.dims_of(d), flavour_of(d), 0, EstimateOptions())
    # attention: qkv 8,192 + proj 4,096; MLP: fc1 32,768 + fc2 16,384
    assert saved.tensors["self_attention.fp8_weight_copies"] == 2 * 12288
    assert saved.tensors["mlp.fp8_weight_copies"] == 2 * 49152
    cached = derive(job_factory(model={**TE, "fp8": "hybrid"}))
    without = layer_saved(cached, act.dims_of(cached), flavour_of(cached), 0, EstimateOptions())
    assert saved.total - without.total == 2 * 61440
    # a recomputed MLP runs its forward without autograd and saves no copy
    recomputed = derive(
        job_factory(
            model={
                **TE,
                "fp8": "hybrid",
                "disable_parameter_transpose_cache": True,
                "recompute_granularity": "selective",
                "recompute_modules": ["mlp"],
            }
        )
    )
    kept = layer_saved(recomputed, act.dims_of(recomputed), flavour_of(recomputed), 0, EstimateOptions())
    assert "mlp.fp8_weight_copies" not in kept.tensors
    assert kept.tensors["self_attention.fp8_weight_copies"] == 2 * 12288
