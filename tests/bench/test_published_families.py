"""`memtune bench published` per feature family (memtune/bench/published.py)."""

from memtune.bench.published import PublishedResult, published_report
from memtune.config.derived import derive
from memtune.estimate.verdict import families_of
from tests.estimate.conftest import make_job

TE = {"transformer_impl": "transformer_engine", "attention_backend": "flash"}


def test_a_run_falls_into_every_family_it_exercises():
    assert families_of(derive(make_job())) == ("dense",)
    job = make_job(
        model={
            **TE,
            "num_moe_experts": 4,
            "fp8": "hybrid",
            "fp8_recipe": "blockwise",
            "cuda_graph_impl": "transformer_engine",
            "multi_latent_attention": True,
        }
    )
    assert families_of(derive(job)) == ("TE MoE", "CUDA graphs", "FP8 blockwise", "MLA")
    # Local-spec MoE is not the TE family; FP8 needs Transformer Engine.
    assert families_of(derive(make_job(model={"num_moe_experts": 4}))) == ("dense",)


def _result(run_id: str, split: str, published: int, estimated: int, *families: str) -> PublishedResult:
    return PublishedResult(run_id, split, published, estimated, families)


def test_family_summaries_are_signed_and_per_split():
    results = [
        _result("a", "tune", 100, 90, "TE MoE"),
        _result("b", "tune", 100, 104, "TE MoE", "MLA"),
        _result("c", "holdout", 100, 98, "MLA"),
        _result("d", "tune", 100, 101, "dense"),
    ]
    report = published_report(results)
    families = {f.family: f.splits for f in report.families}
    assert list(families) == ["TE MoE", "MLA", "dense"]
    moe = families["TE MoE"]["tune"]
    assert moe is not None and moe.runs == 2
    assert round(moe.mean_error, 6) == -0.03 and round(moe.mean_abs_error, 6) == 0.07
    assert families["TE MoE"]["holdout"] is None
    mla = families["MLA"]
    assert mla["tune"] is not None and mla["holdout"] is not None
    assert (round(mla["tune"].mean_error, 6), round(mla["holdout"].mean_error, 6)) == (0.04, -0.02)
    # Only the shown split is summarized.
    tune_only = published_report(results, "tune")
    assert [f.family for f in tune_only.families] == ["TE MoE", "MLA", "dense"]
    assert set(tune_only.families[1].splits) == {"tune"}


def test_the_json_document_carries_the_families(capsys):
    import json
    from pathlib import Path

    from memtune.cli import main

    run = (
        Path(__file__).resolve().parents[2]
        / "benchmarks/published/memory/megatron-lm-ci"
        / "mlm-ci-gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap.yaml"
    )
    assert main(["bench", "published", "--json", "--split", "tune", str(run)]) == 0
    families = json.loads(capsys.readouterr().out)["families"]
    assert list(families) == ["FP8 tensorwise", "TP overlap"]
    assert families["TP overlap"]["tune"]["runs"] == 1
