"""A Hugging Face ``config.json`` from a local path: the architecture only.

It fills memtune's ``model`` section the way Megatron-Bridge's model bridges map the same
fields; parallel layout, batch and precision choices come from overrides
(``model.tensor_model_parallel_size=8 model.seq_length=4096``). Nothing is downloaded. The
reader is chosen as AutoBridge chooses its model bridge, by the Hugging Face class in
``architectures`` (or ``auto_map``), whatever ``model_type`` says; ``model_type`` decides only for a
config that names no class.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from memtune.config.stacks import ReceivedDefault, architecture_values
from memtune.errors import InputError
from memtune.limits import MAX_COUNT, MAX_LAYERS
from memtune.numbers import echo, plain_int

_MISSING = object()

# Hugging Face activation names, to the schema's.
HF_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
}
# Architectures memtune does not estimate, each with the line to say why.
REFUSED = {
    "nemotron_h": "hybrid Mamba models (Nemotron-H) are not estimated: memtune models attention and MLP "
    "decoder layers, not Megatron-Core's Mamba layers",
}


class _Fields:
    """The config's keys, remembering which ones were used so the rest can be reported."""

    def __init__(self, data: dict[str, Any], where: str, model_type: str, prefix: str = "") -> None:
        self.data, self.where, self.model_type, self.prefix = data, where, model_type, prefix
        self.used: set[str] = set()

    def get(self, key: str, default: object = None) -> object:
        self.used.add(key)
        value = self.data.get(key, default)
        return default if value is None else value

    def require(self, key: str) -> object:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise InputError(
                f"{self.where}: a {self.model_type} config needs {self.prefix}{key!r}, which is missing"
            )
        return value

    def check_present(self, *keys: str) -> None:
        """Report every missing key at once rather than the first."""
        missing = [k for k in keys if self.data.get(k) is None]
        if missing:
            raise InputError(
                [
                    f"{self.where}: a {self.model_type} config needs {self.prefix}{k!r}, which is missing"
                    for k in missing
                ]
            )

    def integer(self, key: str, default: int | None = None, *, low: int = 0, high: int = MAX_COUNT) -> int:
        """A field the reader computes with: an integer (not a bool) in [low, high]."""
        value = self.require(key) if default is None else self.get(key, default)
        number = plain_int(value)
        if number is None or not low <= number <= high:
            raise InputError(
                f"{self.where}: {self.prefix}{key} must be an integer from {low} to {high}, got {echo(value)}"
            )
        return number

    def integers(self, key: str) -> list[int]:
        value = self.get(key, [])
        if not isinstance(value, list) or any(plain_int(v) is None for v in value):
            raise InputError(
                f"{self.where}: {self.prefix}{key} must be a list of integers, got {echo(value)}"
            )
        return value

    def unused(self) -> list[str]:
        return [f"{self.prefix}{k}" for k in self.data if k not in self.used]


def _common(f: _Fields, *, tied_default: bool, qkv_bias: bool = False) -> dict[str, Any]:
    f.check_present(
        "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"
    )
    heads = f.require("num_attention_heads")
    model: dict[str, Any] = {
        "num_layers": f.require("num_hidden_layers"),
        "hidden_size": f.require("hidden_size"),
        "ffn_hidden_size": f.require("intermediate_size"),
        "num_attention_heads": heads,
        "num_query_groups": f.get("num_key_value_heads", heads),
        "vocab_size": f.require("vocab_size"),
        "gated_linear_unit": True,
        "activation_func": _activation(f),
        "normalization": "RMSNorm",
        "share_embeddings_and_output_weights": f.get("tie_word_embeddings", tied_default),
        "add_bias_linear": False,
        "add_qkv_bias": qkv_bias or f.get("attention_bias", False),
        "hidden_dropout": 0.0,
        "attention_dropout": f.get("attention_dropout", 0.0),
        "position_embedding_type": "rope",
    }
    if f.get("head_dim") is not None:
        model["kv_channels"] = f.get("head_dim")
    dtype = f.get("torch_dtype") or f.get("dtype")
    if dtype in ("bfloat16", "float16"):
        model["bf16" if dtype == "bfloat16" else "fp16"] = True
    return model


def _activation(f: _Fields, key: str = "hidden_act") -> str:
    name = f.get(key) or f.get("hidden_activation") or "silu"
    if not isinstance(name, str) or name not in HF_ACTIVATIONS:
        raise InputError(
            f"{f.where}: activation {echo(name)} is not supported; supported: {', '.join(HF_ACTIVATIONS)}"
        )
    return HF_ACTIVATIONS[name]


