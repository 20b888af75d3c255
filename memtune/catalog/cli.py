"""``memtune models [NAME]`` and ``memtune gpus``: what the catalogs hold."""

from __future__ import annotations

import argparse
import json

import yaml
from rich import box
from rich.console import Console
from rich.table import Table

from memtune.catalog.gpus import GPU, list_gpus
from memtune.catalog.models import ModelPreset, find_model, list_models


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
