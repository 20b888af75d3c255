"""The calibrated verdict (memtune/estimate/verdict.py, docs/verdict.md)."""

from __future__ import annotations

from dataclasses import replace
from io import StringIO

import pytest
from rich.console import Console

from memtune.check import gate
from memtune.config.changes import with_changes
from memtune.config.derived import derive
from memtune.config.knobs import Knobs, Recompute
from memtune.estimate import estimate
from memtune.estimate.render import estimate_json, print_explain, print_table
from memtune.estimate.verdict import (
    MIN_RUNS,
    _margin,
    calibration,
    families_of,
    margin_of,
    needed_bytes,
    verdict_of,
)
from memtune.perf.step import throughput_of
from memtune.plan.fast import FastEstimator
from memtune.plan.query import Query, base_job
from memtune.plan.space import changes_of
from tests.estimate.conftest import make_job

TE = {"transformer_impl": "transformer_engine", "attention_backend": "flash"}
LORA = {"dim": 8, "alpha": 8}


def test_a_dense_job_gets_the_dense_family_figure_on_top_of_fragmentation():
    d = derive(make_job())
    m = margin_of(d)
    dense = calibration().families["dense"]
    assert m.families == ("dense",) and m.basis == dense and m.measured
    assert m.calibrated == dense.worst_under > 0
    assert m.total == d.fragmentation_margin + dense.worst_under
    assert dense.runs >= MIN_RUNS and 0.9 < dense.confidence < 1


def test_a_job_in_several_families_takes_the_largest():
    cal = calibration()
    together = ("offload", "MLA")  # measured together on tune runs (aoff- runs on MLA models)
    assert cal.measured(together)
    m = _margin(together, 0.08, 0.08)
    offload, mla = cal.families["offload"], cal.families["MLA"]
    assert offload.worst_under != mla.worst_under
    larger = max(offload, mla, key=lambda f: f.worst_under)
    assert m.basis == larger and m.calibrated == larger.worst_under and m.total == 0.08 + larger.worst_under


def test_a_family_with_too_few_tune_runs_gets_the_widest_margin():
    cal = calibration()
    thin = [f for f in cal.families.values() if f.runs < MIN_RUNS]
    assert thin, "the published set has families of one or two runs"
    job = make_job(model={**TE, "fp8": "hybrid", "fp8_recipe": "blockwise"})
    m = margin_of(derive(job))
    assert "FP8 blockwise" in m.thin and not m.measured
    assert m.calibrated == cal.widest == max(f.worst_under for f in cal.families.values())


def test_a_combination_never_measured_says_so_and_gets_the_widest_margin():
    d = derive(make_job(model={"mtp_num_layers": 1}, peft=LORA))
    assert families_of(d) == ("MTP", "LoRA")
    m = margin_of(d)
    assert not m.measured and m.thin == () and m.calibrated == calibration().widest
    assert all(calibration().families[f].runs >= MIN_RUNS for f in m.families)


def test_the_te_margins_win_where_they_are_larger_and_are_not_added_twice():
    d = derive(make_job(model={**TE, "cuda_graph_impl": "transformer_engine"}))
    m = margin_of(d)
    assert d.fit_uncertainty["CUDA graphs"] > calibration().widest
    assert m.total == d.fit_margin  # the a-priori TE share, not TE share + observed error
    assert m.error == pytest.approx(sum(d.fit_uncertainty.values()))


def test_fits_exactly_at_the_boundary_and_tight_just_below():
    m = margin_of(derive(make_job()))
    peak, outside = 10_000_000_000, 500_000_000
    boundary = needed_bytes(peak, outside, m)
    assert verdict_of(peak, outside, boundary, m) == "fits"
    assert verdict_of(peak, outside, boundary - 1, m) == "tight"
    assert verdict_of(peak, outside, peak + outside, m) == "tight"
    assert verdict_of(peak, outside, peak + outside - 1, m) == "does not fit"


def test_estimate_names_its_margin_and_a_measured_peak_gets_the_same_verdict():
    est = estimate(gate(make_job()))
    worst = est.worst
    assert est.verdict_margin == margin_of(est.derived)
    assert est.needed_bytes(worst) == needed_bytes(
        worst.peak_bytes, est.non_pytorch_bytes, est.verdict_margin
    )
    assert est.verdict() == est.verdict_of_peak(worst.peak_bytes)


@pytest.mark.parametrize("sharding", ["distopt", "fsdp"])
def test_plan_fast_path_uses_the_verdict_of_its_candidate_family(sharding):
    base = base_job(Query("llama3-8b", 16, "H100-80GB", 8, 4096, 64, "pretrain"))
    c = Knobs(
        tp=2,
        pp=1,
        vpp=1,
        cp=1,
        ep=1,
        etp=1,
        mbs=1,
        sp=True,
        recompute=Recompute("selective", ("core_attn",)),
        sharding=sharding,
        offload=0.0,
        act_offload=0,
        regather=False,
    )
    est = estimate(gate(with_changes(base, changes_of(base, c))))
    assert ("FSDP" in est.verdict_margin.families) == (sharding == "fsdp")
    for capacity in (est.needed_bytes(est.worst), est.needed_bytes(est.worst) - 1):
        fast = FastEstimator(base, capacity)
        got = fast.evaluate(c)
        assert got.needed_bytes == est.needed_bytes(est.worst)
        assert got.verdict == replace(est, capacity_bytes=capacity).verdict()


def test_the_verdict_line_and_json_name_the_family_or_say_it_was_not_measured():
    measured = estimate(gate(make_job(peft=LORA)))
    unmeasured = estimate(gate(make_job(model={"mtp_num_layers": 1}, peft=LORA)))
    lora = calibration().families["LoRA"]
    data = estimate_json(measured, throughput_of(measured.derived))["verdict_margin"]
    assert data["basis"]["family"] == "LoRA" and data["basis"]["runs"] == lora.runs and data["measured"]
    assert estimate_json(unmeasured, throughput_of(unmeasured.derived))["verdict_margin"]["basis"] is None
    verdicts, explained = [], []
    for est in (measured, unmeasured):
        out = StringIO()
        print_table(est, Console(file=out, width=400), throughput_of(est.derived))
        verdicts.append(next(line for line in out.getvalue().splitlines() if line.startswith("Verdict:")))
        out = StringIO()
        print_explain(est, Console(file=out, width=400))
        explained.append(next(line for line in out.getvalue().splitlines() if "safety margin" in line))
    # The verdict says it in plain words; --explain says what the safety margin rests on.
    margin = measured.verdict_margin
    assert (
        f"after a {margin.fragmentation:.0%} fragmentation margin and a {margin.error:.1%} safety margin"
        in (verdicts[0])
    )
    assert "tune runs" not in verdicts[0] and "confidence" not in verdicts[0]
    assert (
        f"is for LoRA (the peak exceeded the estimate by at most {lora.worst_under:.1%} on {lora.runs} tune runs"
        in explained[0]
    )
    assert "the widest margin any family needed (MTP + LoRA never measured together)" in explained[1]
