"""memtune's own YAML or JSON: the schema's sections, as they are.

``model.preset`` names a catalog model (``memtune models``); the preset's keys are laid down
first and the job's own ``model`` keys override them. Every format may carry it (and a dotted
override may set it), so :func:`resolve_preset` runs once all layers and overrides are in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memtune.catalog.models import get_model
from memtune.config.loaders._guards import load_json, load_yaml
from memtune.errors import InputError
from memtune.numbers import echo


def parse_mapping(path: Path, text: str) -> dict[str, Any]:
    """Parse YAML (JSON is YAML too, but its own parser gives better messages)."""
    data = load_json(text, str(path)) if path.suffix == ".json" else load_yaml(text, str(path))
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected a mapping of sections (model, train, ...), got {type(data).__name__}"
        )
    return data


def read(data: dict[str, Any]) -> dict[str, Any]:
    """memtune's format needs no translation."""
    return data


def resolve_preset(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``model.preset`` replaced by the preset's keys, its own keys on top."""
    model = data.get("model")
    if not isinstance(model, dict) or "preset" not in model:
        return data
    own = dict(model)
    name = own.pop("preset")
    if not isinstance(name, str):
        raise InputError(
            f"model.preset: must be a preset name (`memtune models` lists them), got {echo(name)}"
        )
    try:
        preset = get_model(name)
    except InputError as exc:
        raise InputError(f"model.preset: {exc.problems[0]}") from None
    return {**data, "model": {**preset, **own}}
