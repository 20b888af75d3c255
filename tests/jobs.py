"""The one way tests build a job: a base mapping, whole sections updated key by key, then the
dotted overrides the CLI takes, validated as any loaded config is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memtune.config.overrides import apply_overrides
from memtune.config.schema import JobConfig
from memtune.config.validation import validate

# A two-layer model section that any check passes and the step model prices in milliseconds.
TINY_MODEL: Mapping[str, Any] = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "seq_length": 128,
    "vocab_size": 256,
}


def build_job(base: Mapping[str, Any], *overrides: str, **sections: Any) -> JobConfig:
    """``base`` (never changed) with each of ``sections`` laid over it — a mapping updates that
    section's keys, anything else (``defaults="megatron-lm"``) replaces the top-level value — then
    ``overrides`` such as ``"model.tensor_model_parallel_size=4"``."""
    data = {key: dict(value) if isinstance(value, Mapping) else value for key, value in base.items()}
    for section, values in sections.items():
        if isinstance(values, Mapping):
            data[section] = {**data.get(section, {}), **values}
        else:
            data[section] = values
    return validate(apply_overrides(data, list(overrides)))
