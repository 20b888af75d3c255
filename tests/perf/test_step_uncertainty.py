"""Every predicted step time carries the step model's measured held-out error for the job's family
(memtune/perf/uncertainty.py, from memtune/perf/data/step_error.json)."""

from __future__ import annotations

import json
import runpy
import statistics
from pathlib import Path

import pytest

from memtune.bench.plan import accuracy
from memtune.catalog.models import get_model
from memtune.check import gate
from memtune.cli import main
from memtune.config import load_job
from memtune.estimate.verdict import families_of
from memtune.perf.uncertainty import TABLE, step_uncertainty
from tests.jobs import build_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "llama3-70b-sft.yaml")


def test_the_committed_table_is_what_the_held_out_runs_give():
    script = runpy.run_path(str(ROOT / "benchmarks" / "step_error.py"))
    assert json.loads(TABLE.read_text(encoding="utf-8")) == script["table"]()


def test_a_familys_figure_is_the_median_error_of_its_held_out_runs():
    # Independently of the script: the published held-out runs of the dense family, by hand.
    groups = accuracy([ROOT / "benchmarks" / "published" / "layouts"], "holdout")
    dense = [abs(r.throughput_error) for g in groups for r in g.runs if "dense" in r.families]
    u = step_uncertainty(gate(load_job(EXAMPLE).job).derived)  # a dense job on 32 GPUs
    assert (u.family, u.held_out, u.runs) == ("dense", "published", len(dense))
    assert u.error == pytest.approx(statistics.median(dense), abs=5e-5)


BASE = {
    "model": {**get_model("llama3-8b")},
    "train": {"global_batch_size": 8},
    "cluster": {"num_gpus": 8, "gpu": "H100-80GB"},
}


def test_the_family_with_the_largest_error_sets_it_and_thin_families_fall_back_to_all():
    table = json.loads(TABLE.read_text(encoding="utf-8"))["sets"]
    published = table["published"]["families"]
    moe = step_uncertainty(gate(build_job(BASE, model=get_model("deepseek-v2-lite"))).derived)
    assert {"TE MoE", "MLA"} <= set(
        families_of(gate(build_job(BASE, model=get_model("deepseek-v2-lite"))).derived)
    )
    assert moe.error == max(published["TE MoE"]["error"], published["MLA"]["error"])
    # One GPU: the single-rank compute set.
    single = step_uncertainty(gate(build_job(BASE, cluster={"num_gpus": 1})).derived)
    assert (single.held_out, single.error) == (
        "single_rank",
        table["single_rank"]["families"]["dense"]["error"],
    )
    # FP8 blockwise has fewer than 4 held-out runs in the published set: every held-out run's figure.
    fp8 = {**get_model("llama3-8b"), "fp8": "e4m3", "fp8_recipe": "blockwise"}
    blockwise = step_uncertainty(gate(build_job(BASE, model=fp8)).derived)
    assert published["FP8 blockwise"]["runs"] < 4
    assert (blockwise.family, blockwise.error, blockwise.runs) == (
        "all",
        published["all"]["error"],
        published["all"]["runs"],
    )
    # LoRA has 4 or more (MLPerf's held-out LoRA runs): its own figure.
    lora = step_uncertainty(gate(build_job(BASE, peft={})).derived)
    assert published["LoRA"]["runs"] >= 4
    assert (lora.family, lora.error) == ("LoRA", published["LoRA"]["error"])


def test_estimate_shows_it_and_its_json_carries_it(capsys):
    u = step_uncertainty(gate(load_job(EXAMPLE).job).derived)
    assert main(["estimate", EXAMPLE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["throughput"]["step_time_uncertainty"]
    assert doc["relative"] == u.error and doc["held_out_runs"] == u.runs and doc["family"] == "dense"
    assert main(["estimate", EXAMPLE]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Predicted step:"))
    assert f" s ± {u.error:.0%}, " in line
