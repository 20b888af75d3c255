"""Model presets: published architectures as ready-made ``model:`` sections.

A memtune config uses one with ``model: {preset: llama3-70b, tensor_model_parallel_size: 4}``;
the preset's keys come first and the config's own keys override them.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from functools import cache
from typing import Any

from memtune.catalog._data import read_catalog, spelling_key
from memtune.errors import InputError
from memtune.limits import MAX_ECHO
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
    known = list(_presets())
    hint = f"did you mean {close!r}? " if (close := _closest(name, known)) else ""
    raise InputError(f"unknown model preset {echo(name)}; {hint}known: {', '.join(known)}")


def get_model(name: str) -> dict[str, Any]:
    """The preset's ``model:`` section, as a fresh dict the caller may change."""
    return copy.deepcopy(find_model(name).model)


def _closest(name: str, known: list[str]) -> str | None:
    """The preset a mistyped name most likely meant: the first that starts with it (``qwen3-30b``
    is ``qwen3-30b-a3b``), else the closest spelling; none for a long word, which no preset
    name is a misspelling of (and difflib's time grows with it)."""
    word = name.lower()
    if not word or len(word) > 2 * MAX_ECHO:
        return None
    started = [k for k in known if k.startswith(word)]
    close = started or difflib.get_close_matches(word, known, n=1, cutoff=0.75)
    return close[0] if close else None