def _layers(f: _Fields) -> int:
    """num_hidden_layers, checked before a per-layer list is built from it."""
    return f.integer("num_hidden_layers", low=1, high=MAX_LAYERS)


def _moe_layer_freq(flags: list[bool]) -> int | list[int]:
    return 1 if all(flags) else [int(x) for x in flags]


def _llama(f: _Fields) -> dict[str, Any]:
    return _common(f, tied_default=False)


def _qwen2(f: _Fields) -> dict[str, Any]:
    return _common(f, tied_default=False, qkv_bias=True)


def _qwen3(f: _Fields) -> dict[str, Any]:
    return {**_common(f, tied_default=False), "qk_layernorm": True}


def _qwen_moe(f: _Fields, *, qwen3: bool) -> dict[str, Any]:
    model = _common(f, tied_default=False, qkv_bias=not qwen3)
    experts, step = f.require("num_experts"), f.integer("decoder_sparse_step", 1, low=1)
    dense_only = set(f.integers("mlp_only_layers"))
    moe = [i not in dense_only and (i + 1) % step == 0 for i in range(_layers(f))]
    model.update(
        num_moe_experts=experts,
        moe_router_topk=f.require("num_experts_per_tok"),
        moe_ffn_hidden_size=f.require("moe_intermediate_size"),
        moe_layer_freq=_moe_layer_freq(moe),
    )
    if qwen3:
        model["qk_layernorm"] = True
    elif f.get("shared_expert_intermediate_size"):
        model["moe_shared_expert_intermediate_size"] = f.get("shared_expert_intermediate_size")
    return model


def _mixtral(f: _Fields) -> dict[str, Any]:
    model = _common(f, tied_default=False)
    model.update(
        num_moe_experts=f.require("num_local_experts"),
        moe_router_topk=f.require("num_experts_per_tok"),
        moe_ffn_hidden_size=model["ffn_hidden_size"],
    )
    return model


def _deepseek_v3(f: _Fields) -> dict[str, Any]:
    model = _common(f, tied_default=False)
    del model["num_query_groups"]  # MLA has no key/value groups
    first_dense = f.integer("first_k_dense_replace", 0)
    freq = f.integer("moe_layer_freq", 1, low=1)
    moe = [i >= first_dense and i % freq == 0 for i in range(_layers(f))]
    expert_width = f.require("moe_intermediate_size")
    model.update(
        multi_latent_attention=True,
        q_lora_rank=f.get("q_lora_rank"),  # null: queries are not compressed
        kv_lora_rank=f.require("kv_lora_rank"),
        qk_head_dim=f.require("qk_nope_head_dim"),
        qk_pos_emb_head_dim=f.require("qk_rope_head_dim"),
        v_head_dim=f.require("v_head_dim"),
        num_moe_experts=f.require("n_routed_experts"),
        moe_router_topk=f.require("num_experts_per_tok"),
        moe_ffn_hidden_size=expert_width,
        moe_layer_freq=_moe_layer_freq(moe),
    )
    if f.get("n_shared_experts"):
        shared = f.integer("n_shared_experts", 0)
        model["moe_shared_expert_intermediate_size"] = shared * f.integer("moe_intermediate_size")
    if f.get("n_group"):
        model.update(moe_router_num_groups=f.get("n_group"), moe_router_group_topk=f.require("topk_group"))
    if f.get("num_nextn_predict_layers"):
        model["mtp_num_layers"] = f.get("num_nextn_predict_layers")
    return model


def _phi3(f: _Fields) -> dict[str, Any]:
    # Phi-3 fuses q/k/v and gate/up into single weights; the shapes, and so the memory, are Llama's.
    return _common(f, tied_default=False)


def _olmoe(f: _Fields) -> dict[str, Any]:
    model = _common(f, tied_default=False)
    # every layer is an MoE layer; intermediate_size is the experts' width
    model.update(
        num_moe_experts=f.require("num_experts"),
        moe_router_topk=f.require("num_experts_per_tok"),
        moe_ffn_hidden_size=model["ffn_hidden_size"],
        qk_layernorm=True,  # OLMoE normalises queries and keys
    )
    return model


