import json
from pathlib import Path

import pytest

from memtune.catalog.models import get_model
from memtune.config import derive, load_job, validate
from memtune.config.loaders import read_raw
from memtune.errors import InputError

HF = Path(__file__).parent / "fixtures" / "hf"

# The architecture a preset and its Hugging Face config.json must agree on; kv channels, query
# groups and the MoE layer pattern as Megatron derives them (HF leaves defaults out).
ARCHITECTURE = (
    "num_layers",
    "window_size",
    "softmax_type",
    "activation_func_clamp_value",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "vocab_size",
    "gated_linear_unit",
    "activation_func",
    "normalization",
    "share_embeddings_and_output_weights",
    "qk_layernorm",
    "add_bias_linear",
    "add_qkv_bias",
    "position_embedding_type",
    "num_moe_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "mtp_num_layers",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "bf16",
)


def architecture(job) -> dict:
    d = derive(job)
    derived = {
        "kv_channels": d.kv_channels,
        "num_query_groups": d.num_query_groups,
        "moe_layers": d.moe_layer_pattern,
        "windowed_layers": d.window_attention_pattern,
    }
    return {**{k: getattr(job.model, k) for k in ARCHITECTURE}, **derived}


PRESETS_WITH_CONFIG = [
    p.stem
    for p in sorted(HF.glob("*.json"))
    if p.stem
    in (
        "llama3-8b",
        "llama3-70b",
        "llama3.1-405b",
        "qwen3-8b",
        "qwen3-32b",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "deepseek-v3",
        "gpt-oss-20b",
        "gpt-oss-120b",
    )
]


def test_every_preset_but_nemotron_has_its_config_json():
    assert len(PRESETS_WITH_CONFIG) == 12


@pytest.mark.parametrize("name", PRESETS_WITH_CONFIG)
def test_hf_config_gives_the_preset_architecture(name):
    from_hf = load_job(HF / f"{name}.json").job
    preset = validate({"model": get_model(name)})
    if name.startswith("gpt-oss"):  # an mxfp4 checkpoint: its config.json names no dtype
        from_hf = from_hf.model_copy(update={"model": from_hf.model.model_copy(update={"bf16": True})})
    assert architecture(from_hf) == architecture(preset)


def test_deepseek_v3_mla_dense_first_layers_shared_expert_and_mtp():
    loaded = load_job(HF / "deepseek-v3.json")
    m, d = loaded.job.model, derive(loaded.job)
    assert m.multi_latent_attention and (m.q_lora_rank, m.kv_lora_rank) == (1536, 512)
    assert (m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim) == (128, 64, 128)
    assert d.moe_layer_pattern == (False,) * 3 + (True,) * 58  # first_k_dense_replace: 3
    assert m.moe_shared_expert_intermediate_size == 2048  # n_shared_experts 1 x moe_intermediate_size
    assert (m.moe_router_num_groups, m.moe_router_group_topk, m.mtp_num_layers) == (8, 4, 1)
    assert "routed_scaling_factor" in loaded.ignored and "quantization_config" in loaded.ignored


def test_qwen2_moe_sparse_step_dense_layers_and_shared_expert(write):
    config = json.loads((HF / "qwen2-57b-a14b.json").read_text())
    config.update(decoder_sparse_step=2, mlp_only_layers=[0, 27])
    job = load_job(write("config.json", json.dumps(config))).job
    assert job.model.moe_layer_freq == [int(i not in (0, 27) and (i + 1) % 2 == 0) for i in range(28)]
    assert job.model.moe_shared_expert_intermediate_size == 20480
    assert job.model.add_qkv_bias  # Qwen2 always has q/k/v biases


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "first_k_dense_replace",
            "3",
            "first_k_dense_replace must be an integer from 0 to 1099511627776, got '3'",
        ),
        (
            "num_hidden_layers",
            10**12,
            "num_hidden_layers must be an integer from 1 to 10000, got 1000000000000",
        ),
        ("n_group", [1], "n_group must be an integer from 0 to 1099511627776, got [1]"),
    ],
)
def test_glm4_moe_checks_the_integers_it_computes_with(write, field, value, message):
    config = json.loads((HF / "glm-4.5-air.json").read_text())
    config[field] = value
    path = write("config.json", json.dumps(config))
    with pytest.raises(InputError) as caught:
        load_job(path)
    assert caught.value.problems == [f"{path}: {message}"]


def test_qwen2_dense_has_qkv_bias_and_no_qk_norm():
    m = load_job(HF / "qwen2.5-7b.json").job.model
    assert m.add_qkv_bias and not m.qk_layernorm and not m.add_bias_linear


def test_gpt_oss_is_a_quick_gelu_glu_with_biases():
    loaded = load_job(HF / "gpt-oss-120b.json")
    m = loaded.job.model
    # a 128-token sliding window on every other layer (from the first), learned sinks
    assert (m.window_size, m.window_attn_skip_freq, m.softmax_type) == ([127, 0], 2, "learnable")
    assert "sliding_window" not in loaded.ignored and "layer_types" not in loaded.ignored
    # the experts' GLU halves clamped at swiglu_limit (Bridge's gpt_oss_bridge.py: 7.0)
    assert m.activation_func_clamp_value == 7.0 and "swiglu_limit" not in loaded.ignored
    assert (m.gated_linear_unit, m.activation_func, m.add_bias_linear) == (True, "quick_gelu", True)
    assert (m.num_moe_experts, m.moe_router_topk, m.kv_channels, m.position_embedding_type) == (
        128,
        4,
        64,
        "yarn",
    )


def test_gemma2_tied_gelu_glu_and_fp32_checkpoint():
    m = load_job(HF / "gemma-2-9b.json").job.model
    assert m.share_embeddings_and_output_weights and m.activation_func == "gelu" and m.gated_linear_unit
    assert m.kv_channels == 256 and not m.bf16  # torch_dtype float32


def test_gemma3_reads_the_nested_text_config_with_its_defaults():
    raw = read_raw(HF / "gemma-3-27b-it.json")
    m = load_job(HF / "gemma-3-27b-it.json").job.model
    assert (m.num_layers, m.hidden_size, m.num_query_groups, m.kv_channels) == (62, 5376, 16, 128)
    assert m.vocab_size == 262208  # Gemma3TextConfig's default; config.json leaves it out
    assert m.share_embeddings_and_output_weights and m.qk_layernorm and m.activation_func == "gelu"
    assert m.bf16  # torch_dtype sits outside text_config
    assert "vision_config" in raw.ignored and "text_config.rope_scaling" in raw.ignored


def test_hf_config_takes_the_parallel_layout_from_overrides():
    loaded = load_job(HF / "llama3-70b.json", ["model.tensor_model_parallel_size=8", "model.seq_length=4096"])
    assert loaded.format == "hf"
    assert loaded.job.model.tensor_model_parallel_size == 8 and loaded.job.model.seq_length == 4096
    assert "rope_theta" in loaded.ignored and "num_hidden_layers" not in loaded.ignored


def test_architectures_alone_identify_the_model(write):
    config = json.loads((HF / "mixtral-8x7b.json").read_text())
    del config["model_type"]
    assert load_job(write("config.json", json.dumps(config))).job.model.num_moe_experts == 8
