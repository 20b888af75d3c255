"""bench plan --accuracy: the per-group and pair-weighted scores on hand-made groups."""

from __future__ import annotations

import json

import pytest

from memtune.bench.plan import GroupScore, RunScore, accuracy, one_per_configuration, split_of, summarize
from memtune.bench.render import plan_accuracy_json


def group(set_id: str, measured: list[float], predicted: list[float], tflops: list[float]) -> GroupScore:
    runs = [
        RunScore(set_id, "tune", f"run{i}", "tokens_per_s_per_gpu", m, p, t, 2 * p)
        for i, (m, p, t) in enumerate(zip(measured, predicted, tflops, strict=True))
    ]
    best = max(runs, key=lambda r: r.measured)
    for r in runs:
        r.measured_relative, r.predicted_relative = r.measured / best.measured, r.predicted / best.predicted
    return GroupScore(set_id, "tune", "", runs, [])


def test_group_scores() -> None:
    # Measured order a > b > c; predicted a > c > b: 2 of 3 pairs agree, tau 1/3.
    g = group("g", [100, 80, 60], [50, 30, 36], [300, 240, 180])
    assert g.tau == pytest.approx(1 / 3)
    assert g.top1 is True
    # Relative to a: b measured 0.8, predicted 0.6 (-25%); c 0.6 against 0.72 (+20%).
    assert sorted(g.relative_errors) == pytest.approx([0.20, 0.25])
    # Predicted TFLOP/s 2 x predicted: 100/300, 60/240, 72/180.
    assert [r.tflops_error for r in g.runs] == pytest.approx([100 / 300 - 1, 60 / 240 - 1, 72 / 180 - 1])


def test_a_run_that_states_tokens_alone_is_scored_by_its_tokens() -> None:
    # MLPerf states tokens/s only: its throughput error is predicted over measured tokens/s - 1;
    # a run that states TFLOP/s keeps the TFLOP/s error (the publisher's FLOP count on both sides).
    tokens_only = RunScore("mlperf/x", "holdout", "a", "tokens_per_s_per_gpu", 4000.0, 5000.0, None, 900.0)
    with_tflops = RunScore("bridge/x", "holdout", "b", "tokens_per_s_per_gpu", 4000.0, 5000.0, 800.0, 900.0)
    assert tokens_only.tflops_error is None
    assert tokens_only.throughput_error == pytest.approx(0.25)
    assert with_tflops.throughput_error == pytest.approx(900 / 800 - 1)


def test_summary_weights_tau_by_pairs_and_pools_errors() -> None:
    three = group("g3", [100, 80, 60], [50, 30, 36], [300, 240, 180])  # 3 pairs, +1 net
    two = group("g2", [10, 20], [2, 1], [10, 20])  # 1 pair, discordant; top-1 miss
    s = summarize([three, two])
    assert s.tau == pytest.approx((1 - 1) / 4)
    assert (s.top1_hits, s.top1_groups) == (1, 2)
    # Pooled |relative errors|: 0.20, 0.25 and g2's run0: measured 0.5, predicted 2.0 (+300%).
    assert s.median_relative_error == pytest.approx(0.25)
    assert s.runs == 5


def test_runs_of_one_configuration_count_once_at_their_median() -> None:
    # Three servers ran configuration A (measured 90, 100, 96), one ran B: two runs remain, A at
    # the median measured 96 (and published TFLOP/s 300), its prediction kept; B as it was.
    def run(label: str, measured: float, tflops: float) -> RunScore:
        return RunScore("s", "tune", label, "tokens_per_s_per_gpu", measured, 80.0, tflops, 250.0)

    runs = one_per_configuration(
        [
            ("A", run("a1", 90, 280)),
            ("B", run("b", 70, 200)),
            ("A", run("a2", 100, 320)),
            ("A", run("a3", 96, 300)),
        ]
    )
    assert [(r.label, r.measured, r.predicted, r.measured_tflops) for r in runs] == [
        ("a1 (3 runs)", 96, 80.0, 300),
        ("b", 70, 80.0, 200),
    ]


