"""Live Python objects as jobs: what the Python API (``memtune.estimate(config)``) accepts.

- a Megatron-Bridge ``ConfigContainer`` (any dataclass with ``model`` and ``train`` fields): its
  fields are walked as Bridge's own ``to_dict()`` writes them (every dataclass carries its
  ``_target_``; functions, torch dtypes and enums become ``_target_`` entries), and the result is
  read as a Bridge dump is (:mod:`.bridge`);
- a Megatron-LM ``argparse.Namespace`` from ``megatron.training.arguments.parse_args()`` (or
  ``get_args()`` after ``validate_args``): each attribute that holds a flag memtune reads and
  differs from the parser's default becomes that flag, and the flags are read as a launch
  script's are (:mod:`.megatron_args`); ``world_size`` gives the GPU count;
- a ``dict``: read by its keys, as a YAML file with the same content would be; a memtune
  ``JobConfig`` (``Estimate.job``) as its own data;
- a ``str`` or ``os.PathLike``: the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
from pathlib import Path
from typing import Any

from memtune.config.changes import job_data
from memtune.config.loaders import RawJob, read_mapping, read_raw
from memtune.config.loaders._guards import check_tree
from memtune.config.loaders.megatron_args import FLAGS, Switch, Value, read_words
from memtune.config.schema import JobConfig
from memtune.errors import ArgumentTypeError, InputError
from memtune.numbers import echo

# Where Megatron-LM's parser stores a flag under another name than the flag's own
# (megatron/training/arguments.py at d98e8a6; store_false switches hold False once given).
NAMESPACE_DEST = {
    "microbatch-group-size-per-virtual-pipeline-stage": "microbatch_group_size_per_vp_stage",
    "fp8-format": "fp8",
    "use-nccl-ub": "nccl_ub",
    "disable-bias-linear": "add_bias_linear",
    "no-masked-softmax-fusion": "masked_softmax_fusion",
    "no-bias-swiglu-fusion": "bias_swiglu_fusion",
    "no-bias-gelu-fusion": "bias_gelu_fusion",
    "no-gradient-accumulation-fusion": "gradient_accumulation_fusion",
    "no-ckpt-fully-parallel-save": "ckpt_fully_parallel_save",
}
# Deprecated switches that share their attribute with the flag that replaced them: the
# attribute says what the newer flag did (--ckpt-fully-parallel-save is a no-op whose
# ckpt_fully_parallel_save only --no-ckpt-fully-parallel-save turns off).
NOT_IN_A_NAMESPACE = frozenset({"ckpt-fully-parallel-save"})
STORE_FALSE = frozenset(
    {
        "no-ckpt-fully-parallel-save",
        "disable-bias-linear",
        "no-masked-softmax-fusion",
        "no-bias-swiglu-fusion",
        "no-bias-gelu-fusion",
        "no-gradient-accumulation-fusion",
    }
)
# The parser's defaults for the valued flags memtune reads (the rest default to None), from
# megatron/training/arguments.py at d98e8a6 (benchmarks/record_megatron_lm_namespace.py records
# a whole Namespace). A value equal to its default was not given, or changes nothing.
NAMESPACE_DEFAULTS: dict[str, object] = {
    "tensor-model-parallel-size": 1,
    "pipeline-model-parallel-size": 1,
    "context-parallel-size": 1,
    "cp-comm-type": ["p2p"],
    "expert-model-parallel-size": 1,
    "num-query-groups": 1,
    "make-vocab-size-divisible-by": 128,
    "normalization": "LayerNorm",
    "hidden-dropout": 0.1,
    "attention-dropout": 0.1,
    "position-embedding-type": "learned_absolute",
    "moe-router-topk": 2,
    "moe-layer-freq": 1,
    "moe-token-dispatcher-type": "allgather",
    "moe-router-load-balancing-type": "aux_loss",
    "moe-flex-dispatcher-backend": "deepep",
    "kv-lora-rank": 32,
    "qk-head-dim": 128,
    "qk-pos-emb-head-dim": 64,
    "v-head-dim": 128,
    "cpu-offloading-num-layers": 0,
    "offload-modules": [],
    "min-offloaded-tensor-size": 1048576,
    "activation-offload-fraction": 1.0,
    "fp8-recipe": "delayed",
    "cross-entropy-fusion-impl": "native",
    "transformer-impl": "transformer_engine",
    "cuda-graph-impl": "none",
    "attention-backend": "auto",
    "softmax-type": "vanilla",
    "ckpt-format": "torch_dist",
    "optimizer": "adam",
    "main-grads-dtype": "fp32",
    "main-params-dtype": "fp32",
    "exp-avg-dtype": "fp32",
    "exp-avg-sq-dtype": "fp32",
    "optimizer-offload-fraction": 1.0,
    "data-parallel-sharding-strategy": "optim_grads_params",
    "megatron-fsdp-main-params-dtype": "fp32",
    "megatron-fsdp-main-grads-dtype": "auto",
    "num-distributed-optimizer-instances": 1,
}
_TORCH_DTYPE_NAMES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}
MAX_OBJECT_DEPTH = 12  # a ConfigContainer nests 3 deep; deeper is a cycle or not a config


def read_object(config: object) -> tuple[RawJob, str]:
    """The job ``config`` describes and a name for it in messages."""
    if isinstance(config, str | os.PathLike):
        path = Path(os.fspath(config))
        return read_raw(path), str(path)
    if isinstance(config, argparse.Namespace):
        return _namespace(config), "Namespace"
    if isinstance(config, dict):
        check_tree(config, "dict")
        return read_mapping(config, Path("dict")), "dict"
    if isinstance(config, JobConfig):  # memtune's own job, e.g. Estimate.job
        return read_mapping(job_data(config), Path("JobConfig")), "JobConfig"
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        names = {f.name for f in dataclasses.fields(config)}
        if {"model", "train"} <= names:
            mapping = _dataclass_dict(config, 0)
            return read_mapping(mapping, Path(type(config).__name__)), type(config).__name__
    raise ArgumentTypeError(
        "config: must be a Megatron-Bridge ConfigContainer, a Megatron-LM argparse.Namespace, a dict, "
        f"a memtune JobConfig or a path, got {echo(type(config).__name__)}"
    )


def _dataclass_dict(obj: object, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {"_target_": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name, None)
        if value is not None:  # None in a live config is "not set yet" (finalize() fills some)
            out[f.name] = _value(value, depth + 1)
    return out


def _value(value: object, depth: int) -> object:
    """``value`` as Bridge's ``to_dict()`` writes it (what its YAML dump holds)."""
    if depth > MAX_OBJECT_DEPTH:
        raise InputError(f"config: nested deeper than {MAX_OBJECT_DEPTH} objects (or it contains itself)")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return {"_target_": f"{type(value).__module__}.{type(value).__qualname__}", "_name_": value.name}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _dataclass_dict(value, depth)
    if isinstance(value, dict):
        return {str(k): _value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_value(v, depth + 1) for v in value]
    if _is_torch_dtype(value):
        return {"_target_": str(value), "_call_": False}
    if callable(value) and hasattr(value, "__qualname__"):
        module = getattr(value, "__module__", None) or ""
        return {"_target_": f"{module}.{value.__qualname__}", "_call_": False}
    return str(value)  # a path, a tokenizer object: nothing memtune reads


