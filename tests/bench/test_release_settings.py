"""Bridge summary rows priced with their own release's settings
(benchmarks/published/layouts/collect_bridge_summary.py, README.md "Each release's own settings")."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"
ROW = {
    "release": "25.11",
    "section": "Pre-Training Performance",
    "model": "Qwen3_30B_a3B",
    "system": "DGX-GB200",
    "gpus": "8",
    "precision": "FP8-MX",
    "gbs": "512",
    "mbs": "4",
    "seq": "4096",
    "tp": "1",
    "pp": "1",
    "cp": "1",
    "vp": "n/a",
    "ep": "8",
    "tokens": "23766",
    "tflops": "550",
    "file": "docs/performance-summary.md",
    "commit": "0" * 40,
}


@pytest.fixture(scope="module")
def collector() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks" / "published" / "layouts"))
        yield importlib.import_module("collect_bridge_summary")


@pytest.fixture(scope="module")
def recipes() -> dict:
    catalog = ROOT / "memtune" / "catalog" / "data" / "perf_recipes.yaml"
    return yaml.safe_load(catalog.read_text())["perf_recipes"]


def test_a_release_setting_that_differs_becomes_an_override(collector: ModuleType, recipes: dict) -> None:
    run = collector.run_of(ROW, recipes)
    # 067f987df03b's recipe runs this model with full-iteration graphs, HybridEP and the EP overlap
    settings = {
        "model.cuda_graph_impl": "none",
        "model.moe_token_dispatcher_type": "alltoall",
        "model.moe_flex_dispatcher_backend": "hybridep",  # as the recipe: no override
        "comm_overlap.overlap_moe_expert_parallel_comm": False,
        "model.recompute_modules": [],  # unset in the recipe: the same
        "env.CUDA_DEVICE_MAX_CONNECTIONS": "32",  # as the recipe
        "train.manual_gc": "unknown",  # not read: left as the recipe has it
    }
    extra = collector.release_overrides(run, "pretrain", ROW["model"], settings)
    assert extra == [
        "model.cuda_graph_impl=none",
        "model.moe_token_dispatcher_type=alltoall",
        "model.overlap_moe_expert_parallel_comm=false",
    ]


def test_the_row_is_tagged_with_the_release_it_took_its_settings_from(
    collector: ModuleType, recipes: dict
) -> None:
    run = collector.run_of(ROW, recipes)
    tags = {"v0.2.0": {"recipes": {RECIPE: {"settings": {"model.cuda_graph_impl": "none"}}}}}
    priced = collector.with_release_settings(run, ROW, tags)
    # and, as every tag's runner does, sequence parallelism where the row's TP is above 1 (TP 1 here)
    assert priced["overrides"] == [*run["overrides"], "model.cuda_graph_impl=none"]
    assert priced["source"].endswith("; settings of Bridge v0.2.0")
    # a release whose settings were not read keeps the recipe's
    assert collector.with_release_settings(run, {**ROW, "release": "26.08"}, tags) == run


def test_a_row_that_states_mtp_keeps_it(collector: ModuleType, recipes: dict) -> None:
    row = {**ROW, "model": "DeepSeekV3 (w/o MTP)"}
    run = collector.run_of(row, recipes)
    assert collector.release_overrides(run, "pretrain", row["model"], {"model.mtp_num_layers": 1}) == []
