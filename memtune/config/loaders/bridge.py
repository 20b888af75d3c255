"""A Megatron-Bridge ``ConfigContainer`` dumped to YAML (``config.yaml`` of a run, ``to_yaml()``).

Bridge's sections ``model``, ``train``, ``optimizer``, ``ddp``, ``checkpoint`` and ``peft`` carry
Megatron-Core key names, so memtune takes the keys its schema knows and reports the rest as ignored. Two
sections change others the way Bridge applies them at setup: ``mixed_precision`` (a recipe name
such as ``bf16_mixed`` or a ``MixedPrecisionConfig``) overwrites precision keys of model and
ddp, and explicit ``comm_overlap`` DP-overlap settings overwrite ddp's. ``env`` and ``cluster``,
which Bridge does not have, may be appended in memtune's own layout.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from memtune.config.loaders._targets import plain
from memtune.config.schema import (
    CheckpointConfig,
    DDPConfig,
    LoraConfig,
    ModelConfig,
    OptimizerConfig,
    TrainConfig,
    UserbufferGemmConfig,
)
from memtune.errors import InputError
from memtune.numbers import cut, echo

if TYPE_CHECKING:
    from memtune.catalog.recipes import Recipe

# Top-level sections only a ConfigContainer has; any of them marks a file as a Bridge dump.
# (``checkpoint`` is not one: memtune's own schema has that section too.)
BRIDGE_ONLY_SECTIONS = frozenset(
    {
        "dataset",
        "logger",
        "tokenizer",
        "dist",
        "rng",
        "rerun_state_machine",
        "scheduler",
        "mixed_precision",
        "comm_overlap",
        "profiling",
        "ft",
        "straggler",
        "nvrx_straggler",
        "inprocess_restart",
    }
)

SCHEMA_SECTIONS: dict[str, type[BaseModel]] = {
    "model": ModelConfig,
    "train": TrainConfig,
    "optimizer": OptimizerConfig,
    "ddp": DDPConfig,
    "checkpoint": CheckpointConfig,
}
MEMTUNE_ONLY_SECTIONS = ("env", "cluster")
# memtune's own top-level keys, taken as they are: the stack and the check selection
MEMTUNE_ONLY_KEYS = ("defaults", "check")
# Switches Bridge keeps under another section or name than memtune does.
MOVED_KEYS = {
    "model.fp8_param": "model.fp8_param_gather",
    "ddp.fp8_param_gather": "model.fp8_param_gather",
    "ddp.nccl_ub": "env.use_nccl_ub",  # memtune keeps it beside the allocator settings it conflicts with
}
LORA_TARGET = "megatron.bridge.peft.lora.LoRA"

# Bridge's registered mixed-precision recipes (megatron/bridge/training/mixed_precision.py),
# reduced to the fields memtune models.
_BF16 = {"bf16": True, "fp16": False, "pipeline_dtype": "bf16", "grad_reduce_in_fp32": True}
_FP16 = {"bf16": False, "fp16": True, "pipeline_dtype": "fp16", "grad_reduce_in_fp32": False}
MIXED_PRECISION_RECIPES = {
    "bf16_mixed": _BF16,
    "fp16_mixed": _FP16,
    "bf16_with_fp8_delayed_scaling_mixed": {
        **_BF16,
        "fp8": "hybrid",
        "fp8_recipe": "delayed",
        "fp8_param_gather": True,
    },
    "fp16_with_fp8_delayed_scaling_mixed": {
        **_FP16,
        "fp8": "hybrid",
        "fp8_recipe": "delayed",
        "fp8_param_gather": True,
    },
    "bf16_with_mxfp8_mixed": {**_BF16, "fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True},
    "fp16_with_mxfp8_mixed": {**_FP16, "fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True},
    "bf16_with_fp8_current_scaling_mixed": {
        **_BF16,
        "fp8": "hybrid",
        "fp8_recipe": "tensorwise",
        "fp8_param_gather": True,
    },
    "fp16_with_fp8_current_scaling_mixed": {
        **_FP16,
        "fp8": "hybrid",
        "fp8_recipe": "tensorwise",
        "fp8_param_gather": True,
    },
    "bf16_with_fp8_subchannel_scaling_mixed": {
        **_BF16,
        "fp8": "hybrid",
        "fp8_recipe": "blockwise",
        "fp8_param_gather": False,
    },
    "fp16_with_fp8_subchannel_scaling_mixed": {
        **_FP16,
        "fp8": "hybrid",
        "fp8_recipe": "blockwise",
        "fp8_param_gather": False,
    },
}
_MIXED_PRECISION_MODEL_KEYS = (
    "bf16",
    "fp16",
    "fp8",
    "fp8_recipe",
    "fp8_param_gather",
    "fp8_dot_product_attention",
    "pipeline_dtype",
)
_COMM_OVERLAP_DDP_KEYS = ("overlap_grad_reduce", "overlap_param_gather", "bucket_size")
# CommOverlapConfig keys Bridge's setup copies onto the model config
# (megatron/bridge/training/comm_overlap.py, _get_model_comm_overlap_cfgs, at 067f987df03b).
_COMM_OVERLAP_MODEL_KEYS = ("tp_comm_overlap", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute")


def is_bridge_dump(data: dict[str, Any]) -> bool:
    return bool(BRIDGE_ONLY_SECTIONS & data.keys()) or _has_target(data) or _bridge_checkpoint(data)


def _bridge_checkpoint(data: dict[str, Any]) -> bool:
    """A ``checkpoint`` section with keys only Bridge's CheckpointConfig has (``save``,
    ``save_interval``, ...); memtune's own section holds a subset of Bridge's keys."""
    section = data.get("checkpoint")
    return isinstance(section, dict) and bool(section.keys() - CheckpointConfig.model_fields.keys())


def _has_target(value: object) -> bool:
    if isinstance(value, dict):
        return "_target_" in value or any(_has_target(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_target(v) for v in value)
    return False


# The model keys an override file leaves to its recipe; a job needs them (schema.ModelConfig).
ARCHITECTURE_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
# How the keys of an override file and of a recipe are compared to find the recipe it overrides.
_LAYOUT_KEYS = (
    "model.tensor_model_parallel_size",
    "model.pipeline_model_parallel_size",
    "model.context_parallel_size",
    "model.sequence_parallel",
    "model.seq_length",
    "train.global_batch_size",
    "train.micro_batch_size",
)


def missing_architecture(data: dict[str, Any], path: Path) -> dict[str, str]:
    """For an override file (read into ``data``) that names no architecture: one line, for each
    architecture key, saying what the file needs and which recipe it most likely overrides."""
    model = data.get("model")
    if not isinstance(model, dict):
        model = {}
    if "preset" in model or any(key in model for key in ARCHITECTURE_KEYS):
        return {}
    shown = echo(path.name)[1:-1]  # the name alone: a long path would be cut
    line = (
        f"{shown}: an override file without a model architecture: give the recipe it overrides "
        f"(--recipe NAME {shown}) or a preset (model.preset=NAME, `memtune models`); closest recipe by "
        f"its name and keys: {closest_recipe(path.stem, data)}"
    )
    return {f"model.{key}": line for key in ARCHITECTURE_KEYS}


# How a file's name says what it trains; the rest of its words name the model.
_MODE_WORDS = {"pretrain": "pretrain", "sft": "sft", "finetune": "sft", "finetuning": "sft"}
_MODE_WORDS |= {"peft": "peft", "lora": "peft"}


def closest_recipe(stem: str, data: dict[str, Any]) -> str:
    """The recipe whose name shares the most model words with ``stem`` (the file's name; a word
    matches a longer or shorter one it begins, e.g. llama32 and llama3), then trains the same way
    (LoRA when the file has ``peft``), is a library recipe, and shares the most layout keys."""
    from memtune.catalog.recipes import list_recipes  # the catalog reads the config layer too

    words = _words(stem)
    modes = {_MODE_WORDS[w] for w in words if w in _MODE_WORDS}
    if data.get("peft"):
        modes = {"peft"}
    model_words = words - _MODE_WORDS.keys()

    def score(recipe: Recipe) -> tuple[int, bool, bool, int]:
        shared = max(_shared(model_words, _words(name)) for name in (recipe.label, *recipe.aliases))
        same = sum(
            _at(data, key) is not None and _at(data, key) == _at(recipe.config, key) for key in _LAYOUT_KEYS
        )
        return shared, recipe.mode in modes, recipe.kind == "library", same

    return max(list_recipes(), key=score).label


def _shared(words: set[str], other: set[str]) -> int:
    return sum(
        any(w == o or (min(len(w), len(o)) >= 5 and (w.startswith(o) or o.startswith(w))) for o in other)
        for w in words
    )


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower().removeprefix("perf:")) if w and w != "config"}


def _at(data: dict[str, Any], dotted: str) -> object:
    section, key = dotted.split(".")
    value = data.get(section)
    return value.get(key) if isinstance(value, dict) else None


# Megatron-Bridge's fine-tuning datasets (megatron.bridge.training.config.FinetuningDatasetConfig,
# megatron.bridge.data.builders GPTSFTDatasetConfig and HFDatasetConfig): their class names.
_SFT_DATASETS = ("FinetuningDatasetConfig", "GPTSFTDatasetConfig", "HFDatasetConfig")


def fine_tuning(data: dict[str, Any]) -> str | None:
    """Why a ``ConfigContainer`` dump or override file fine-tunes, in words; None when it says
    nothing of it. Bridge's ``finetune()`` entry point starts from ``checkpoint.pretrained_checkpoint``
    and reads an SFT dataset; ``checkpoint.finetune`` loads a checkpoint without its optimizer."""
    dataset, checkpoint = _section(data, "dataset"), _section(data, "checkpoint")
    target = str(dataset.get("_target_", ""))
    if target.rsplit(".", 1)[-1] in _SFT_DATASETS:
        return f"its dataset is {target.rsplit('.', 1)[-1]}"
    if checkpoint.get("pretrained_checkpoint"):
        return "it starts from checkpoint.pretrained_checkpoint"
    if checkpoint.get("finetune") is True:
        return "checkpoint.finetune is set"
    return None


def read(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    ignored: list[str] = []
    out: dict[str, Any] = {name: {} for name in (*SCHEMA_SECTIONS, "env")}
    for name, schema in SCHEMA_SECTIONS.items():
        _take_known_keys(_section(data, name), schema, name, out, ignored)
    scope = out["model"].get("cuda_graph_scope")
    if isinstance(scope, str):  # megatron-core 0.16's TransformerConfig before __post_init__ splits it
        # (transformer_config.py: a comma-separated string; "full", deprecated, is the whole layer: [])
        out["model"]["cuda_graph_scope"] = [] if scope == "full" else scope.split(",")
    if "preset" in _section(data, "model"):  # resolved with the other layers: native.resolve_preset
        out["model"]["preset"] = data["model"]["preset"]
    if "seq_length" not in out["model"] and _section(data, "dataset").get("seq_length"):
        out["model"]["seq_length"] = data["dataset"]["seq_length"]
    if "vocab_size" not in out["model"] and _section(data, "tokenizer").get("vocab_size"):
        out["model"]["vocab_size"] = data["tokenizer"]["vocab_size"]

    if data.get("mixed_precision") is not None:
        _apply_mixed_precision(data["mixed_precision"], out, ignored)
    _apply_comm_overlap(_section(data, "comm_overlap"), out, ignored)
    if data.get("peft") is not None:
        out["peft"] = _lora(data["peft"], ignored)
    for name in MEMTUNE_ONLY_SECTIONS:
        if isinstance(data.get(name), dict):
            out[name] = {**out.get(name, {}), **data[name]}
        elif name in data:
            out[name] = data[name]  # not a mapping: the schema says so

    for name in MEMTUNE_ONLY_KEYS:
        if name in data:
            out[name] = data[name]

    handled = {
        *SCHEMA_SECTIONS,
        *MEMTUNE_ONLY_KEYS,
        "peft",
        "mixed_precision",
        "comm_overlap",
        *MEMTUNE_ONLY_SECTIONS,
        "_target_",
    }
    ignored.extend(name for name, value in data.items() if name not in handled and value is not None)
    sections = {name: section for name, section in out.items() if section != {}}
    return {"defaults": data.get("defaults", "megatron-bridge"), **sections}, ignored


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{name}: expected a mapping of keys, got {echo(value)}")
    return value


def _take_known_keys(
    section: dict[str, Any], schema: type[BaseModel], prefix: str, out: dict[str, Any], ignored: list[str]
) -> None:
    """Copy the keys ``schema`` knows into ``out[prefix]``; note the others in ``ignored``."""
    for key, value in section.items():
        if key.startswith("_") or (prefix, key) == ("model", "preset"):
            continue  # _target_, _call_: how Bridge rebuilds the object; a preset is read by read()
        moved = MOVED_KEYS.get(f"{prefix}.{key}")
        if moved and value is not None:
            dest_section, dest_key = moved.split(".")
            out[dest_section][dest_key] = bool(out[dest_section].get(dest_key)) or bool(value)
            continue
        field = schema.model_fields.get(key)
        if field is None:
            if value is not None:
                ignored.append(f"{prefix}.{key}")
            continue
        # A null in a dump means "Megatron's default", which is the schema's default too.
        if value is None and not _accepts_none(field.annotation):
            continue
        out[prefix][key] = plain(value)


def _accepts_none(annotation: object) -> bool:
    return annotation is type(None) or type(None) in getattr(annotation, "__args__", ())


def _apply_mixed_precision(value: object, out: dict[str, Any], ignored: list[str]) -> None:
    if isinstance(value, str):
        recipe = MIXED_PRECISION_RECIPES.get(value.replace("-", "_"))
        if recipe is None:
            known = ", ".join(MIXED_PRECISION_RECIPES)
            raise InputError(f"mixed_precision: unknown recipe {echo(value)}; known: {known}")
        settings = dict(recipe)
    elif isinstance(value, dict):
        settings = {k: plain(v) for k, v in value.items() if not k.startswith("_")}
        if settings.get("fp8_param") is not None and "fp8_param_gather" not in settings:
            settings["fp8_param_gather"] = settings["fp8_param"]
        if settings.get("fp32"):
            settings.update(bf16=False, fp16=False)
        used = {*_MIXED_PRECISION_MODEL_KEYS, "grad_reduce_in_fp32", "fp8_param", "fp32"}
        ignored.extend(f"mixed_precision.{k}" for k, v in settings.items() if k not in used and v is not None)
    else:
        raise InputError(f"mixed_precision: expected a recipe name or a mapping, got {echo(value)}")
    for key in _MIXED_PRECISION_MODEL_KEYS:
        if settings.get(key) is not None:
            out["model"][key] = settings[key]
    if settings.get("grad_reduce_in_fp32") is not None:
        out["ddp"]["grad_reduce_in_fp32"] = settings["grad_reduce_in_fp32"]


def _apply_comm_overlap(section: dict[str, Any], out: dict[str, Any], ignored: list[str]) -> None:
    # A CommOverlapConfig that sets no DP overlap of its own decides them by the DP size at setup
    # (comm_overlap.py _get_optimizer_overlap_cfgs, at 067f987df03b), over the ddp section's;
    # one that sets some keeps the ddp section's others here (Bridge would compute them).
    if section and not any(section.get(key) is not None for key in _COMM_OVERLAP_DDP_KEYS):
        out["ddp"]["overlap_by_data_parallel_size"] = True
    for key, value in section.items():
        if key.startswith("_") or value is None:
            continue
        if key in _COMM_OVERLAP_DDP_KEYS:
            out["ddp"][key] = value
        elif key in _COMM_OVERLAP_MODEL_KEYS:
            out["model"][key] = value
        elif key == "tp_comm_overlap_cfg":
            out["model"][key] = _overlap_cfg(value, ignored)
        else:
            ignored.append(f"comm_overlap.{key}")


def _overlap_cfg(value: object, ignored: list[str]) -> object:
    """Bridge's ``TransformerLayerTPOverlapCfg`` as its YAML dump writes it (per GEMM a dataclass
    with ``_target_``, ``None`` for Transformer Engine's default) or a configuration's name: the
    fields memtune prices; the others are listed as ignored."""
    if not isinstance(value, dict):
        return value  # a name, or something the schema refuses with its own message
    out: dict[str, object] = {}
    for gemm, fields in value.items():
        if str(gemm).startswith("_") or fields is None:
            continue
        if not isinstance(fields, dict):
            out[gemm] = fields
            continue
        out[gemm] = {k: v for k, v in fields.items() if k in UserbufferGemmConfig.model_fields}
        ignored.extend(
            f"comm_overlap.tp_comm_overlap_cfg.{gemm}.{k}"
            for k, v in fields.items()
            if not k.startswith("_") and k not in UserbufferGemmConfig.model_fields and v is not None
        )
    return out


def _lora(value: object, ignored: list[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"peft: expected a LoRA mapping ({LORA_TARGET}), got {echo(value)}")
    target = value.get("_target_", LORA_TARGET)
    if target != LORA_TARGET:
        raise InputError(f"peft: only LoRA ({LORA_TARGET}) is supported, got {cut(str(target))}")
    out: dict[str, dict[str, Any]] = {"peft": {}}
    _take_known_keys(value, LoraConfig, "peft", out, ignored)
    return out["peft"]
