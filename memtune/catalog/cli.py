"""``memtune models [NAME]``, ``memtune recipes [NAME]`` and ``memtune gpus``: what the catalogs hold."""

from __future__ import annotations

import argparse
import json

import yaml
from rich import box
from rich.console import Console
from rich.table import Table

from memtune.catalog.gpus import GPU, list_gpus
from memtune.catalog.models import ModelPreset, find_model, list_models
from memtune.catalog.recipes import Recipe, bridge_commit, find_recipe, list_recipes


def register(sub: argparse._SubParsersAction) -> None:
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
        "takes), or print one recipe's sections. `memtune estimate --recipe NAME [OVERRIDE.yaml] [key=value ...]` "
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
    if args.name:
        preset = find_model(args.name)
        if args.json:
            print(json.dumps(_preset_json(preset), indent=2))
        else:
            print(f"# {preset.description} ({preset.hf_id})")
            print(yaml.safe_dump({"model": preset.model}, sort_keys=False, default_flow_style=None), end="")
        return 0
    presets = list_models()
    if args.json:
        print(json.dumps([_preset_json(p) for p in presets], indent=2))
    else:
        Console().print(models_table(presets))
    return 0


def run_recipes(args: argparse.Namespace) -> int:
    if args.name:
        recipe = find_recipe(args.name)
        if args.json:
            print(json.dumps(_recipe_json(recipe), indent=2))
        else:
            print(f"# {recipe.name}: {recipe.mode} of {recipe.model_id}")
            print(f"# Megatron-Bridge {bridge_commit()[:12]} {recipe.source}")
            print(yaml.safe_dump(recipe.container(), sort_keys=False, default_flow_style=None), end="")
        return 0
    recipes = list_recipes()
    if args.json:
        print(
            json.dumps(
                {"bridge_commit": bridge_commit(), "recipes": [_recipe_json(r) for r in recipes]}, indent=2
            )
        )
    else:
        Console().print(recipes_table(recipes, bridge_commit()))
    return 0


def run_gpus(args: argparse.Namespace) -> int:
    gpus = list_gpus()
    if args.json:
        print(json.dumps([_gpu_json(g) for g in gpus], indent=2))
    else:
        console = Console()
        console.print(gpus_table(gpus))
        console.print(
            "[dim]Memory: what cudaMemGetInfo reports as total. * derived from the datasheet capacity "
            "(no device reading on record); cluster.gpu_memory_gib overrides it. Names are "
            "case-insensitive; aliases and torch.cuda.get_device_name() strings work too (--json lists them).[/dim]"
        )
    return 0


def models_table(presets: list[ModelPreset]) -> Table:
    table = Table(
        title="Model presets (bf16; `memtune models NAME` prints one)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("name", no_wrap=True)
    for column in ("layers", "hidden", "heads/kv", "ffn", "experts", "vocab"):
        table.add_column(column, justify="right", no_wrap=True)
    for p in presets:
        m = p.model
        kv = (
            "MLA"
            if m.get("multi_latent_attention")
            else str(m.get("num_query_groups", m["num_attention_heads"]))
        )
        experts = (
            f"{m['num_moe_experts']}x{m['moe_ffn_hidden_size']} top-{m['moe_router_topk']}"
            if m.get("num_moe_experts")
            else "-"
        )
        table.add_row(
            p.name,
            str(m["num_layers"]),
            str(m["hidden_size"]),
            f"{m['num_attention_heads']}/{kv}",
            str(m["ffn_hidden_size"]),
            experts,
            str(m["vocab_size"]),
        )
    return table


def recipes_table(recipes: list[Recipe], commit: str) -> Table:
    table = Table(
        title=f"Megatron-Bridge recipes (commit {commit[:12]}; `memtune recipes NAME` prints one)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("name", no_wrap=True)
    table.add_column("model", no_wrap=True)
    for column in ("GPUs", "TP", "PP", "VPP", "CP", "EP", "seq", "GBS"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in recipes:
        m, train = r.config["model"], r.config["train"]
        vpp = m.get("virtual_pipeline_model_parallel_size")
        table.add_row(
            r.name.removesuffix("_config"),
            r.preset,
            str(r.config["cluster"]["num_gpus"]),
            str(m.get("tensor_model_parallel_size", 1)),
            str(m.get("pipeline_model_parallel_size", 1)),
            "layout" if m.get("pipeline_model_parallel_layout") else str(vpp or "-"),
            str(m.get("context_parallel_size", 1)),
            str(m.get("expert_model_parallel_size", 1)),
            str(m["seq_length"]),
            str(train["global_batch_size"]),
        )
    return table


def gpus_table(gpus: list[GPU]) -> Table:
    table = Table(
        title="GPUs (per GPU; TFLOP/s dense)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    table.add_column("name", no_wrap=True)
    for column in ("memory GiB", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM TB/s", "link GB/s"):
        table.add_column(column, justify="right")
    for g in gpus:
        table.add_row(
            g.name,
            f"{g.memory_gib:.2f}" + ("" if g.memory_measured else "*"),
            f"{g.bf16_tflops:g}",
            "-" if g.fp8_tflops is None else f"{g.fp8_tflops:g}",
            f"{g.hbm_tbps:g}",
            f"{g.link_gbps:g}",
        )
    return table


def _preset_json(p: ModelPreset) -> dict:
    return {"name": p.name, "description": p.description, "hf_id": p.hf_id, "model": p.model}


def _recipe_json(r: Recipe) -> dict[str, object]:
    return {
        "name": r.name,
        "aliases": list(r.aliases),
        "mode": r.mode,
        "model_id": r.model_id,
        "source": r.source,
        "config": r.container(),
    }


def _gpu_json(g: GPU) -> dict:
    return {
        "name": g.name,
        "aliases": list(g.aliases),
        "memory_bytes": g.memory_bytes,
        "memory_gib": round(g.memory_gib, 2),
        "memory_measured": g.memory_measured,
        "memory_note": g.memory_note,
        "datasheet_memory_gb": g.datasheet_memory_gb,
        "bf16_tflops": g.bf16_tflops,
        "fp8_tflops": g.fp8_tflops,
        "hbm_tbps": g.hbm_tbps,
        "link_gbps": g.link_gbps,
        "source": g.source,
    }
