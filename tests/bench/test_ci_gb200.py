"""The GB200 functional-test step times: sized by Megatron-LM's gb200 recipes, named apart from the
H100 runs, never reading a reserved case, and summarized on a line of their own
(benchmarks/published/collect_megatron_ci_speed.py, memtune/bench/plan.py and render.py)."""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from rich.console import Console

from memtune.bench.plan import CI_GB200_SOURCE, CI_SOURCE, GroupScore, RunScore, accuracy
from memtune.bench.render import (
    gb200_summaries,
    plan_accuracy_json,
    plan_accuracy_summaries,
    print_plan_accuracy,
)
from tests.jobs import TINY_MODEL

ROOT = Path(__file__).resolve().parents[2]
CASES = "tests/functional_tests/test_cases"
RECIPES = "tests/test_utils/recipes/gb200"
# Case names on either side of the reserved rule (sha1 of the name: 8-f reserved in moe/).
ALLOWED_MOE = "moe_case_1"  # sha1 starts with 0-7
RESERVED_MOE = "moe_case_0"  # sha1 starts with 8-f


@pytest.fixture(scope="module")
def speed() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        # the collector imports collect_megatron_ci from beside it, as when run as a script
        patch.syspath_prepend(str(ROOT / "benchmarks" / "published"))
        yield importlib.import_module("collect_megatron_ci_speed")


def recipe(nodes: int, gpus: int, *products: tuple[str, list[str], list[str]]) -> dict[str, Any]:
    """A gb200 recipe as Megatron-LM writes it: (case, environments, platforms) per product."""
    return {
        "spec": {"model": "gpt", "nodes": nodes, "gpus": gpus, "platforms": "dgx_gb200"},
        "products": [
            {
                "test_case": [case],
                "products": [{"environment": envs, "scope": ["mr"], "platforms": platforms}],
            }
            for case, envs, platforms in products
        ],
    }


def test_a_cases_gpu_count_is_nodes_times_gpus_of_the_recipe_that_lists_it(speed: ModuleType) -> None:
    one_node = recipe(
        1,
        4,
        ("a", ["dev"], ["dgx_gb200"]),
        ("lts_only", ["lts"], ["dgx_gb200"]),
        ("h100_only", ["dev"], ["dgx_h100"]),
        ("both", ["dev"], ["dgx_gb200"]),
    )
    two_nodes = recipe(2, 4, ("d", ["dev"], ["dgx_gb200"]), ("both", ["dev"], ["dgx_gb200"]))
    sizes = speed.recipe_sizes([one_node, two_nodes], "dgx_gb200")
    gb200 = speed.PLATFORMS["dgx_gb200"]
    every_size = dataclasses.replace(gb200, unsteady_sizes=frozenset())
    a, d = speed.case_size(every_size, sizes, "gpt", "a"), speed.case_size(gb200, sizes, "gpt", "d")
    assert (a.gpus, a.gpus_per_node, d.gpus, d.gpus_per_node) == (4, 4, 8, 4)
    with pytest.raises(speed.Skip, match="runs on 1 x 4 GPUs, whose logged step times are not steady"):
        speed.case_size(gb200, sizes, "gpt", "a")
    for unlisted in ("lts_only", "h100_only", "never_listed"):
        with pytest.raises(speed.Skip, match="listed by no recipe"):
            speed.case_size(gb200, sizes, "gpt", unlisted)
    with pytest.raises(speed.Skip, match=r"different sizes \(nodes x GPUs: 1 x 4, 2 x 4\)"):
        speed.case_size(gb200, sizes, "gpt", "both")
    # The H100 runs keep their one node of 8, whatever a recipe says.
    assert speed.case_size(speed.PLATFORMS["dgx_h100"], sizes, "gpt", "a").gpus == 8


def test_gb200_ids_and_groups_never_meet_the_h100_ones(speed: ModuleType) -> None:
    gb200, h100 = speed.PLATFORMS["dgx_gb200"], speed.PLATFORMS["dgx_h100"]
    assert speed.run_id(gb200, "gpt", "x") == "mlm-ci-speed-gb200-x"
    assert speed.run_id(gb200, "moe", "x") == "mlm-ci-speed-gb200-moe-x"
    assert speed.run_id(h100, "gpt", "x") == "mlm-ci-speed-x"
    model = dict(TINY_MODEL)
    h100_config = {"model": model, "cluster": {"num_gpus": 8, "gpu": "H100-80GB"}}
    gb200_config = {"model": model, "cluster": {"num_gpus": 8, "gpu": "H100-80GB"}}
    speed.place(gb200_config, gb200.gpu, speed.Size(2, 4))
    assert gb200_config["cluster"] == {"num_gpus": 8, "gpu": "GB200", "gpus_per_node": 4}
    assert speed.group_of(h100_config) == "L2-h64-a4-f256-s128-v256-gpus8"
    assert speed.group_of(gb200_config) == "L2-h64-a4-f256-s128-v256-gpus8-GB200"
    assert speed.hardware("dgx_gb200", speed.Size(2, 4)) == "dgx_gb200 (8 GPUs, 2 nodes of 4)"
    assert speed.hardware("dgx_h100", speed.Size(1, 8)) == "dgx_h100 (8 GPUs, one node)"