def _is_torch_dtype(value: object) -> bool:
    return type(value).__module__ == "torch" and type(value).__name__ == "dtype"


def _namespace(namespace: argparse.Namespace) -> RawJob:
    attributes = vars(namespace)
    world = attributes.get("world_size")
    data, ignored, missing, fine_tuning = read_words(
        Path("Namespace"),
        namespace_words(attributes),
        world if isinstance(world, int) and not isinstance(world, bool) else None,
    )
    return RawJob(
        data=data, format="megatron-args", ignored=ignored, missing=missing, fine_tuning=fine_tuning
    )


def namespace_words(attributes: dict[str, Any]) -> list[str]:
    """The flags memtune reads that a Namespace's attributes hold (those not at their default)."""
    words: list[str] = []
    for flag, spec in FLAGS.items():
        if flag in NOT_IN_A_NAMESPACE:
            continue
        dest = NAMESPACE_DEST.get(flag, flag.replace("-", "_"))
        if dest not in attributes:
            continue
        value = attributes[dest]
        if isinstance(spec, Switch):
            if value is (flag not in STORE_FALSE):
                words.append(f"--{flag}")
        elif isinstance(spec, Value):
            words.extend(_value_words(flag, value, spec.many))
    vpp_flags = ("--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage")
    if not any(w in words for w in vpp_flags):
        # validate_args turns either flag into virtual_pipeline_model_parallel_size
        vpp = attributes.get("virtual_pipeline_model_parallel_size")
        if isinstance(vpp, int) and vpp > 1:
            words.extend(["--num-virtual-stages-per-pipeline-rank", str(vpp)])
    return words


def _value_words(flag: str, value: object, many: bool) -> list[str]:
    text = _flag_text(value)
    if text is None or text == _flag_text(NAMESPACE_DEFAULTS.get(flag)):
        return []
    if many:
        return [f"--{flag}", *text] if isinstance(text, list) else [f"--{flag}", text]
    return [f"--{flag}", f"[{','.join(text)}]" if isinstance(text, list) else text]


def _flag_text(value: object) -> str | list[str] | None:
    """A Namespace value as the flag's text; torch dtypes and enums (validate_args makes them)
    by the names the flags take."""
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        return value.name
    if _is_torch_dtype(value):
        return _TORCH_DTYPE_NAMES.get(str(value), str(value))
    if isinstance(value, list | tuple):
        items = [_flag_text(v) for v in value]
        return [str(i) for i in items if i is not None]
    return str(value)
