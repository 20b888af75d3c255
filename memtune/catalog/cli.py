"""``memtune models [NAME]``, ``memtune recipes [NAME]`` and ``memtune gpus``: what the catalogs hold."""

from __future__ import annotations

import argparse

import yaml
from rich.console import Console

from memtune.catalog.gpus import list_gpus
from memtune.catalog.models import find_model, list_models
from memtune.catalog.recipes import bridge_commit, find_recipe, list_recipes
from memtune.catalog.render import (
    gpu_json,
    preset_json,
    print_gpus,
    print_models,
    print_recipes,
    recipe_json,
)
from memtune.output import SCHEMA_VERSION, print_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = sub.add_parser(
        "models",
        help="model presets a config can use as `model: {preset: NAME}`",
        description="List the model presets, or print one preset's `model:` section (Megatron-Core key names) "
        "to paste into a config. A config uses one with `model: {preset: NAME, ...}`; its own keys override the preset's.",
    )
    models.add_argument("name", nargs="?", help="print this preset's `model:` section")
    models.add_argument("--json", action="store_true", help="print machine-readable JSON")
    models.set_defaults(handler=run_models)

    recipes = sub.add_parser(
        "recipes",
        help="Megatron-Bridge recipes a job can start from (`estimate --recipe NAME`)",
        description="List the Megatron-Bridge recipes memtune knows (the function names Bridge's recipe runner "
        "takes; Bridge's performance recipes as perf:NAME), or print one recipe's sections. `memtune estimate --recipe NAME [OVERRIDE.yaml] [key=value ...]` "
        "builds the job the recipe builds; a file may name one with `recipe: NAME`.",
    )
    recipes.add_argument("name", nargs="?", help="print this recipe's sections")
    recipes.add_argument("--json", action="store_true", help="print machine-readable JSON")
    recipes.set_defaults(handler=run_recipes)

    gpus = sub.add_parser(
        "gpus",
        help="GPUs memtune knows: usable memory, peak throughput, bandwidth",
        description="List the GPU catalog. Memory is what cudaMemGetInfo reports as total, in GiB (2^30 bytes); "
        "a config's cluster.gpu_memory_gib overrides it. TFLOP/s are dense (no sparsity) per GPU.",
    )
    gpus.add_argument("--json", action="store_true", help="print machine-readable JSON")
    gpus.set_defaults(handler=run_gpus)


def run_models(args: argparse.Namespace) -> int:
    if args.name is not None:  # '' is a name no preset has, not "list them all"
        preset = find_model(args.name)
        if args.json:
            print_json({"schema_version": SCHEMA_VERSION, "model": preset_json(preset)})
        else:
            print(f"# {preset.description} ({preset.hf_id})")
            print(yaml.safe_dump({"model": preset.model}, sort_keys=False, default_flow_style=None), end="")
        return 0
    presets = list_models()
    if args.json:
        print_json({"schema_version": SCHEMA_VERSION, "models": [preset_json(p) for p in presets]})
    else:
        print_models(Console(), presets)
    return 0


def run_recipes(args: argparse.Namespace) -> int:
    if args.name is not None:  # '' is a name no recipe has, not "list them all"
        recipe = find_recipe(args.name)
        if args.json:
            print_json({"schema_version": SCHEMA_VERSION, "recipe": recipe_json(recipe)})
        else:
            print(f"# {recipe.label}: {recipe.mode} of {recipe.model_id} on {recipe.gpu}, {recipe.precision}")
            print(f"# Megatron-Bridge {bridge_commit()[:12]} {recipe.source}")
            if recipe.base:
                print(f"# starts from {recipe.base}")
            if recipe.not_modeled:
                print(f"# not modeled: {', '.join(recipe.not_modeled)}")
            if recipe.refused:
                print(f"# memtune check refuses it as written: {recipe.refused}")
            print(yaml.safe_dump(recipe.container(), sort_keys=False, default_flow_style=None), end="")
        return 0
    recipes = list_recipes()
    if args.json:
        print_json(
            {
                "schema_version": SCHEMA_VERSION,
                "bridge_commit": bridge_commit(),
                "recipes": [recipe_json(r) for r in recipes],
            }
        )
    else:
        print_recipes(Console(), recipes, bridge_commit())
    return 0


def run_gpus(args: argparse.Namespace) -> int:
    gpus = list_gpus()
    if args.json:
        print_json({"schema_version": SCHEMA_VERSION, "gpus": [gpu_json(g) for g in gpus]})
    else:
        print_gpus(Console(), gpus)
    return 0
