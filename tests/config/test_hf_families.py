"""The causal-LM families added to the Hugging Face reader: each fixture is a trimmed copy of the
model's published config.json, checked against the model's published parameter count."""

import json
from pathlib import Path

import pytest

from memtune.config import derive, load_job
from memtune.errors import InputError
from memtune.estimate.params import total_parameters

HF = Path(__file__).parent / "fixtures" / "hf"

# Published totals (model cards; Hugging Face safetensors totals), without MTP layers.
PUBLISHED = {
    "mistral-7b-v0.1": 7.24e9,
    "phi-3-mini-4k-instruct": 3.82e9,
    "olmoe-1b-7b-0924": 6.92e9,
    "glm-4.5-air": 106e9,  # model card: 106B total, 12B active
    "deepseek-v2-lite": 15.7e9,
    "deepseek-v2": 236e9,
    "gpt2": 124.4e6,
    "gemma-3-1b-it": 1.0e9,
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameter_count_matches_the_published_size(name):
    job = load_job(HF / f"{name}.json").job
    if job.model.mtp_num_layers:
        job = job.model_copy(update={"model": job.model.model_copy(update={"mtp_num_layers": 0})})
    assert total_parameters(job, pad_vocab=False) == pytest.approx(PUBLISHED[name], rel=0.015)


def test_mistral_is_llama_shaped_with_grouped_queries():
    m = load_job(HF / "mistral-7b-v0.1.json").job.model
    assert (m.num_query_groups, m.gated_linear_unit, m.activation_func) == (8, True, "silu")
    assert not m.share_embeddings_and_output_weights and m.bias_activation_fusion is False


def test_olmoe_every_layer_routes_to_64_experts_with_qk_norm():
    job = load_job(HF / "olmoe-1b-7b-0924.json").job
    assert derive(job).moe_layer_pattern == (True,) * 16
    assert (job.model.num_moe_experts, job.model.moe_router_topk, job.model.moe_ffn_hidden_size) == (
        64,
        8,
        1024,
    )
    assert job.model.qk_layernorm
    assert job.model.moe_router_load_balancing_type == "seq_aux_loss"  # Bridge's OLMoE bridge


def test_glm45_dense_first_layer_shared_expert_qkv_bias_and_mtp():
    loaded = load_job(HF / "glm-4.5-air.json")
    m = loaded.job.model
    assert derive(loaded.job).moe_layer_pattern == (False,) + (True,) * 45  # first_k_dense_replace 1
    assert m.moe_shared_expert_intermediate_size == 1408 and m.add_qkv_bias and m.kv_channels == 128
    assert m.mtp_num_layers == 1 and m.moe_router_num_groups is None  # n_group 1: no group routing
    assert m.moe_shared_expert_overlap and m.bias_activation_fusion  # Bridge's GLM-4.5 bridge


def test_deepseek_v2_lite_has_uncompressed_queries_and_v2_bridge_values():
    m = load_job(HF / "deepseek-v2-lite.json").job.model
    assert m.multi_latent_attention and m.q_lora_rank is None and m.kv_lora_rank == 512
    assert m.moe_shared_expert_intermediate_size == 2 * 1408 and m.mtp_num_layers is None
    assert m.make_vocab_size_divisible_by == 3200  # DeepSeekV2Bridge
    v2 = load_job(HF / "deepseek-v2.json").job.model
    assert (v2.q_lora_rank, v2.moe_router_num_groups, v2.moe_router_group_topk) == (1536, 8, 3)


def test_gpt2_learned_positions_tied_gelu_with_biases():
    m = load_job(HF / "gpt2.json").job.model
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.vocab_size) == (12, 768, 3072, 50257)
    assert m.position_embedding_type == "learned_absolute" and m.share_embeddings_and_output_weights
    assert m.add_bias_linear and not m.gated_linear_unit and m.normalization == "LayerNorm"
    assert m.seq_length == 1024  # n_positions: the learned position table


def test_gemma3_text_config_alone():
    m = load_job(HF / "gemma-3-1b-it.json").job.model
    assert (m.num_layers, m.num_query_groups, m.kv_channels, m.vocab_size) == (26, 1, 256, 262144)
    assert m.qk_layernorm and m.share_embeddings_and_output_weights and m.bf16


def test_nemotron_h_is_refused_in_one_line():
    with pytest.raises(InputError) as exc:
        load_job(HF / "nemotron-h-8b.json")
    assert exc.value.problems == [
        f"{HF / 'nemotron-h-8b.json'}: hybrid Mamba models (Nemotron-H) are not estimated: memtune models "
        "attention and MLP decoder layers, not Megatron-Core's Mamba layers"
    ]


def test_what_the_file_cannot_give_is_listed_under_the_assumptions(capsys):
    from memtune.cli import main

    assert main(["estimate", str(HF / "mistral-7b-v0.1.json")]) in (0, 1)
    out = capsys.readouterr().out
    assert "Assumptions" in out and "seq_length" in out


BRIDGE = HF / "bridge"  # Megatron-Bridge's own test configs (README.md there)


def test_bridge_glm45_fixture_is_dispatched_by_its_class_not_its_model_type():
    # model_type "glm"; GLM45Bridge (registered for Glm4MoeForCausalLM) builds it
    loaded = load_job(BRIDGE / "glm45-air-106b.json")
    m = loaded.job.model
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups) == (
        46,
        4096,
        10944,
        96,
        8,
    )
    assert derive(loaded.job).moe_layer_pattern == (False,) + (True,) * 45  # first_k_dense_replace 1
    assert (m.num_moe_experts, m.moe_router_topk, m.moe_ffn_hidden_size) == (128, 8, 1408)
    assert m.moe_shared_expert_intermediate_size == 1408 and m.kv_channels == 128 and m.vocab_size == 151552
    assert m.add_qkv_bias and not m.qk_layernorm and m.mtp_num_layers is None  # no num_nextn_predict_layers
    assert m.moe_shared_expert_overlap and m.bias_activation_fusion  # GLM45Bridge's own values


def test_bridge_gemma3_fixture_is_a_flat_text_model_though_its_model_type_is_gemma3():
    m = load_job(BRIDGE / "gemma3-1b.json").job.model
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_query_groups, m.kv_channels) == (
        26,
        1152,
        6912,
        1,
        256,
    )
    assert m.vocab_size == 262144 and m.qk_layernorm and m.share_embeddings_and_output_weights and m.bf16


def test_auto_map_names_the_class_bridge_dispatches_on(write):
    config = json.loads((BRIDGE / "glm45-air-106b.json").read_text())
    config["architectures"] = ["CustomForCausalLM"]  # auto_map still names Glm4MoeForCausalLM
    assert load_job(write("config.json", json.dumps(config))).job.model.num_moe_experts == 128


def test_the_first_causal_lm_class_decides_and_model_type_is_only_a_fallback(write):
    gemma = json.loads((BRIDGE / "gemma3-1b.json").read_text())
    first = {**gemma, "architectures": ["Gemma3Model", "Gemma3ForCausalLM", "LlamaForCausalLM"]}
    assert load_job(write("first.json", json.dumps(first))).job.model.qk_layernorm  # read as Gemma 3
    untyped = {k: v for k, v in gemma.items() if k != "architectures"}
    untyped["model_type"] = "gemma3_text"
    assert load_job(write("untyped.json", json.dumps(untyped))).job.model.kv_channels == 256
    with pytest.raises(
        InputError, match=r"unsupported Hugging Face architecture Gemma3Model \(model_type 'gemma3'\)"
    ):
        load_job(write("model.json", json.dumps({**gemma, "architectures": ["Gemma3Model"]})))
