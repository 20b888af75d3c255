"""The measured set in benchmarks/measured: records that round-trip and a split fixed by rule."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from memtune.check import gate
from memtune.config import derive, validate
from memtune.measure.plan import plan_measurement

SET_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "measured"
RECORDS = [
    json.loads(line) for line in (SET_DIR / "h200-mcore0.19.2.jsonl").read_text().splitlines() if line.strip()
]
MEASURED_KEYS = {
    "peak_allocated_bytes",
    "fwd_bwd_peak_bytes",
    "peak_reserved_bytes",
    "allocated_after_build",
    "allocated_after_ddp",
    "allocated_after_optimizer",
    "state_bytes",
    "num_alloc_retries",
    "iterations",
}


def load_matrix():
    spec = importlib.util.spec_from_file_location("measured_matrix", SET_DIR / "matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["measured_matrix"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, SET_DIR.parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_record_is_complete_and_its_config_plans_the_rank_it_measured():
    assert len(RECORDS) >= 60
    assert len({r["id"] for r in RECORDS}) == len(RECORDS)
    for r in RECORDS:
        assert r["measured"].keys() >= MEASURED_KEYS, r["id"]
        job = validate(r["config"])
        assert r["pp_rank"] == derive(job).pp_rank_of(r["rank"]), r["id"]
        plan_measurement(gate(job), r["rank"])  # still a plan memtune measure would run
        env = r["environment"]
        assert (env["torch"].split("+")[0], env["megatron_core"], env["gpu"]) == (
            "2.11.0",
            "0.19.2",
            "NVIDIA H200",
        )


def test_headline_is_the_steady_state_maximum():
    for r in RECORDS:
        m = r["measured"]
        steady = [it for it in m["iterations"] if it["iteration"] >= 2]
        assert m["peak_allocated_bytes"] == max(it["peak_allocated_bytes"] for it in steady), r["id"]
        assert m["fwd_bwd_peak_bytes"] <= m["peak_allocated_bytes"] <= m["peak_reserved_bytes"], r["id"]
        assert m["state_bytes"] == m["iterations"][-1]["allocated_after_step"], r["id"]


def test_split_follows_the_sha1_rule():
    for r in RECORDS:
        if r["id"].startswith(("fresh-", "fresh2-")):
            expected = r["id"].split("-")[0]  # measured after the estimator was frozen
        else:
            expected = (
                "holdout" if int(hashlib.sha1(r["id"].encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"
            )
        assert r["split"] == expected, r["id"]


def test_moe_runs_record_forced_balanced_routing():
    moe = [r for r in RECORDS if r["config"]["model"].get("num_moe_experts")]
    assert moe
    for r in moe:
        assert r["environment"]["moe_router_force_load_balancing"] is True
        assert r["environment"]["expert_mlp"] == "SequentialMLP"


@pytest.mark.parametrize("family", ["l8w-", "l1b-", "gpt-", "mx-", "qm-", "-pp", "-vpp", "-rc-"])
def test_holdout_covers_each_family_and_axis(family):
    assert any(family in r["id"] for r in RECORDS if r["split"] == "holdout")


def test_matrix_entries_plan_and_match_the_set():
    entries = load_matrix().entries()
    by_id = {e.id: e for e in entries}
    for r in RECORDS:
        assert by_id[r["id"]].config == r["config"], r["id"]
        assert by_id[r["id"]].rank == r["rank"], r["id"]
    for e in entries:
        plan_measurement(gate(validate(e.config)), e.rank)


def test_sixth_check_measures_no_config_measured_before_and_fifth_repeats_six():
    matrix = load_matrix()
    entries = matrix.entries()

    def family_and_earlier(prefix):
        family = [e for e in entries if e.id.startswith(prefix)]
        # hostvar- came later and repeats earlier tune runs on purpose (matrix.host_variance)
        return family, [e for e in entries if not e.id.startswith(("cchk5-", "cchk6-", "hostvar-"))]

    assert matrix.repeated_runs(*family_and_earlier("cchk6-")) == []
    # found after cchk5- was measured and compared (its docstring lists them)
    assert [earlier for _, earlier in matrix.repeated_runs(*family_and_earlier("cchk5-"))] == [
        "crel-mbs4-l8w-tp2-sp-s2k-m2",
        "cchk2-seq16k-l8w-tp4-sp-m1",
        "crel-mtp2-l8w-tp2-sp-m2",
        "cchk3-moe-qm-ep8-s4k-m2",
        "cchk3-rc-block2-l8w-tp2-sp-s4k-m2",
        "cchk3-opt-l8w-tp2-sp-do-dp8-s2k",
    ]


def test_a_timed_run_is_priced_on_the_gpu_it_ran_on_not_the_one_its_plan_named():
    accuracy = _load_benchmark("compute_accuracy")
    path = SET_DIR.parent / "gpu" / "results" / "cchk6-h100.results.jsonl"
    first = json.loads(path.read_text().splitlines()[0])
    assert (first["config"]["cluster"]["gpu"], first["environment"]["gpu"]) == (
        "H200",
        "NVIDIA H100 80GB HBM3",
    )
    assert {run.derived.job.cluster.gpu for run in accuracy.timed_runs(path)} == {"H100-80GB"}


def test_hostvar_runs_are_host_or_gpu_bound_as_the_model_splits_them():
    matrix, accuracy = load_matrix(), _load_benchmark("compute_accuracy")
    chosen = (*matrix.HOST_VARIANCE_HOST_BOUND, *matrix.HOST_VARIANCE_GPU_BOUND)
    runs = {
        r.id: r for name in ("cchk2", "cchk3", "cchk4", "cchk5", "cchk6") for r in accuracy.own_runs(name)
    }
    bound = {i: accuracy.predicted_host_s(runs[i]) > accuracy.predicted_device_s(runs[i]) for i in chosen}
    assert [i for i in chosen if bound[i]] == list(matrix.HOST_VARIANCE_HOST_BOUND)
    assert {runs[i].split for i in chosen} == {"tune"}


# What each component rule's script (``benchmarks/<name>.py``) printed on its runs, as recorded
# in its docstring and docs/plan.md: hostvar- takes neither binding nor the longer window;
# ciattn- reads the unfused kernels right and the single-rank host floor hiding them; hostprof-
# names the fake group's collectives as where a TP rank's host time grows.
RULE_LINES = {
    "host_variance": (
        "host-bound runs, unbound early : median spread 9.2%",
        "host-bound runs, bound   steady: median spread 11.3%",
        "bind later checks to cores: no; time the steady window: no",
    ),
    "ci_attention": (
        "measured (mean of passes): U 0.958 ms a layer, Uk 1.217",
        "step model:                U 0.000 ms a layer, Uk 1.520",
        "full recompute: R 0.658 ms a layer measured, 1.600 the model's",
        "kernels: 0.80x the model's: within a factor of two",
        "step: the host floor hides kernels that show",
    ),
    "host_profile": (
        "c10d and the fake group                     0.140    1.353    1.751    2.004",
        "TP 8 over TP 1: -1.679 ms per layer and microbatch; the largest share:",
        "  c10d and the fake group: 1.864 ms",
        "+54 calls  distributed_c10d.py:4090:all_gather_into_tensor",
    ),
    "host_features": (
        "waiting for the GPU (synchronize)           0.576    1.389    0.000    0.129",
        "unfused over plain: 1.607 ms; the largest share: waiting for the GPU (synchronize) 0.813 ms",
        "  its own host work (the wait set apart): +0.794 ms per layer and microbatch",
        "rcfull over plain: 3.597 ms; the largest share: torch ops (C calls: launches) 1.614 ms",
        "  its own host work (the wait set apart): +4.173 ms per layer and microbatch",
        "rcsel over plain: 1.354 ms; the largest share: torch ops (C calls: launches) 0.564 ms",
        "  its own host work (the wait set apart): +1.801 ms per layer and microbatch",
    ),
}


@pytest.mark.parametrize("rule", RULE_LINES)
def test_a_component_rule_prints_the_figures_it_recorded(rule, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(SET_DIR))
    _load_benchmark(rule).main()
    out = capsys.readouterr().out
    for line in RULE_LINES[rule]:
        assert line in out


def test_seventh_check_is_new_shapes_the_model_judged_gpu_bound_before_they_ran():
    matrix, accuracy = load_matrix(), _load_benchmark("compute_accuracy")
    entries = matrix.entries()
    family = [e for e in entries if e.id.startswith("cchk7-")]
    later = ("cchk7-", "hostvar-", "ciattn-", "hostprof-", "hostfeat-")  # defined with or after it
    earlier = [e for e in entries if not e.id.startswith(later)]
    assert len(family) == 28
    assert matrix.repeated_runs(family, earlier) == []
    for e in family:
        run = accuracy.planned(e.id, e.config, e.rank)
        assert accuracy.predicted_host_s(run) <= 0.9 * accuracy.predicted_device_s(run), e.id
    assert sum(matrix.split_of(e.id) == "holdout" for e in family) == 7


def test_ciattn_runs_are_one_rank_of_the_functional_tests_pair_differing_only_as_named():
    models = {e.id: validate(e.config).model for e in load_matrix().ci_attention_shape()}
    flash = models["ciattn-flash-l12"]
    shape = (flash.hidden_size, flash.num_attention_heads, flash.seq_length, flash.attention_dropout)
    assert shape == (512, 8, 1024, 0.1)

    def same_but(run_id: str, **changes: object) -> bool:
        return models[run_id] == flash.model_copy(update=changes)

    assert same_but("ciattn-unfused-l12", attention_backend="unfused")
    assert same_but("ciattn-flash-l6", num_layers=6)
    assert same_but("ciattn-unfused-nodrop-l12", attention_backend="unfused", attention_dropout=0.0)
    assert same_but(
        "ciattn-flash-rcfull-l12",
        recompute_granularity="full",
        recompute_method="uniform",
        recompute_num_layers=1,
    )
