"""Readers that turn a file into a plain dict in memtune's own layout.

Each reader returns the dict and the keys or flags it did not use; nothing here validates
values, that is the schema's job. :func:`read_raw` picks the reader from the file itself:

- a shell script or argument text (``.sh``, starts with ``torchrun``/``python``/``deepspeed``,
  or has ``--num-layers``): a Megatron-LM launch;
- a mapping with ``architectures`` or ``model_type``: a Hugging Face ``config.json``;
- a mapping with ``_target_`` anywhere or a section only Megatron-Bridge has (``dataset``,
  ``logger``, ``checkpoint``, ...): a Bridge ``ConfigContainer`` dump;
- a mapping with ``recipe:`` names a Megatron-Bridge recipe (``memtune recipes``); the rest of
  the file is a Bridge override applied on top of it;
- any other mapping: memtune's own format, checked strictly by the schema.

:func:`read_recipe` builds a recipe's job without a file, :func:`read_layer` reads a Bridge
override file to lay over another job, and :func:`merge` lays one over the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtune.config.loaders import bridge, hf, megatron_args, native
from memtune.config.loaders._guards import read_config_text
from memtune.config.stacks import ReceivedDefault
from memtune.errors import InputError
from memtune.numbers import echo

FORMATS = ("memtune", "bridge", "megatron-args", "hf", "recipe")


@dataclass
class RawJob:
    data: dict[str, Any]
    format: str  # one of FORMATS
    ignored: list[str] = field(default_factory=list)
    # values the loader took from a stack rather than the file (Bridge's model bridges for HF)
    received: list[ReceivedDefault] = field(default_factory=list)
    # dotted key -> the line to report when no override supplies that required key
    missing: dict[str, str] = field(default_factory=dict)
    # why the file says the job fine-tunes (an SFT recipe or dataset, --finetune); None: it does not
    fine_tuning: str | None = None


def read_raw(path: Path) -> RawJob:
    shown = echo(str(path))[1:-1]
    try:
        if not path.exists():
            raise InputError(f"{shown}: no such file")
        if path.is_dir():
            raise InputError(f"{shown}: is a directory, expected a config file (.yaml, .json, .sh)")
    except OSError as exc:  # a name too long for the file system, a directory we may not search
        raise InputError(f"{shown}: cannot open ({exc.strerror or exc.__class__.__name__})") from None
    text = read_config_text(path)
    if megatron_args.looks_like_launch(path, text):
        data, ignored, missing, fine_tuning = megatron_args.read(path, text)
        return RawJob(
            data=data, format="megatron-args", ignored=ignored, missing=missing, fine_tuning=fine_tuning
        )
    return read_mapping(native.parse_mapping(path, text), path)


def read_mapping(mapping: dict[str, Any], path: Path) -> RawJob:
    """A parsed mapping, read by the format its keys show (the mapping branches of
    :func:`read_raw`); ``path`` names it in messages."""
    if "recipe" in mapping:
        rest = {k: v for k, v in mapping.items() if k != "recipe"}
        return with_layer(read_recipe(mapping["recipe"]), _bridge_layer(rest))
    if hf.is_hf_config(mapping):
        data, ignored, received = hf.read(path, mapping)
        return RawJob(data=data, format="hf", ignored=ignored, received=received)
    if bridge.is_bridge_dump(mapping):
        data, ignored = bridge.read(mapping)
        missing = bridge.missing_architecture(data, path)
        return RawJob(
            data=data,
            format="bridge",
            ignored=ignored,
            missing=missing,
            fine_tuning=bridge.fine_tuning(mapping),
        )
    data = native.read(mapping)
    return RawJob(data=data, format="memtune", missing=bridge.missing_architecture(data, path))


def read_recipe(name: object) -> RawJob:
    """The job a Megatron-Bridge recipe function builds (memtune/catalog/data/recipes.yaml)."""
    from memtune.catalog.recipes import find_recipe  # the catalog reads the config layer too

    if not isinstance(name, str):
        raise InputError(f"recipe: must be a recipe name (`memtune recipes` lists them), got {echo(name)}")
    recipe = find_recipe(name)
    data, ignored = bridge.read(recipe.container())
    fine_tuning = (
        f"Bridge's {recipe.label} is an {recipe.mode.upper()} recipe" if recipe.mode != "pretrain" else None
    )
    return RawJob(data=data, format="recipe", ignored=ignored, fine_tuning=fine_tuning)


def read_layer(path: Path) -> tuple[dict[str, Any], list[str]]:
    """A Megatron-Bridge override file (ConfigContainer sections, any subset) in memtune's layout,
    with the keys it did not use."""
    mapping = native.parse_mapping(path, read_config_text(path))
    if "recipe" in mapping:
        raise InputError(
            f"{path}: `recipe:` belongs in the first config (or --recipe), not in an override file"
        )
    return _bridge_layer(mapping)


def _bridge_layer(mapping: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    data, ignored = bridge.read(mapping)
    if "defaults" not in mapping:
        del data["defaults"]  # an override keeps the stack of the job below it
    return data, ignored


def with_layer(raw: RawJob, layer: tuple[dict[str, Any], list[str]]) -> RawJob:
    data, ignored = layer
    return RawJob(
        data=merge(raw.data, data),
        format=raw.format,
        ignored=[*raw.ignored, *ignored],
        received=raw.received,
        missing=raw.missing,
        fine_tuning=raw.fine_tuning,
    )


def merge(base: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``layer`` on top: mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in layer.items():
        below = out.get(key)
        out[key] = merge(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return out
