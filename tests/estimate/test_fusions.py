"""The fusion flags real stacks turn on: which softmax runs, what each path keeps, and the
cross-entropy implementations, each checked against numbers worked out by hand."""

import pytest

from memtune.config import derive
from memtune.estimate import activations as act

# TINY (tests/estimate/conftest.py): seq 128, mbs 2, 4 heads, TP 1, bf16, unfused attention.
SCORES = 2 * 4 * 128 * 128  # mbs x heads x seq x seq


def _attention(job):
    d = derive(job)
    return act.attention(d, act.dims_of(d), _flavour(d), recompute_core=False)


def _flavour(d):
    from memtune.estimate.flavour import flavour_of

    return flavour_of(d)


@pytest.mark.parametrize(
    ("model", "train", "kernel"),
    [
        ({}, {}, True),  # 16 < 128 <= 4096, b * np = 8, 8 rows per block
        ({"seq_length": 8192}, {}, False),  # above the kernel's 4096 keys
        ({"seq_length": 16}, {}, False),  # needs more than 16 keys
        ({"seq_length": 130}, {}, False),  # not a multiple of 4
        ({"tensor_model_parallel_size": 4}, {"micro_batch_size": 1}, False),  # b * np = 1
        # b * np = 4: enough for 256 keys (4 rows per block), not for 128 (8 rows per block)
        ({"tensor_model_parallel_size": 2, "seq_length": 256}, {"micro_batch_size": 2}, True),
        ({"tensor_model_parallel_size": 2}, {"micro_batch_size": 2}, False),
        ({"tensor_model_parallel_size": 4}, {"micro_batch_size": 2}, False),  # b * np = 2
        ({"bf16": False}, {}, False),  # fp32 scores never take the kernel
        ({"attention_backend": "flash"}, {}, False),
        ({"masked_softmax_fusion": False}, {}, False),
    ],
)
def test_fused_softmax_kernel_follows_megatrons_availability_rule(job_factory, model, train, kernel):
    job = job_factory(model={"masked_softmax_fusion": True, **model}, train=train)
    assert derive(job).fused_softmax_kernel is kernel


def test_batches_per_block_rule_for_short_keys(job_factory):
    # 32 keys: warps of 32 lanes, two rows per warp, four warps -> 8 rows per block; b * np = 4
    # passes the multiple-of-4 test but not the block test.
    job = job_factory(
        model={"masked_softmax_fusion": True, "seq_length": 32, "tensor_model_parallel_size": 2},
        train={"micro_batch_size": 2},
    )
    assert derive(job).fused_softmax_kernel is False
    job = job_factory(model={"masked_softmax_fusion": True, "seq_length": 32}, train={"micro_batch_size": 2})
    assert derive(job).fused_softmax_kernel is True  # b * np = 8


def test_kernel_keeps_only_the_half_precision_softmax(job_factory):
    saved = _attention(job_factory(model={"masked_softmax_fusion": True}))
    kept = {k: v for k, v in saved.tensors.items() if k.startswith("core_attention.") and "soft" in k}
    assert kept == {"core_attention.softmax_output": 2 * SCORES}
    assert "core_attention.causal_mask" not in saved.tensors
    assert (saved.fwd_transient, saved.bwd_transient) == (2 * SCORES, 2 * SCORES)


def test_torch_softmax_in_half_precision_keeps_no_fp32_copy(job_factory):
    saved = _attention(job_factory(model={"attention_softmax_in_fp32": False}))
    assert saved.tensors["core_attention.softmax_output"] == 2 * SCORES
    assert "core_attention.softmax_fp32" not in saved.tensors
    assert saved.tensors["core_attention.causal_mask"] == 128 * 128


def test_kernel_with_dropout_keeps_mask_and_output(job_factory):
    saved = _attention(job_factory(model={"masked_softmax_fusion": True, "attention_dropout": 0.1}))
    assert saved.tensors["core_attention.softmax_output"] == 2 * SCORES
    assert saved.tensors["core_attention.dropout_mask"] == SCORES
    assert saved.tensors["core_attention.dropout_output"] == 2 * SCORES


def _loss(job):
    d = derive(job)
    return act.output_and_loss(d, act.dims_of(d))


def test_native_fused_cross_entropy_holds_one_more_fp32_copy_in_forward(job_factory):
    logits = 256 * 1000  # tokens x padded vocab (1000 is a multiple of 8)
    unfused = _loss(job_factory())
    native = _loss(job_factory(model={"cross_entropy_loss_fusion": True}))
    assert native.tensors == unfused.tensors
    assert native.fwd_transient - unfused.fwd_transient == 4 * logits


