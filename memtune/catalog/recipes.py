"""Megatron-Bridge recipes: the jobs Bridge's recipe functions build, by function name.

``memtune estimate --recipe NAME`` (or ``recipe: NAME`` in a file) starts from one. Each recipe
is kept as the ``ConfigContainer`` sections it sets (``model`` with a preset for the
architecture, ``train``, ``optimizer``, ``ddp``, ``mixed_precision``, ``peft``) plus the GPUs
it was written for, so the Bridge-dump reader turns it into a job exactly as it turns a dump.
The Bridge commit the catalog was read from is :func:`bridge_commit`.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from functools import cache
from typing import Any

from memtune.catalog._data import read_catalog
from memtune.errors import InputError


@dataclass(frozen=True)
class Recipe:
    name: str  # the function name Bridge's recipe runner takes
    source: str  # the file in Megatron-Bridge that defines it
    mode: str  # pretrain | sft | peft
    model_id: str  # the Hugging Face checkpoint the recipe builds its model from
    aliases: tuple[str, ...]  # older names Bridge still exports for it
    config: dict[str, Any]  # ConfigContainer sections, as a Bridge dump has them

    def container(self) -> dict[str, Any]:
        """The recipe's sections, as a fresh dict the caller may change."""
        return copy.deepcopy(self.config)

    @property
    def preset(self) -> str:
        return str(self.config["model"]["preset"])


@cache
def _catalog() -> dict[str, Any]:
    return read_catalog("recipes.yaml")


@cache
def _recipes() -> dict[str, Recipe]:
    return {
        name: Recipe(
            name=name,
            source=entry["source"],
            mode=entry["mode"],
            model_id=entry["model_id"],
            aliases=tuple(entry.get("aliases", ())),
            config=entry["config"],
        )
        for name, entry in _catalog()["recipes"].items()
    }


def bridge_commit() -> str:
    return str(_catalog()["bridge_commit"])


def list_recipes() -> list[Recipe]:
    return list(_recipes().values())


def find_recipe(name: str) -> Recipe:
    """A recipe by its function name or one of its aliases (a trailing ``_config`` may be left out)."""
    wanted = name.strip()
    for candidate in (wanted, f"{wanted}_config"):
        for recipe in _recipes().values():
            if candidate == recipe.name or candidate in recipe.aliases:
                return recipe
    close = difflib.get_close_matches(f"{wanted.removesuffix('_config')}_config", list(_recipes()), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `memtune recipes` lists them"
    raise InputError(f"unknown Megatron-Bridge recipe {name!r}{hint}")
