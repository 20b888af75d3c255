from memtune.config import derive
from memtune.estimate import activations as act
from memtune.estimate.flavour import flavour_of

# TINY: seq 128, mbs 2 -> 256 tokens, hidden 64, 4 heads of 16, 2 query groups, gated ffn 256.
T, H = 256, 64


def _layer(job):
    d = derive(job)
    return act.transformer_layer(d, act.dims_of(d), flavour_of(d), is_moe=False, imbalance=1.0)


def test_unfused_local_layer_by_hand(job_factory):
    saved = _layer(job_factory())
    expected = {
        "input_layernorm.input": 2 * T * H,
        "input_layernorm.stats": 4 * T,
        "self_attention.linear_qkv.input": 2 * T * H,
        "self_attention.core_attention.q": 2 * T * 4 * 16,
        "self_attention.core_attention.k": 2 * T * 4 * 16,  # repeated up to 4 heads
        "self_attention.core_attention.v": 2 * T * 4 * 16,
        "self_attention.core_attention.softmax_fp32": 4 * 2 * 4 * 128 * 128,
        "self_attention.core_attention.probs_bf16": 2 * 2 * 4 * 128 * 128,
        "self_attention.core_attention.causal_mask": 128 * 128,
        "self_attention.linear_proj.input": 2 * T * 64,
        "pre_mlp_layernorm.input": 2 * T * H,
        "pre_mlp_layernorm.stats": 4 * T,
        "mlp.linear_fc1.input": 2 * T * H,
        "mlp.fc1_output": 2 * T * 512,
        "mlp.activation_gate": 2 * T * 256,
        "mlp.activation_linear": 2 * T * 256,
        "mlp.linear_fc2.input": 2 * T * 256,
    }
    assert saved.tensors == expected


def test_sequence_parallel_splits_only_tensors_outside_tp_regions(job_factory):
    job = job_factory(
        model={"tensor_model_parallel_size": 2, "sequence_parallel": True, "attention_backend": "flash"}
    )
    saved = _layer(job)
    assert saved.tensors["input_layernorm.input"] == 2 * T * H / 2
    assert saved.tensors["mlp.linear_fc1.input"] == 2 * T * H / 2
    assert saved.tensors["self_attention.core_attention.q"] == 2 * T * 2 * 16  # 2 heads per rank
    assert saved.tensors["mlp.fc1_output"] == 2 * T * 512 / 2
    assert "self_attention.core_attention.softmax_fp32" not in saved.tensors


def test_selective_core_attn_and_mlp_recompute(job_factory):
    job = job_factory(model={"recompute_granularity": "selective", "recompute_modules": ["core_attn", "mlp"]})
    saved = _layer(job)
    assert not any(k.startswith("mlp.") and k != "mlp.linear_fc1.input" for k in saved.tensors)
    assert "self_attention.core_attention.softmax_fp32" not in saved.tensors
    # the checkpoint keeps q, k before repetition, and the QKV output that v is a view of
    assert saved.tensors["self_attention.core_attention.checkpoint.k"] == 2 * T * 2 * 16
    assert saved.tensors["self_attention.core_attention.checkpoint.qkv"] == 2 * T * (4 + 2 * 2) * 16


def test_dropout_keeps_masks(job_factory):
    saved = _layer(job_factory(model={"hidden_dropout": 0.1, "attention_dropout": 0.1}))
    assert saved.tensors["self_attention.bda.dropout_mask"] == T * H
    assert saved.tensors["self_attention.core_attention.dropout_mask"] == 2 * 4 * 128 * 128
    assert "self_attention.core_attention.probs_bf16" not in saved.tensors


def test_moe_act_recompute_drops_only_the_activation_output(job_factory):
    moe = {"num_moe_experts": 4, "moe_ffn_hidden_size": 32, "moe_router_topk": 2, "moe_grouped_gemm": True}
    base = job_factory(model=moe)
    act_rc = job_factory(
        model={**moe, "recompute_granularity": "selective", "recompute_modules": ["moe_act"]}
    )
    kept = {}
    for label, job in (("base", base), ("rc", act_rc)):
        d = derive(job)
        kept[label] = act.moe(d, act.dims_of(d), flavour_of(d), 1.0).tensors
    routed = T * 2  # top-2, ETP 1
    assert kept["base"]["experts.linear_fc2.input"] == 2 * routed * 32
    assert set(kept["base"]) - set(kept["rc"]) == {"experts.linear_fc2.input", "experts.probs_scaled_input"}
    assert kept["rc"]["experts.fc1_output"] == 2 * routed * 64  # gated: fc1 is 2 x 32 wide