def test_te_cross_entropy_keeps_only_the_bf16_logits(job_factory):
    saved = _loss(
        job_factory(
            model={
                "cross_entropy_loss_fusion": True,
                "cross_entropy_fusion_impl": "te",
                "transformer_impl": "transformer_engine",
            }
        )
    )
    assert saved.tensors["loss.logits_grad_bf16"] == 2 * 256 * 1000
    assert "loss.softmax_fp32" not in saved.tensors


def _estimate(job):
    from memtune.check import gate
    from memtune.estimate import estimate

    return estimate(gate(job))


PP2 = {"pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16", "gradient_accumulation_fusion": True}


@pytest.mark.parametrize(("limit", "deferred", "at_peak"), [(0, 8, 7), (3, 3, 3), (20, 8, 7)])
def test_deferred_embedding_wgrad_keeps_earlier_microbatches_on_the_last_stage(
    job_factory, limit, deferred, at_peak
):
    # GBS 16 / (MBS 2 x DP 1) = 8 microbatches. Without a limit (or a limit above 8) the last
    # microbatch's own gradient is part of its working set; a limit of 3 leaves all three
    # deferred buffers beside later microbatches' backward.
    base = job_factory(model=PP2)
    job = job_factory(model={**PP2, "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": limit})
    d = derive(job)
    assert (d.deferred_wgrad_microbatches, d.deferred_wgrad_buffers_at_peak) == (deferred, at_peak)
    before, after = _estimate(base), _estimate(job)
    per_microbatch = 2 * 256 * 1000 + 2 * 256 * 64  # bf16 logits gradient + output-layer input
    assert after.ranks[1].peak_bytes - before.ranks[1].peak_bytes == at_peak * per_microbatch
    assert after.ranks[0].peak_bytes == before.ranks[0].peak_bytes


def test_deferred_embedding_wgrad_needs_pipeline_and_gaf(job_factory):
    no_gaf = job_factory(
        model={**PP2, "gradient_accumulation_fusion": False, "defer_embedding_wgrad_compute": True}
    )
    assert derive(no_gaf).deferred_wgrad_microbatches == 0
    no_pp = job_factory(model={"gradient_accumulation_fusion": True, "defer_embedding_wgrad_compute": True})
    assert derive(no_pp).deferred_wgrad_microbatches == 0


MOE = {
    "num_moe_experts": 4,
    "moe_router_topk": 2,
    "moe_token_dispatcher_type": "alltoall",
    "attention_backend": "flash",
}


def _experts_input(job, imbalance=1.0):
    d = derive(job)
    return act.moe(d, act.dims_of(d), _flavour(d), imbalance).tensors["experts.input"]


@pytest.mark.parametrize(
    ("capacity", "pad", "imbalance", "share"),
    [
        (None, False, 1.5, 1.5),  # dropless: whatever routing sends
        (1.0, False, 1.5, 1.0),  # dropping caps the hottest expert at the capacity
        (2.0, False, 1.5, 1.5),  # capacity above the load drops nothing
        (2.0, True, 1.0, 2.0),  # padding fills every expert to capacity
    ],
)
def test_capacity_factor_caps_or_pads_the_routed_tokens(job_factory, capacity, pad, imbalance, share):
    job = job_factory(
        model={**MOE, "moe_expert_capacity_factor": capacity, "moe_pad_expert_input_to_capacity": pad}
    )
    assert _experts_input(job, imbalance) == 2 * 256 * 2 * share * 64  # bf16 x tokens x top-k x share x h


def test_optimizers_without_a_model_are_refused_by_name(job_factory):
    from memtune.errors import InputError

    with pytest.raises(
        InputError, match="optimizer.optimizer 'dist_muon': memtune models the state of adam and sgd only"
    ):
        _estimate(job_factory(optimizer={"optimizer": "dist_muon"}))


def test_unmodeled_flags_are_listed_with_their_direction(job_factory):
    from memtune.estimate.render import assumptions

    job = job_factory(
        model={
            "tp_comm_overlap": True,
            "transformer_impl": "transformer_engine",
            "fp8": "hybrid",
            "bf16": True,
        }
    )
    notes = assumptions(_estimate(job))
    # Userbuffers are registered cudaMalloc memory; FP8 weight caches are modeled (estimate/te.py).
    assert any(n.startswith("tp_comm_overlap:") and "outside PyTorch's counters" in n for n in notes)
    assert not any(n.startswith("FP8:") for n in notes)