class FakeRepo:
    """A Megatron-LM git directory of one moe/ recipe and two moe/ cases, one of them reserved;
    it records every request, and refuses one it has no answer for."""

    def __init__(self, nodes: int = 2) -> None:
        self.nodes = nodes
        self.requests: list[tuple[str, ...]] = []
        moe_recipe = {
            "spec": {"model": "moe", "nodes": self.nodes, "gpus": 4},
            "products": [
                {
                    "test_case": [RESERVED_MOE, ALLOWED_MOE],
                    "products": [{"environment": ["dev"], "platforms": ["dgx_gb200", "dgx_h100"]}],
                }
            ],
        }
        args = {
            "--num-layers": 2,
            "--hidden-size": 64,
            "--num-attention-heads": 4,
            "--seq-length": 128,
            "--micro-batch-size": 1,
            "--global-batch-size": 4,
            "--vocab-size": 256,
            "--num-experts": 4,
        }
        golden = json.dumps({"iteration-time": {"values": {"1": 2.0, "2": 0.5, "3": 0.5}}})
        case = f"{CASES}/moe/{ALLOWED_MOE}"
        self.answers = {
            ("rev-parse", "HEAD"): "0" * 40,
            ("ls-tree", "--name-only", "HEAD", f"{RECIPES}/"): f"{RECIPES}/moe.yaml",
            ("show", f"HEAD:{RECIPES}/moe.yaml"): yaml.safe_dump(moe_recipe),
            ("ls-tree", "-d", "--name-only", "HEAD", f"{CASES}/gpt/"): "",
            ("ls-tree", "-d", "--name-only", "HEAD", f"{CASES}/moe/"): f"{CASES}/moe/{RESERVED_MOE}\n{case}",
            ("ls-tree", "--name-only", "HEAD", f"{case}/"): (
                f"{case}/model_config.yaml\n{case}/golden_values_dev_dgx_gb200.json\n"
                f"{case}/golden_values_dev_dgx_h100.json"
            ),
            ("show", f"HEAD:{case}/golden_values_dev_dgx_gb200.json"): golden,
            ("show", f"HEAD:{case}/golden_values_dev_dgx_h100.json"): golden,
            ("show", f"HEAD:{case}/model_config.yaml"): yaml.safe_dump(
                {"TEST_TYPE": "regular", "MODEL_ARGS": args}
            ),
        }

    def __call__(self, *args: str) -> str:
        self.requests.append(args)
        return self.answers[args]


