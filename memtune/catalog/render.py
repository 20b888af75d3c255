"""Formatting of the catalogs: rich tables for people, JSON-ready dicts for tools."""

from __future__ import annotations

from rich import box
from rich.table import Table

from memtune.catalog.gpus import GPU
from memtune.catalog.models import ModelPreset
from memtune.catalog.recipes import Recipe


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


# Bridge's mixed-precision recipe names, as short as the perf recipes' names write them
_PRECISION_LABELS = {
    "bf16_mixed": "bf16",
    "bf16_with_fp8_current_scaling_mixed": "fp8cs",
    "bf16_with_fp8_delayed_scaling_mixed": "fp8ds",
    "bf16_with_fp8_subchannel_scaling_mixed": "fp8sc",
    "bf16_with_mxfp8_mixed": "fp8mx",
}


def recipes_table(recipes: list[Recipe], commit: str) -> Table:
    table = Table(
        title=f"Megatron-Bridge recipes (commit {commit[:12]}; `memtune recipes NAME` prints one)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("name", no_wrap=True)
    table.add_column("model", no_wrap=True)
    table.add_column("GPU", no_wrap=True)
    table.add_column("precision", no_wrap=True)
    for column in ("GPUs", "TP", "PP", "VPP", "CP", "EP", "seq", "GBS"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in recipes:
        m, train = r.config["model"], r.config["train"]
        vpp = m.get("virtual_pipeline_model_parallel_size")
        table.add_row(
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
