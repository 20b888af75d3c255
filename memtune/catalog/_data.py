"""Reading the catalog YAML files that ship inside the package."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml


def read_catalog(filename: str) -> dict[str, Any]:
    text = resources.files("memtune.catalog").joinpath("data", filename).read_text(encoding="utf-8")
    catalog: dict[str, Any] = yaml.safe_load(text)
    return catalog


def lookup_key(name: str) -> str:
    """How names are compared: case, spaces, dashes, underscores and a vendor prefix do not matter."""
    key = name.strip().lower()
    for vendor in ("nvidia ", "amd "):
        key = key.removeprefix(vendor)
    return "".join(ch for ch in key if ch not in " -_")


def spelling_key(name: str) -> str:
    """How model and recipe names are compared across their two spellings: presets write
    ``llama3.1-405b``, Megatron-Bridge's recipe functions ``llama31_405b_...`` (no dots, underscores)."""
    return lookup_key(name).replace(".", "")
