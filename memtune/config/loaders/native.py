"""memtune's own YAML or JSON: the schema's sections, as they are.

``model.preset`` names a catalog model (``memtune models``); the preset's keys are laid down
first and the job's own ``model`` keys override them. Every format may carry it (and a dotted
override may set it), so :func:`resolve_preset` runs once all layers and overrides are in.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from memtune.catalog.models import get_model
from memtune.errors import InputError


def parse_mapping(path: Path, text: str) -> dict:
    """Parse YAML (JSON is YAML too, but its own parser gives better messages)."""
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "cannot parse"
        raise InputError(f"{path}: invalid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected a mapping of sections (model, train, ...), got {type(data).__name__}"
        )
    return data


def read(data: dict) -> dict:
    """memtune's format needs no translation."""
    return data


def resolve_preset(data: dict) -> dict:
    """``data`` with its ``model.preset`` replaced by the preset's keys, its own keys on top."""
    model = data.get("model")
    if not isinstance(model, dict) or "preset" not in model:
        return data
    own = dict(model)
    name = own.pop("preset")
    if not isinstance(name, str):
        raise InputError(f"model.preset: must be a preset name (`memtune models` lists them), got {name!r}")
    try:
        preset = get_model(name)
    except InputError as exc:
        raise InputError(f"model.preset: {exc.problems[0]}") from None
    return {**data, "model": {**preset, **own}}