def _glm4_moe(f: _Fields) -> dict[str, Any]:
    model = _common(f, tied_default=False)
    first_dense = f.integer("first_k_dense_replace", 0)
    moe = [i >= first_dense for i in range(_layers(f))]
    expert_width = f.require("moe_intermediate_size")
    model.update(
        num_moe_experts=f.require("n_routed_experts"),
        moe_router_topk=f.require("num_experts_per_tok"),
        moe_ffn_hidden_size=expert_width,
        moe_layer_freq=_moe_layer_freq(moe),
        qk_layernorm=bool(f.get("use_qk_norm", False)),
    )
    if f.get("n_shared_experts"):
        shared = f.integer("n_shared_experts", 0)
        model["moe_shared_expert_intermediate_size"] = shared * f.integer("moe_intermediate_size")
    if f.integer("n_group", 1) > 1:
        model.update(moe_router_num_groups=f.get("n_group"), moe_router_group_topk=f.require("topk_group"))
    if f.get("num_nextn_predict_layers"):
        model["mtp_num_layers"] = f.get("num_nextn_predict_layers")
    return model


def _gpt2(f: _Fields) -> dict[str, Any]:
    f.check_present("n_layer", "n_embd", "n_head", "vocab_size")
    hidden = f.integer("n_embd")
    model: dict[str, Any] = {
        "num_layers": f.require("n_layer"),
        "hidden_size": hidden,
        "ffn_hidden_size": f.get("n_inner") or 4 * hidden,
        "num_attention_heads": f.require("n_head"),
        "vocab_size": f.require("vocab_size"),
        "gated_linear_unit": False,
        "activation_func": _activation(f, key="activation_function"),
        "normalization": "LayerNorm",
        "share_embeddings_and_output_weights": f.get("tie_word_embeddings", True),
        "add_bias_linear": True,
        "position_embedding_type": "learned_absolute",
        "hidden_dropout": f.get("resid_pdrop", 0.1),
        "attention_dropout": f.get("attn_pdrop", 0.1),
    }
    if isinstance(f.get("n_positions"), int):
        model["seq_length"] = f.get("n_positions")  # learned positions: the table is this long
    return model


def _gpt_oss(f: _Fields) -> dict[str, Any]:
    model = _common(f, tied_default=False)
    # The experts' clamped SwiGLU (alpha 1.702) is what Megatron calls quick_gelu in a GLU.
    model.update(
        activation_func="quick_gelu",
        add_bias_linear=True,  # every linear has a bias, the q/k/v ones included
        add_qkv_bias=False,
        position_embedding_type="yarn",
        num_moe_experts=f.require("num_local_experts"),
        moe_router_topk=f.get("num_experts_per_tok") or f.require("experts_per_token"),
        moe_ffn_hidden_size=model["ffn_hidden_size"],
        # every attention has learned sinks, which Megatron calls a learnable softmax offset
        softmax_type="learnable",
    )
    limit = f.get("swiglu_limit")
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0:
        # the experts' GLU halves are clamped to it (Bridge's gpt_oss_bridge.py sets 7.0)
        model["activation_func_clamp_value"] = float(limit)
    window = f.get("sliding_window")
    if isinstance(window, int):
        # a query sees itself and window - 1 keys before it (Bridge's gpt_oss_bridge.py)
        model["window_size"] = [window - 1, 0]
        layer_types = f.get("layer_types")
        if isinstance(layer_types, list):
            model["window_attn_skip_freq"] = _skip_freq([t == "sliding_attention" for t in layer_types])
    return model


def _skip_freq(windowed: list[bool]) -> int | list[int]:
    """Megatron's ``window_attn_skip_freq`` for a per-layer pattern: N where every N-th layer
    (from 1) attends in full and the others in the window, else the 0/1 list."""
    for n in range(2, len(windowed) + 1):
        if windowed == [(i + 1) % n != 0 for i in range(len(windowed))]:
            return n
    return [int(w) for w in windowed]


def _gemma2(f: _Fields) -> dict[str, Any]:
    return _common(f, tied_default=True)


