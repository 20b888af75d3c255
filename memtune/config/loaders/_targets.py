"""Plain values from the ``_target_`` objects that Megatron-Bridge and Hydra write into YAML.

Bridge dumps functions as ``{_target_: torch.nn.functional.silu, _call_: false}``, torch dtypes
as ``{_target_: torch.bfloat16, _call_: false}`` and enums as ``{_target_: ...AttnBackend,
_args_: [5], _name_: auto}``; memtune wants the names its schema uses.
"""

from __future__ import annotations

TORCH_DTYPES = {
    "torch.float32": "fp32",
    "torch.float": "fp32",
    "torch.bfloat16": "bf16",
    "torch.float16": "fp16",
    "torch.half": "fp16",
    "torch.uint8": "fp8",  # Megatron-Core's stand-in for fp8 optimizer states
}

# The last part of an activation function's import path, to the schema's name for it.
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "openai_gelu": "gelu",
    "fast_gelu": "gelu",
    "quick_gelu": "quick_gelu",
    "squared_relu": "squared_relu",
    "relu": "relu",
}


def plain(value: object) -> object:
    """The schema-level value of a dumped object; anything else is returned unchanged."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if not isinstance(value, dict) or "_target_" not in value:
        return value
    target = str(value["_target_"])
    if target in TORCH_DTYPES:
        return TORCH_DTYPES[target]
    if "_name_" in value:
        return value["_name_"]
    return ACTIVATIONS.get(target.rsplit(".", 1)[-1], target)
