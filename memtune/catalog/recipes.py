"""Megatron-Bridge recipes: the jobs Bridge's recipe functions build, by function name.

``memtune estimate --recipe NAME`` (or ``recipe: NAME`` in a file) starts from one. Each recipe
is kept as the ``ConfigContainer`` sections it sets (``model`` with a preset for the
architecture, ``train``, ``optimizer``, ``ddp``, ``mixed_precision``, ``peft``) plus the GPUs
it was written for, so the Bridge-dump reader turns it into a job exactly as it turns a dump.
The Bridge commit the catalog was read from is :func:`bridge_commit`.

Bridge's flat performance recipes (``perf_recipes/<family>/<gpu>/``, data/perf_recipes.yaml) are kept
the same way, named ``perf:FUNCTION``; a bare function name finds one when no library recipe has
that name (six do: the perf variant of a library recipe may keep its name).
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

PERF_PREFIX = "perf:"


@dataclass(frozen=True)
class Recipe:
    name: str  # the function name Bridge's recipe runner takes
    source: str  # the file in Megatron-Bridge that defines it
    mode: str  # pretrain | sft | peft
    model_id: str  # the Hugging Face checkpoint the recipe builds its model from
    aliases: tuple[str, ...]  # older names Bridge still exports for it
    config: dict[str, Any]  # ConfigContainer sections, as a Bridge dump has them
    kind: str = "library"  # library (recipes/) | perf (perf_recipes/, named perf:FUNCTION)
    precision: str = "bf16_mixed"  # Bridge's mixed-precision recipe
    base: str | None = None  # perf recipes: the library recipe the function starts from
    not_modeled: tuple[str, ...] = ()  # settings the recipe makes that the estimate does not model
    refused: str | None = None  # the check's message where Megatron refuses the recipe's layout as written

    def container(self) -> dict[str, Any]:
        """The recipe's sections, as a fresh dict the caller may change."""
        return copy.deepcopy(self.config)

    @property
    def preset(self) -> str:
        return str(self.config["model"]["preset"])

    @property
    def gpu(self) -> str:
        return str(self.config["cluster"]["gpu"])

    @property
    def label(self) -> str:
        """The name ``--recipe`` takes without ambiguity."""
        return f"{PERF_PREFIX}{self.name}" if self.kind == "perf" else self.name


@cache
def _catalog() -> dict[str, Any]:
    return read_catalog("recipes.yaml")


@cache
def _perf_catalog() -> dict[str, Any]:
    return read_catalog("perf_recipes.yaml")


def _entry(name: str, entry: dict[str, Any], kind: str) -> Recipe:
    mixed_precision = entry["config"].get("mixed_precision")
    return Recipe(
        name=name,
        source=entry["source"],
        mode=entry["mode"],
        model_id=entry["model_id"],
        aliases=tuple(entry.get("aliases", ())),
        config=entry["config"],
        kind=kind,
        precision=entry.get(
            "precision", mixed_precision if isinstance(mixed_precision, str) else "bf16_mixed"
        ),
        base=entry.get("base"),
        not_modeled=tuple(entry.get("not_modeled", ())),
        refused=entry.get("refused"),
    )


@cache
def _recipes() -> dict[str, Recipe]:
    return {name: _entry(name, entry, "library") for name, entry in _catalog()["recipes"].items()}


@cache
def _perf_recipes() -> dict[str, Recipe]:
    return {name: _entry(name, entry, "perf") for name, entry in _perf_catalog()["perf_recipes"].items()}


def bridge_commit() -> str:
    return str(_catalog()["bridge_commit"])


def list_recipes() -> list[Recipe]:
    """Library recipes first, then the perf recipes."""
    return [*_recipes().values(), *_perf_recipes().values()]


def find_recipe(name: str) -> Recipe:
    """A recipe by its function name or one of its aliases (a trailing ``_config`` may be left out,
    the model may be spelled as its preset is: ``llama3.1-405b_pretrain``);
    ``perf:NAME`` is a performance recipe, a bare NAME a library recipe first, else a perf recipe."""
    wanted = name.strip()
    perf_only = wanted.startswith(PERF_PREFIX)
    wanted = wanted.removeprefix(PERF_PREFIX).strip()
    pools = (_perf_recipes(),) if perf_only else (_recipes(), _perf_recipes())
    for pool in pools:
        for candidate in (wanted, f"{wanted}_config"):
            for recipe in pool.values():
                if candidate == recipe.name or candidate in recipe.aliases:
                    return recipe
    spelled = {spelling_key(wanted), spelling_key(f"{wanted}_config")}
    for pool in pools:  # a preset's spelling of the model: llama3.1-405b_pretrain_config
        for recipe in pool.values():
            if spelled & {spelling_key(n) for n in (recipe.name, *recipe.aliases)}:
                return recipe
    names = [r.label for pool in pools for r in pool.values()]
    key = f"{PERF_PREFIX if perf_only else ''}{wanted.removesuffix('_config')}_config"
    # Names are short: a longer word is no misspelling of one (and difflib's time grows with it).
    close = difflib.get_close_matches(key, names, n=3) if len(key) <= 2 * MAX_ECHO else []
    hint = f"; did you mean {', '.join(close)}?" if close else "; `memtune recipes` lists them"
    raise InputError(f"unknown Megatron-Bridge recipe {echo(name)}{hint}")
