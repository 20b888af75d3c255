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


MLA = {
    "multi_latent_attention": True,
    "q_lora_rank": None,
    "kv_lora_rank": 32,
    "qk_head_dim": 16,
    "qk_pos_emb_head_dim": 8,
    "v_head_dim": 16,
    "attention_backend": "flash",
}


def test_mla_up_proj_recompute_frees_query_key_and_value(job_factory):
    kept = {}
    for label, extra in (
        ("base", {}),
        ("up", {"recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"]}),
        (
            "up+core",
            {"recompute_granularity": "selective", "recompute_modules": ["mla_up_proj", "core_attn"]},
        ),
    ):
        d = derive(job_factory(model={**MLA, **extra}))
        kept[label] = act.mla_attention(d, act.dims_of(d), flavour_of(d), "core_attn" in d.recompute_modules)
    q_up = 2 * T * 4 * (16 + 8)  # 4 heads of qk 16 + rope 8
    kv_up = 2 * T * 4 * (16 + 16)
    qkv = 2 * T * 4 * (2 * 24 + 16)
    assert kept["base"].tensors["q_up.output"] == q_up
    assert kept["base"].tensors["core_attention.qkv"] == qkv
    # CheckpointWithoutOutput keeps only the compressed inputs; q, k, v are discarded after the
    # core attention, also where core_attn's own checkpoint holds them.
    assert set(kept["base"].tensors) - set(kept["up"].tensors) == {
        "q_up.output",
        "kv_up.output",
        "core_attention.qkv",
    }
    assert kept["up"].tensors["linear_kv_up_proj.input"] == 2 * T * 32
    assert not any("qkv" in name for name in kept["up+core"].tensors)
    # The backward hook rebuilds them with grad for the attention's backward.
    assert kept["up"].bwd_transient == kept["base"].bwd_transient + q_up + kv_up + qkv


def _lora_moe_layer(job_factory, targets, **model):
    from memtune.estimate.peft import apply_lora

    moe = {
        "num_moe_experts": 4,
        "moe_ffn_hidden_size": 32,
        "moe_router_topk": 2,
        "attention_backend": "flash",
    }
    job = job_factory(model={**moe, **model}, peft={"dim": 8, "alpha": 8, "target_modules": targets})
    d = derive(job)
    x, fl = act.dims_of(d), flavour_of(d)
    saved = act.transformer_layer(d, x, fl, is_moe=True, imbalance=1.0)
    apply_lora(d, x, fl, saved, is_moe=True)
    return saved.tensors


