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