def test_split_filter_never_scores_the_other_split(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "sets.yaml"
    path.write_text(
        "sets:\n"
        "  - id: llama3-70b-sft-parallelism\n"  # holdout (sha256 starts with 2)
        "    model: no-such-model\n    gpus: 8\n    gpu: H100-80GB\n    gpus_per_node: 8\n"
        "    seq: 4096\n    gbs: 8\n    mode: pretrain\n    runs: []\n"
    )
    assert split_of("llama3-70b-sft-parallelism") == "holdout"
    assert accuracy([path], "tune") == []


def test_json_has_summary_per_split_and_groups() -> None:
    doc = plan_accuracy_json([group("g3", [100, 80, 60], [50, 30, 36], [300, 240, 180])])
    assert doc["schema_version"] == 1
    assert set(doc["summary"]) == {"tune", "all"}
    assert doc["groups"][0]["kendall_tau"] == pytest.approx(1 / 3)
    json.dumps(doc)


def test_ci_runs_split_as_their_readme_says() -> None:
    # benchmarks/published/layouts/README.md: 73 functional-test runs, 51 tune and 22 holdout.
    from pathlib import Path

    import yaml

    from memtune.bench.plan import ci_split_of

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "layouts" / "megatron-lm-ci"
    splits = [ci_split_of(yaml.safe_load(f.read_text())["id"]) for f in sorted(root.glob("*.yaml"))]
    assert (len(splits), splits.count("tune"), splits.count("holdout")) == (73, 51, 22)


def test_bridge_summary_sets_split_as_their_readme_says() -> None:
    # benchmarks/published/layouts/README.md: every row of the summary tables, 38 sets of one
    # release, task and system; 19 sets (92 runs) held back, fixed before any comparison (the
    # B300 and GB300 sets' 7, 33 runs, when they were first collected).
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "layouts"
    sets = yaml.safe_load((root / "bridge-summary.yaml").read_text())["sets"]
    held = [s for s in sets if split_of(s["id"]) == "holdout"]
    assert (len(sets), sum(len(s["runs"]) for s in sets)) == (38, 209)
    assert (len(held), sum(len(s["runs"]) for s in held)) == (19, 92)
    assert {split_of(s["id"]) for s in yaml.safe_load((root / "nemo-summary.yaml").read_text())["sets"]} == {
        "tune"
    }


def test_bridge_skill_sets_split_as_their_readme_says() -> None:
    # benchmarks/published/layouts/README.md: 13 runs in 7 sets; 2 sets (7 runs) held back,
    # fixed before any comparison.
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "layouts"
    sets = yaml.safe_load((root / "bridge-skills.yaml").read_text())["sets"]
    held = sorted(s["id"] for s in sets if split_of(s["id"]) == "holdout")
    assert (len(sets), sum(len(s["runs"]) for s in sets)) == (7, 13)
    assert held == [
        "bridge-skills/moe-hardware-configs/qwen3-235b-a22b/GB200x128",
        "bridge-skills/qwen3-30b-a3b/H100x16",
    ]


def test_bridge_card_sets_split_as_their_readme_says() -> None:
    # benchmarks/published/layouts/README.md: 8 runs in 8 sets, all but one held back, fixed
    # before any comparison.
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "layouts"
    sets = yaml.safe_load((root / "bridge-cards.yaml").read_text())["sets"]
    assert (len(sets), sum(len(s["runs"]) for s in sets)) == (8, 8)
    assert [s["id"] for s in sets if split_of(s["id"]) == "tune"] == ["bridge-cards/qwen3-30b-a3b/GB200x8"]


def test_mlperf_sets_split_as_their_readme_says() -> None:
    # benchmarks/published/layouts/README.md: NVIDIA's 40 runs in 16 sets and the partners' 90 in
    # 49, then v6.0's DeepSeek-V3 (NVIDIA's 4 runs, Google's 1); 33 sets (66 runs) held back, fixed
    # before any comparison.
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "layouts"
    sets = [s for f in sorted(root.glob("mlperf-*.yaml")) for s in yaml.safe_load(f.read_text())["sets"]]
    held = [s for s in sets if split_of(s["id"]) == "holdout"]
    assert (len(sets), sum(len(s["runs"]) for s in sets)) == (67, 135)
    assert (len(held), sum(len(s["runs"]) for s in held)) == (33, 66)


def test_the_deepseek_sets_are_what_their_collector_writes_from_the_transcription(tmp_path) -> None:
    # mlperf-deepseekv3.yaml is collect_mlperf_deepseek.py's output from the committed
    # transcription of the MLPerf v6.0 files (no snapshot of them can be fetched to read again)
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "layouts"
    out = tmp_path / "sets.yaml"
    subprocess.run(
        [sys.executable, str(root / "collect_mlperf_deepseek.py"), str(out)], check=True, capture_output=True
    )
    assert out.read_text() == (root / "mlperf-deepseekv3.yaml").read_text()


def test_step_errors_pool_the_functional_test_runs_and_their_moe_groups() -> None:
    from memtune.bench.plan import CI_SOURCE

    dense = group("L12-h512-gpus8", [100, 80], [125, 80], [1, 1])  # steps 25% short, exact
    moe = group("L12-h512-e8k2-gpus8", [50], [100], [1])  # step predicted at half the measured
    dense.source = moe.source = CI_SOURCE
    other = group("bridge-summary/x", [10], [20], [1])  # not a functional test: not pooled
    s = summarize([dense, moe, other])
    assert s.median_step_error == pytest.approx(0.2)  # |100/125 - 1| = 0.2, 0, 0.5
    assert s.median_moe_step_error == pytest.approx(0.5)


def test_a_set_whose_runs_rank_by_different_throughputs_is_refused() -> None:
    # a set's runs are ranked against its best by their first measured figure: tokens/s of one
    # run against TFLOP/s of another would rank numbers of different units
    from memtune.bench.sets import layout_set
    from memtune.errors import InputError

    entry = {
        "id": "mixed",
        "model": "llama3-8b",
        "gpus": 8,
        "gpu": "H100-80GB",
        "gpus_per_node": 8,
        "seq": 4096,
        "gbs": 64,
        "mode": "pretrain",
        "runs": [
            {"label": "a", "overrides": [], "measured": {"model_tflops_per_gpu": 400.0}},
            {"label": "b", "overrides": [], "measured": {"tokens_per_s_per_gpu": 9000.0}},
        ],
    }
    with pytest.raises(InputError) as exc:
        layout_set("f.yaml: sets[0]", entry)
    assert exc.value.problems[0] == (
        "f.yaml: sets[0] (mixed): its runs rank by different throughputs "
        "(model_tflops_per_gpu, tokens_per_s_per_gpu); put the same one first in every run's measured"
    )


def test_functional_tests_of_one_translated_config_score_as_one_run_at_their_median() -> None:
    # Two test cases that differ only in flags the translation drops (a resume, say):
    # one config, measured at 0.1 s and 0.3 s a step; a third with another micro-batch size.
    # 8 GPUs, global batch 16 x sequence 128: 256 tokens a GPU a step.
    from memtune.bench.plan import score_ci_group
    from tests.jobs import TINY_MODEL

    def doc(run_id: str, step_s: float, micro_batch: int) -> dict[str, object]:
        config = {
            "model": dict(TINY_MODEL),
            "train": {"micro_batch_size": micro_batch, "global_batch_size": 16},
            "cluster": {"num_gpus": 8, "gpu": "H100-80GB"},
        }
        return {"id": run_id, "config": config, "published": {"step_time_s": step_s}}

    group = score_ci_group("g", "tune", [doc("a", 0.1, 1), doc("b", 0.3, 1), doc("c", 0.2, 2)])
    assert [(r.label, r.measured) for r in group.runs] == [
        ("a (2 runs)", pytest.approx((2560 + 2560 / 3) / 2)),  # the median of 2,560 and 853 tokens/s
        ("c", pytest.approx(256 / 0.2)),
    ]
    assert group.runs[0].predicted != group.runs[1].predicted
