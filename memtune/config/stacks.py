"""Where a job's unset keys come from: the defaults of the stack that builds it.

memtune's schema defaults are Megatron-Core's own (``TransformerConfig``, ``ModelParallelConfig``,
``DistributedDataParallelConfig``). Megatron-LM and Megatron-Bridge build that config with other
values for some keys; a job names its stack in ``defaults:`` and gets that stack's value for every
key it does not set. The tables below hold only the keys that differ, each with its source
(paths inside the upstream repositories):

Megatron-LM (``defaults: megatron-lm``; what a launch script gets):

=====================================  =======================  ===============================================
key                                    value                    source
=====================================  =======================  ===============================================
model.position_embedding_type          learned_absolute         megatron/training/arguments.py ``--position-embedding-type``
model.masked_softmax_fusion            true                     megatron/training/arguments.py ``--no-masked-softmax-fusion``
model.bias_activation_fusion           true                     megatron/training/argument_utils.py (``--no-bias-swiglu-fusion``/``--no-bias-gelu-fusion``)
model.attention_softmax_in_fp32        false                    megatron/training/arguments.py ``--attention-softmax-in-fp32`` (store_true)
model.gradient_accumulation_fusion     true                     megatron/training/arguments.py ``--no-gradient-accumulation-fusion``
model.deallocate_pipeline_outputs      true                     megatron/training/argument_utils.py ``core_transformer_config_from_args``
model.pipeline_dtype                   the parameter dtype      megatron/training/argument_utils.py ``core_transformer_config_from_args``
ddp.grad_reduce_in_fp32                true with bf16           megatron/training/arguments.py (``accumulate_allreduce_grads_in_fp32`` for bf16)
=====================================  =======================  ===============================================

Megatron-Bridge (``defaults: megatron-bridge``; memtune's YAML unless it says otherwise, Bridge
dumps, recipes and Hugging Face configs):

=====================================  =======================  ===============================================
key                                    value                    source
=====================================  =======================  ===============================================
model.position_embedding_type          learned_absolute         src/megatron/bridge/models/gpt_provider.py ``GPTModelProvider``
model.masked_softmax_fusion            true                     src/megatron/bridge/models/gpt_provider.py ``GPTModelProvider``
model.attention_softmax_in_fp32        false                    src/megatron/bridge/models/gpt_provider.py ``GPTModelProvider``
model.cross_entropy_loss_fusion        true                     src/megatron/bridge/models/gpt_provider.py ``GPTModelProvider``
model.gradient_accumulation_fusion     true                     src/megatron/bridge/utils/fusions.py (on when Transformer Engine imports, as in NVIDIA's containers)
model.deallocate_pipeline_outputs      true                     src/megatron/bridge/models/gpt_provider.py ``GPTModelProvider``
model.pipeline_dtype                   the parameter dtype      src/megatron/bridge/models/transformer_config.py ``finalize()`` (PP > 1)
checkpoint.use_persistent_ckpt_worker  true (with async_save)   src/megatron/bridge/training/config.py ``CheckpointConfig``
=====================================  =======================  ===============================================

Both stacks also switch ``sequence_parallel`` off at TP 1 (with a warning) instead of refusing it;
:attr:`memtune.config.derived.Derived.sequence_parallel` and rule SEQ001 follow that.

Applied values stay *unset* on the validated job: ``model_dump(exclude_unset=True)`` gives only
what the user (or a loader) wrote, so a dumped job validates back into an equal one, and
:func:`received_defaults` can always tell which values came from the stack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, get_args

from pydantic import BaseModel

from memtune.config.derived import derive
from memtune.config.schema import JobConfig, Stack

STACKS: tuple[str, ...] = get_args(Stack)
DEFAULT_STACK = "megatron-bridge"


def _param_dtype(job: JobConfig) -> str:
    return derive(job).param_dtype


def _param_dtype_when_pipelined(job: JobConfig) -> str | None:
    return _param_dtype(job) if job.model.pipeline_model_parallel_size > 1 else None


@dataclass(frozen=True)
class StackDefault:
    key: str  # dotted, e.g. "model.masked_softmax_fusion"
    value: object | Callable[[JobConfig], object]  # a callable reads the job; None: not applied
    source: str  # the upstream file that sets it


@dataclass(frozen=True)
class ReceivedDefault:
    """A value a job got from its stack (or, for Hugging Face configs, from Bridge's model bridge)."""

    key: str
    value: object
    stack: str
    source: str

    def __str__(self) -> str:
        value = str(self.value).lower() if isinstance(self.value, bool) else self.value
        return f"{self.key}={value} ({self.stack}: {self.source})"


_LM_ARGS = "megatron/training/arguments.py"
_LM_UTILS = "megatron/training/argument_utils.py"
_PROVIDER = "megatron/bridge/models/gpt_provider.py GPTModelProvider"

STACK_DEFAULTS: dict[str, tuple[StackDefault, ...]] = {
    "megatron-core": (),
    "megatron-lm": (
        StackDefault("model.position_embedding_type", "learned_absolute", _LM_ARGS),
        StackDefault("model.masked_softmax_fusion", True, _LM_ARGS),
        StackDefault("model.bias_activation_fusion", True, _LM_UTILS),
        StackDefault("model.attention_softmax_in_fp32", False, _LM_ARGS),
        StackDefault("model.gradient_accumulation_fusion", True, _LM_ARGS),
        StackDefault("model.deallocate_pipeline_outputs", True, _LM_UTILS),
        StackDefault("model.pipeline_dtype", _param_dtype, _LM_UTILS),
        StackDefault("ddp.grad_reduce_in_fp32", lambda job: job.model.bf16, _LM_ARGS),
    ),
    "megatron-bridge": (
        StackDefault("model.position_embedding_type", "learned_absolute", _PROVIDER),
        StackDefault("model.masked_softmax_fusion", True, _PROVIDER),
        StackDefault("model.attention_softmax_in_fp32", False, _PROVIDER),
        StackDefault("model.cross_entropy_loss_fusion", True, _PROVIDER),
        StackDefault("model.gradient_accumulation_fusion", True, "megatron/bridge/utils/fusions.py"),
        StackDefault("model.deallocate_pipeline_outputs", True, _PROVIDER),
        StackDefault(
            "model.pipeline_dtype",
            _param_dtype_when_pipelined,
            "megatron/bridge/models/transformer_config.py finalize()",
        ),
        StackDefault(
            "checkpoint.use_persistent_ckpt_worker",
            lambda job: True if job.checkpoint.async_save else None,  # listed only where it matters
            "megatron/bridge/training/config.py CheckpointConfig",
        ),
    ),
}


def apply_stack_defaults(job: JobConfig) -> JobConfig:
    """``job`` with its stack's value for every key it does not set, those keys left unset."""
    updates: dict[str, dict[str, object]] = {}
    for default in STACK_DEFAULTS[job.defaults]:
        section_name, key = default.key.split(".")
        section: BaseModel = getattr(job, section_name)
        if key in section.model_fields_set:
            continue
        value = default.value(job) if callable(default.value) else default.value
        if value is not None:
            updates.setdefault(section_name, {})[key] = value
    if not updates:
        return job
    sections = {name: _unmarked_copy(getattr(job, name), values) for name, values in updates.items()}
    return _unmarked_copy(job, sections)


_Model = TypeVar("_Model", bound=BaseModel)


def _unmarked_copy(model: _Model, values: Mapping[str, object]) -> _Model:
    """A copy with ``values`` in place that still counts only the original keys as set."""
    was_set = set(model.model_fields_set)
    copy = model.model_copy(update=values)
    object.__setattr__(copy, "__pydantic_fields_set__", was_set)
    return copy


def received_defaults(job: JobConfig) -> list[ReceivedDefault]:
    """The values ``job`` got from its stack: each table key it does not set, with its value."""
    received = []
    for default in STACK_DEFAULTS[job.defaults]:
        section_name, key = default.key.split(".")
        section: BaseModel = getattr(job, section_name)
        if key in section.model_fields_set:
            continue
        value = default.value(job) if callable(default.value) else default.value
        if value is not None:
            received.append(ReceivedDefault(default.key, getattr(section, key), job.defaults, default.source))
    return received


# What Megatron-Bridge's per-architecture model bridges set on top of GPTModelProvider when
# AutoBridge builds a model from a Hugging Face config (keys memtune's schema has and the
# Hugging Face loader does not already read from the file), by ``model_type``.
_LLAMA_BRIDGE = "megatron/bridge/models/llama/llama_bridge.py"
_DSV2_BRIDGE = "megatron/bridge/models/deepseek/deepseek_v2_bridge.py"
_DSV3_BRIDGE = "megatron/bridge/models/deepseek/deepseek_v3_bridge.py"
_GLM45_BRIDGE = "megatron/bridge/models/glm/glm45_bridge.py"
_MOE_BRIDGE_VALUES = {"moe_grouped_gemm": True, "moe_token_dispatcher_type": "alltoall"}
_DEEPSEEK_VALUES = {
    **_MOE_BRIDGE_VALUES,
    "bias_activation_fusion": True,
    "gradient_accumulation_fusion": True,
    "cross_entropy_loss_fusion": True,
    "cross_entropy_fusion_impl": "te",
    "moe_shared_expert_overlap": True,
    "moe_router_load_balancing_type": "seq_aux_loss",
    "qk_layernorm": True,
}
BRIDGE_ARCHITECTURE_VALUES: dict[str, tuple[dict[str, object], str]] = {
    "llama": ({"bias_activation_fusion": True}, _LLAMA_BRIDGE),
    "deepseek_v2": ({**_DEEPSEEK_VALUES, "make_vocab_size_divisible_by": 3200}, _DSV2_BRIDGE),
    "deepseek_v3": ({**_DEEPSEEK_VALUES, "make_vocab_size_divisible_by": 1280}, _DSV3_BRIDGE),
    "gpt_oss": ({"bias_activation_fusion": True}, "megatron/bridge/models/gpt_oss/gpt_oss_bridge.py"),
    "glm4_moe": (
        {
            **_MOE_BRIDGE_VALUES,
            "bias_activation_fusion": True,
            "moe_shared_expert_overlap": True,
            "moe_router_load_balancing_type": "seq_aux_loss",
        },
        _GLM45_BRIDGE,
    ),
    "qwen3_moe": (_MOE_BRIDGE_VALUES, "megatron/bridge/models/qwen/qwen3_moe_bridge.py"),
    "olmoe": (
        {**_MOE_BRIDGE_VALUES, "moe_router_load_balancing_type": "seq_aux_loss"},
        "megatron/bridge/models/olmoe/olmoe_bridge.py",
    ),
}


def architecture_values(model_type: str, model: dict[str, Any]) -> list[ReceivedDefault]:
    """Bridge's per-architecture values for ``model_type`` that ``model`` does not set; the caller
    writes them into the model section."""
    values, source = BRIDGE_ARCHITECTURE_VALUES.get(model_type, ({}, ""))
    return [
        ReceivedDefault(f"model.{key}", value, "megatron-bridge", source)
        for key, value in values.items()
        if key not in model
    ]