def _gemma3_text(f: _Fields) -> dict[str, Any]:
    # Gemma3's config.json leaves out keys equal to Gemma3TextConfig's defaults.
    f.data = {"vocab_size": 262208, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", **f.data}
    return {**_common(f, tied_default=True), "qk_layernorm": True}


# Hugging Face class -> (the model_type memtune and Bridge's per-architecture values know it by,
# reader). GPT2LMHeadModel has no Bridge model bridge; memtune reads it all the same.
ARCHITECTURES: dict[str, tuple[str, Callable[[_Fields], dict[str, Any]]]] = {
    "LlamaForCausalLM": ("llama", _llama),
    "Qwen2ForCausalLM": ("qwen2", _qwen2),
    "Qwen3ForCausalLM": ("qwen3", _qwen3),
    "Qwen2MoeForCausalLM": ("qwen2_moe", lambda f: _qwen_moe(f, qwen3=False)),
    "Qwen3MoeForCausalLM": ("qwen3_moe", lambda f: _qwen_moe(f, qwen3=True)),
    "MixtralForCausalLM": ("mixtral", _mixtral),
    "MistralForCausalLM": ("mistral", _llama),
    "Phi3ForCausalLM": ("phi3", _phi3),
    "OlmoeForCausalLM": ("olmoe", _olmoe),
    "Glm4MoeForCausalLM": ("glm4_moe", _glm4_moe),
    "GPT2LMHeadModel": ("gpt2", _gpt2),
    "DeepseekV2ForCausalLM": ("deepseek_v2", _deepseek_v3),  # the same fields; V3 adds MTP
    "DeepseekV3ForCausalLM": ("deepseek_v3", _deepseek_v3),
    "GptOssForCausalLM": ("gpt_oss", _gpt_oss),
    "Gemma2ForCausalLM": ("gemma2", _gemma2),
    "Gemma3ForCausalLM": ("gemma3_text", _gemma3_text),
    "Gemma3ForConditionalGeneration": ("gemma3", _gemma3_text),  # reads the nested text_config
}
# The class a config without ``architectures`` is read as, by its model_type.
BY_MODEL_TYPE = {model_type: name for name, (model_type, _) in ARCHITECTURES.items()}
# The class-name endings AutoBridge dispatches on (SUPPORTED_HF_ARCHITECTURES in Megatron-Bridge's
# models/conversion/auto_bridge.py; those of multimodal and encoder-only models memtune does not
# read are left out).
BRIDGE_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration")
NESTED_TEXT_CONFIG = "Gemma3ForConditionalGeneration"


def is_hf_config(data: dict[str, Any]) -> bool:
    return "architectures" in data or "model_type" in data


def read(path: Path, data: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[ReceivedDefault]]:
    """The job AutoBridge would build: Bridge's defaults, the file's architecture and the model
    bridge's own values (returned as well, for ``--explain``)."""
    architecture = _architecture(path, data)
    model_type, reader = ARCHITECTURES[architecture]
    if architecture == NESTED_TEXT_CONFIG:
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise InputError(
                f"{path}: a {architecture} config needs a 'text_config' mapping, which is missing"
            )
        # The checkpoint dtype sits outside text_config.
        dtype: dict[str, Any] = {k: data[k] for k in ("torch_dtype", "dtype") if k in data and k not in text}
        fields = _Fields({**dtype, **text}, str(path), model_type, prefix="text_config.")
        outer = ("text_config", "model_type", "architectures", "auto_map", *dtype)
        outer_ignored = [k for k in data if k not in outer]
    else:
        fields = _Fields(data, str(path), model_type)
        fields.used.update(("model_type", "architectures", "auto_map"))
        outer_ignored = []
    model = reader(fields)
    received = architecture_values(model_type, model)
    model.update({d.key.removeprefix("model."): d.value for d in received})
    return {"defaults": "megatron-bridge", "model": model}, outer_ignored + fields.unused(), received


def _architecture(path: Path, data: dict[str, Any]) -> str:
    """The class AutoBridge dispatches on: the first of ``architectures`` with a causal-LM ending
    (or one memtune reads besides), named by ``auto_map["AutoModelForCausalLM"]`` where the config
    has one; a config without ``architectures`` is read by its ``model_type``."""
    model_type = data.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise InputError(f"{path}: model_type must be a string, got {echo(model_type)}")
    if model_type in REFUSED:
        raise InputError(f"{path}: {REFUSED[model_type]}")
    architectures = data.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise InputError(f"{path}: architectures must be a list of class names, got {echo(architectures)}")
    supported = ", ".join(ARCHITECTURES)
    if not architectures:
        if model_type in BY_MODEL_TYPE:
            return BY_MODEL_TYPE[model_type]
        raise InputError(
            f"{path}: no architectures and unsupported model_type {echo(model_type)}; supported: {supported}"
        )
    dispatched: str | None = next(
        (a for a in architectures if a.endswith(BRIDGE_SUFFIXES) or a in ARCHITECTURES), None
    )
    auto_map = data.get("auto_map")
    causal_lm = auto_map.get("AutoModelForCausalLM") if isinstance(auto_map, dict) else None
    if dispatched is not None and isinstance(causal_lm, str):
        dispatched = causal_lm.rpartition(".")[2]
    if dispatched is not None and dispatched in ARCHITECTURES:
        return dispatched
    given = echo(", ".join(architectures))[1:-1]
    raise InputError(
        f"{path}: unsupported Hugging Face architecture {given} (model_type {echo(model_type)}); supported: {supported}"
    )
