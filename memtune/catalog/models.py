"""Model presets: published architectures as ready-made ``model:`` sections.

A memtune config uses one with ``model: {preset: llama3-70b, tensor_model_parallel_size: 4}``;
the preset's keys come first and the config's own keys override them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from typing import Any

from memtune.catalog._data import read_catalog, spelling_key
from memtune.errors import InputError
from memtune.numbers import echo


@dataclass(frozen=True)
class ModelPreset:
    name: str
    description: str
    hf_id: str  # the Hugging Face repository whose config.json the values come from
    model: dict[str, Any]  # the ``model:`` section; get_model() hands out copies


@cache
def _presets() -> dict[str, ModelPreset]:
    entries = read_catalog("models.yaml")["models"]
    return {
        name: ModelPreset(
            name=name, description=entry["description"], hf_id=entry["hf_id"], model=entry["model"]
        )
        for name, entry in entries.items()
    }


def list_models() -> list[ModelPreset]:
    return list(_presets().values())


def find_model(name: str) -> ModelPreset:
    """A preset by its name, also in a recipe's spelling (``llama31_405b`` is ``llama3.1-405b``)."""
    wanted = spelling_key(name)
    for preset in _presets().values():
        if spelling_key(preset.name) == wanted:
            return preset
    raise InputError(f"unknown model preset {echo(name)}; known: {', '.join(_presets())}")


def get_model(name: str) -> dict[str, Any]:
    """The preset's ``model:`` section, as a fresh dict the caller may change."""
    return copy.deepcopy(find_model(name).model)