def test_lora_on_attention_only_frees_the_frozen_experts_inputs(job_factory):
    routed = T * 2  # top-2, ETP 1, balanced
    both = _lora_moe_layer(job_factory, ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"])
    assert both["mlp.experts.input"] == 2 * routed * H
    assert both["mlp.experts.linear_fc2.input"] == 2 * routed * 32
    attention = _lora_moe_layer(job_factory, ["linear_qkv", "linear_proj"])
    # Frozen expert linears keep no input; the activation and the probability scaling still do.
    assert set(both) - set(attention) == {"mlp.experts.input", "mlp.experts.linear_fc2.input"}
    assert attention["mlp.experts.fc1_output"] == 2 * routed * 64
    assert attention["mlp.experts.probs_scaled_input"] == 2 * routed * 32
    assert attention["mlp.router.input"] == 2 * T * H  # the router's gating saves its input
    fc1_only = _lora_moe_layer(job_factory, ["linear_fc1"])
    assert "mlp.experts.input" in fc1_only and "mlp.experts.linear_fc2.input" not in fc1_only


def test_lora_frees_the_frozen_shared_experts_fc2_input(job_factory):
    shared = {"moe_shared_expert_intermediate_size": 48}
    attention = _lora_moe_layer(job_factory, ["linear_qkv", "linear_proj"], **shared)
    assert "mlp.shared_experts.linear_fc2.input" not in attention
    assert attention["mlp.shared_experts.fc1_output"] == 2 * T * 96
    both = _lora_moe_layer(job_factory, ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"], **shared)
    assert both["mlp.shared_experts.linear_fc2.input"] == 2 * T * 48


def test_fp32_job_keeps_four_byte_activations_and_an_uncast_softmax(job_factory):
    fp32 = _layer(job_factory(model={"bf16": False}))
    bf16 = _layer(job_factory())
    scores = 2 * 4 * 128 * 128  # mbs 2, 4 heads, s x s
    # The torch softmax runs on the fp32 scores as they are: its output is the probabilities,
    # with no fp32 copy and no cast back.
    assert fp32.tensors["self_attention.core_attention.softmax_output"] == 4 * scores
    assert "self_attention.core_attention.probs_bf16" not in fp32.tensors
    for name in ("input_layernorm.input", "self_attention.core_attention.q", "mlp.fc1_output"):
        assert fp32.tensors[name] == 2 * bf16.tensors[name]
    assert fp32.tensors["input_layernorm.stats"] == bf16.tensors["input_layernorm.stats"] == 4 * T
    # Working sets of the half-precision torch path (4 and 6 bytes per score), twice as wide.
    softmax = act.unfused_softmax(derive(job_factory(model={"bf16": False})))
    assert (softmax.fwd_extra, softmax.bwd_extra) == (8, 12)


def test_fp16_job_keeps_what_a_bf16_job_keeps(job_factory):
    fp16 = _layer(job_factory(model={"bf16": False, "fp16": True}))
    assert fp16.tensors == _layer(job_factory()).tensors


def test_fp32_loss_keeps_the_logits_as_its_softmax_without_a_copy(job_factory):
    vocab = 1000  # padded to a multiple of 8 on one TP rank
    out = {}
    for label, model in (("bf16", {}), ("fp32", {"bf16": False})):
        d = derive(job_factory(model=model))
        out[label] = act.output_and_loss(d, act.dims_of(d))
    logits = T * vocab
    assert out["bf16"].tensors["loss.softmax_fp32"] == out["fp32"].tensors["loss.softmax_fp32"] == 4 * logits
    assert out["bf16"].fwd_transient == 2 * logits  # the bf16 logits beside their fp32 copy
    assert out["fp32"].fwd_transient == 0
    # Backward: the in-place gradient is the kept tensor; the output layer's fp32 weight and
    # input gradients appear beside it.
    assert out["fp32"].bwd_transient == 4 * vocab * H + 4 * T * H


def test_fp32_model_state_is_about_a_bf16_jobs_as_check_opt011_says(job_factory):
    from memtune.check import gate, run_checks
    from memtune.estimate import estimate

    per_param = {}
    for label, model in (("bf16", {}), ("fp32", {"bf16": False})):
        job = job_factory(model=model, ddp={"grad_reduce_in_fp32": True})
        state = estimate(gate(job)).ranks[0].state
        per_param[label] = (
            (state.weights + state.grads + state.optimizer) / state.weights * (2 if label == "bf16" else 4)
        )
    assert per_param == {"bf16": 18.0, "fp32": 16.0}  # 2+4+4+8 against 4+4+8 bytes
    fp32 = next(f for f in run_checks(job_factory(model={"bf16": False})) if f.code == "OPT011")
    assert "saved activations grow by up to 2x" in fp32.message
    # And they do: twice where bf16 keeps bf16, the same where it keeps fp32 already.
    activations = {
        label: estimate(gate(job_factory(model=model))).ranks[0].activations
        for label, model in (("bf16", {}), ("fp32", {"bf16": False}))
    }
    assert activations["bf16"] < activations["fp32"] <= 2 * activations["bf16"]


def _lora_dense_layer(job_factory, position, targets, **model):
    from memtune.estimate.peft import apply_lora

    peft = {"dim": 8, "alpha": 16, "target_modules": targets, "scale_position": position}
    d = derive(job_factory(model={"attention_backend": "flash", **model}, peft=peft))
    x, fl = act.dims_of(d), flavour_of(d)
    saved = act.transformer_layer(d, x, fl, is_moe=False, imbalance=1.0)
    apply_lora(d, x, fl, saved, is_moe=False)
    return saved


def test_lora_scale_on_the_output_adds_one_full_width_copy_as_a_transient(job_factory):
    fc1 = ["linear_fc1"]
    bottleneck = _lora_dense_layer(job_factory, "bottleneck", fc1)
    output = _lora_dense_layer(job_factory, "output", fc1)
    assert output.tensors == bottleneck.tensors  # nothing more is kept for backward
    copy = 2 * T * 2 * 256  # bf16, every token, the gated fc1's 512 outputs (TP 1)
    assert copy > bottleneck.fwd_transient
    assert output.fwd_transient == max(bottleneck.fwd_transient, copy)
    assert output.bwd_transient == max(bottleneck.bwd_transient, copy)
    # A row-parallel adapter's output is reduced and scattered over the sequence under SP.
    sp = {"tensor_model_parallel_size": 2, "sequence_parallel": True}
    fc2 = _lora_dense_layer(job_factory, "output", ["linear_fc2"], **sp)
    base = _lora_dense_layer(job_factory, "bottleneck", ["linear_fc2"], **sp)
    assert base.fwd_transient < 2 * (T / 2) * H
    assert fc2.fwd_transient == 2 * (T / 2) * H


def test_gpt_oss_clamp_keeps_a_clamped_copy_of_the_experts_fc1_output(job_factory):
    # weighted_bias_quick_geglu_impl clamps the two GLU halves in eager ops first: the clamps
    # keep the fc1 output, the fused kernel their clamped concatenation (2 x 128 wide a row)
    moe = {
        "num_moe_experts": 4, "moe_ffn_hidden_size": 128, "moe_router_topk": 2, "moe_grouped_gemm": True,
        "transformer_impl": "transformer_engine", "attention_backend": "fused", "activation_func": "quick_gelu",
        "bias_activation_fusion": True,
    }  # fmt: skip
    clamp = {"activation_func_clamp_value": 7.0}
    replay = {"recompute_granularity": "selective", "recompute_modules": ["moe_act"]}
    kept = {}
    for label, extra in (
        ("plain", {}),
        ("clamped", clamp),
        ("replayed", replay),
        ("clamped, replayed", clamp | replay),
    ):
        d = derive(job_factory(model={**moe, **extra}))
        assert d.experts_clamp_eagerly == ("clamped" in label)
        kept[label] = act.moe(d, act.dims_of(d), flavour_of(d), 1.0)
    routed = T * 2
    copy = 2 * routed * 2 * 128
    assert set(kept["clamped"].tensors) - set(kept["plain"].tensors) == {"experts.clamped_fc1_output"}
    assert kept["clamped"].tensors["experts.clamped_fc1_output"] == copy
    # a moe_act recompute keeps neither: its replay rebuilds the clamped copy in backward
    assert kept["clamped, replayed"].tensors == kept["replayed"].tensors
    assert kept["clamped, replayed"].bwd_transient - kept["replayed"].bwd_transient == copy
