"""Formatting of the catalogs: rich tables for people, JSON-ready dicts for tools."""

from __future__ import annotations

from rich.console import Console

from memtune.catalog.gpus import GPU
from memtune.catalog.models import ModelPreset
from memtune.catalog.recipes import Recipe
from memtune.tables import Column, print_table, print_text


def print_models(console: Console, presets: list[ModelPreset]) -> None:
    columns = (
        Column("name", "left"),
        Column("layers"),
        Column("hidden"),
        Column("heads/kv"),
        Column("ffn"),
        Column("experts", keep=50),
        Column("vocab", keep=40),
    )
    rows = []
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
        rows.append(
            (
                p.name,
                str(m["num_layers"]),
                str(m["hidden_size"]),
                f"{m['num_attention_heads']}/{kv}",
                str(m["ffn_hidden_size"]),
                experts,
                str(m["vocab_size"]),
            )
        )
    print_table(console, columns, rows, title="Model presets (bf16; `memtune models NAME` prints one)")


# Bridge's mixed-precision recipe names, as short as the perf recipes' names write them
_PRECISION_LABELS = {
    "bf16_mixed": "bf16",
    "bf16_with_fp8_current_scaling_mixed": "fp8cs",
    "bf16_with_fp8_delayed_scaling_mixed": "fp8ds",
    "bf16_with_fp8_subchannel_scaling_mixed": "fp8sc",
    "bf16_with_mxfp8_mixed": "fp8mx",
}

# A recipe's name is what a user types, so it is never cut; the GPU, the precision and mostly
# the model are in the name too, so they give way first on a narrow terminal, then the batch.
_RECIPE_COLUMNS = (
    Column("name", "left"),
    Column("model", "left", keep=30),
    Column("GPU", "left", keep=10),
    Column("precision", "left", keep=20),
    Column("GPUs"),
    Column("TP"),
    Column("PP"),
    Column("VPP", keep=55),
    Column("CP", keep=60),
    Column("EP", keep=70),
    Column("seq", keep=50),
    Column("GBS", keep=45),
)


def print_recipes(console: Console, recipes: list[Recipe], commit: str) -> None:
    rows = []
    for r in recipes:
        m, train = r.config["model"], r.config["train"]
        vpp = m.get("virtual_pipeline_model_parallel_size")
        rows.append(
            (
                r.label.removesuffix("_config"),
                r.preset,
                r.gpu,
                _PRECISION_LABELS.get(r.precision, r.precision),
                str(r.config["cluster"]["num_gpus"]),
                str(m.get("tensor_model_parallel_size", 1)),
                str(m.get("pipeline_model_parallel_size", 1)),
                "layout" if m.get("pipeline_model_parallel_layout") else str(vpp or "-"),
                str(m.get("context_parallel_size", 1)),
                str(m.get("expert_model_parallel_size", 1)),
                str(m["seq_length"]),
                str(train["global_batch_size"]),
            )
        )
    title = f"Megatron-Bridge recipes (commit {commit[:12]}; `memtune recipes NAME` prints one)"
    print_table(console, _RECIPE_COLUMNS, rows, title=title)


def print_gpus(console: Console, gpus: list[GPU]) -> None:
    columns = (
        Column("name", "left"),
        Column("memory GiB"),
        Column("bf16 TFLOP/s"),
        Column("fp8 TFLOP/s", keep=50),
        Column("HBM TB/s", keep=40),
        Column("link GB/s", keep=30),
    )
    rows = [
        (
            g.name,
            f"{g.memory_gib:.2f}" + ("" if g.memory_measured else "*"),
            f"{g.bf16_tflops:g}",
            "-" if g.fp8_tflops is None else f"{g.fp8_tflops:g}",
            f"{g.hbm_tbps:g}",
            f"{g.link_gbps:g}",
        )
        for g in gpus
    ]
    print_table(console, columns, rows, title="GPUs (per GPU; TFLOP/s dense)")
    print_text(
        console,
        "[dim]Memory: what cudaMemGetInfo reports as total. * derived from the datasheet capacity "
        "(no device reading on record); cluster.gpu_memory_gib overrides it. Names are "
        "case-insensitive; aliases and torch.cuda.get_device_name() strings work too (--json lists them).[/dim]",
    )


def preset_json(p: ModelPreset) -> dict[str, object]:
    return {"name": p.name, "description": p.description, "hf_id": p.hf_id, "model": p.model}


def recipe_json(r: Recipe) -> dict[str, object]:
    return {
        "name": r.label,
        "kind": r.kind,
        "aliases": list(r.aliases),
        "mode": r.mode,
        "model_id": r.model_id,
        "gpu": r.gpu,
        "precision": r.precision,
        "base": r.base,
        "not_modeled": list(r.not_modeled),
        "refused": r.refused,
        "source": r.source,
        "config": r.container(),
    }


def gpu_json(g: GPU) -> dict[str, object]:
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