@pytest.mark.parametrize("platform", ["dgx_gb200", "dgx_h100"])
def test_a_reserved_moe_case_is_never_read(
    speed: ModuleType, platform: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert speed.allowed("moe", ALLOWED_MOE) and not speed.allowed("moe", RESERVED_MOE)
    repo = FakeRepo()
    skipped = speed.collect(repo, tmp_path, platform)
    assert not skipped
    assert not [request for request in repo.requests if RESERVED_MOE in " ".join(request)]
    assert RESERVED_MOE not in capsys.readouterr().out
    prefix = speed.PLATFORMS[platform].id_prefix
    [written] = tmp_path.iterdir()
    run = yaml.safe_load(written.read_text())
    assert run["id"] == f"{prefix}-moe-{ALLOWED_MOE}"
    assert run["published"] == {
        "metric": "iteration-time, median of the logged values from the 2nd on",
        "step_time_s": 0.5,
        "samples": 2,
    }
    if platform == "dgx_gb200":
        assert run["hardware"] == "dgx_gb200 (8 GPUs, 2 nodes of 4)"
        assert run["config"]["cluster"] == {"num_gpus": 8, "gpu": "GB200", "gpus_per_node": 4}
        assert run["group"] == "L2-h64-a4-f256-e4k2-s128-v256-gpus8-GB200"


def test_a_case_of_a_one_tray_gb200_recipe_is_skipped_before_its_golden_values_are_read(
    speed: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = FakeRepo(nodes=1)
    skipped = speed.collect(repo, tmp_path, "dgx_gb200")
    reason = "runs on 1 x 4 GPUs, whose logged step times are not steady"
    assert dict(skipped) == {reason: 1}
    assert f"skip {ALLOWED_MOE}: {reason}" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())
    assert not [request for request in repo.requests if "golden_values" in " ".join(request)]
    # the H100 runs are sized without the recipes: one node of 8, kept
    assert not speed.collect(FakeRepo(nodes=1), tmp_path, "dgx_h100")


def ci_group(set_id: str, source: str, measured: float, predicted: float) -> GroupScore:
    """One functional-test group of one run (its step error: measured / predicted - 1)."""
    run = RunScore(set_id, "tune", "r", "tokens_per_s_per_gpu", measured, predicted, None, 1.0)
    run.measured_relative = run.predicted_relative = 1.0
    return GroupScore(set_id, "tune", source, [run], [])


def test_the_h100_figures_leave_the_gb200_groups_out() -> None:
    h100 = ci_group("L12-h512-gpus8", CI_SOURCE, 100, 125)  # step error 20%
    h100_moe = ci_group("L12-h512-e8k2-gpus8", CI_SOURCE, 50, 100)  # 50%
    gb200 = ci_group("L12-h512-gpus4-GB200", CI_GB200_SOURCE, 90, 100)  # 10%
    gb200_moe = ci_group("L12-h512-e8k2-gpus4-GB200", CI_GB200_SOURCE, 60, 100)  # 40%
    pooled = plan_accuracy_summaries([h100, h100_moe, gb200, gb200_moe])["all"]
    assert (pooled.groups, pooled.runs) == (2, 2)
    assert pooled.median_step_error == pytest.approx(0.35)  # of 20% and 50% only
    assert pooled.median_moe_step_error == pytest.approx(0.5)
    own = gb200_summaries([h100, h100_moe, gb200, gb200_moe])
    assert set(own) == {"tune", "all"}
    assert (own["all"].groups, own["all"].runs) == (2, 2)
    assert own["all"].median_step_error == pytest.approx(0.25)  # of 10% and 40%
    assert own["all"].median_moe_step_error == pytest.approx(0.4)


def test_the_gb200_line_and_key_are_there_only_with_gb200_groups() -> None:
    h100 = ci_group("L12-h512-gpus8", CI_SOURCE, 100, 125)
    gb200 = ci_group("L12-h512-gpus4-GB200", CI_GB200_SOURCE, 90, 100)
    assert "gb200_summary" not in plan_accuracy_json([h100])
    assert gb200_summaries([h100]) == {}
    doc = plan_accuracy_json([h100, gb200])
    assert doc["gb200_summary"]["all"]["median_step_error"] == pytest.approx(0.1)
    assert doc["summary"]["all"]["groups"] == 1
    console = Console(record=True, width=200)
    print_plan_accuracy(console, [h100, gb200])
    lines = console.export_text().splitlines()
    assert [line for line in lines if "GB200 functional tests" in line] == [
        "tune GB200 functional tests: 1 groups, 1 runs: pair-weighted Kendall tau -, median |step error| "
        "10.0%, MoE -",
        "all GB200 functional tests: 1 groups, 1 runs: pair-weighted Kendall tau -, median |step error| "
        "10.0%, MoE -",
    ]


def test_accuracy_scores_the_gb200_runs_only_when_asked_and_after_the_others(tmp_path: Path) -> None:
    # Two hand-made runs of one tiny model, one on H100s and one on GB200s.
    model = {
        "num_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "seq_length": 512,
        "vocab_size": 1024,
        "bf16": True,
    }
    for name, cluster in (
        ("h100", {"num_gpus": 8, "gpu": "H100-80GB"}),
        ("gb200", {"num_gpus": 8, "gpu": "GB200", "gpus_per_node": 4}),
    ):
        run = {
            "id": f"t-{name}",
            "group": f"g-{name}",
            "published": {"step_time_s": 0.1},
            "config": {"model": model, "train": {"global_batch_size": 8}, "cluster": cluster},
        }
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(run))
    assert [g.source for g in accuracy([tmp_path])] == [CI_SOURCE]
    assert [(g.set_id, g.source) for g in accuracy([tmp_path], gb200=True)] == [
        ("g-h100", CI_SOURCE),
        ("g-gb200", CI_GB200_SOURCE),
    ]


def test_the_gb200_runs_split_as_their_readme_says_and_pass_the_gate() -> None:
    # benchmarks/published/layouts/README.md: 60 runs on two trays, 51 gpt/ (31 tune, 20 holdout)
    # and 9 moe/ (6 tune, 3 holdout), all on GB200; only counted and gated here, never priced.
    from collections import Counter

    from memtune.bench.plan import ci_source, ci_split_of
    from memtune.bench.sets import read_layouts
    from memtune.check import gate
    from memtune.config import validate
    from memtune.config.loaders import native

    sets, runs = read_layouts([ROOT / "benchmarks" / "published" / "layouts" / "megatron-lm-ci-gb200"])
    counts = Counter(
        ("moe" if r["id"].startswith("mlm-ci-speed-gb200-moe-") else "gpt", ci_split_of(r["id"]))
        for r in runs
    )
    assert (sets, len(runs)) == ([], 60)
    assert counts == {("gpt", "tune"): 31, ("gpt", "holdout"): 20, ("moe", "tune"): 6, ("moe", "holdout"): 3}
    assert all(r["hardware"] == "dgx_gb200 (8 GPUs, 2 nodes of 4)" for r in runs)
    assert {ci_source(r) for r in runs} == {CI_GB200_SOURCE}
    assert all(r["id"].startswith("mlm-ci-speed-gb200-") and r["group"].endswith("-GB200") for r in runs)
    for r in runs:
        gate(validate(native.read(r["config"])))
