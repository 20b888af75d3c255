import json

from memtune.cli import main


def test_plan_json_lists_checked_layouts_fastest_first(capsys):
    code = main(
        [
            "plan",
            "llama3-8b",
            "--gpus",
            "8",
            "--gbs",
            "32",
            "--seq",
            "4096",
            "--json",
            "--top",
            "3",
            "--workers",
            "1",
            "--pin",
            "model.tensor_model_parallel_size=2",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema_version"] == 1
    rates = [layout["tokens_per_s_per_gpu"] for layout in out["layouts"]]
    assert len(rates) == 3 and rates == sorted(rates, reverse=True)
    assert all(
        layout["layout"].startswith("TP2 ") and layout["verdict"] == "fits" for layout in out["layouts"]
    )


def test_plan_rejects_an_unknown_model(capsys):
    assert main(["plan", "no-such-model", "--gpus", "8", "--gbs", "8"]) == 2
    assert "neither a file nor a preset" in capsys.readouterr().err


def test_fix_json(capsys):
    code = main(
        [
            "fix",
            "examples/llama3-70b-sft.yaml",
            "model.recompute_granularity=null",
            "model.recompute_method=null",
            "model.recompute_num_layers=null",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["schema_version"] == 1 and out["fits_already"] and out["suggestions"] == []
    # On 64 GiB GPUs it does not fit: each suggestion fits, with its saving and its price.
    code = main(["fix", "examples/llama3-70b-sft.yaml", "cluster.gpu_memory_gib=64", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict_before"] != "fits" and out["suggestions"]
    for s in out["suggestions"]:
        assert s["status"] == "fits" and s["verdict_after"] == "fits" and s["saved_bytes"] > 0
        assert s["throughput_change"] is not None and s["unpriced"] is None
    assert all("saved_bytes" in row and "throughput_change" in row for row in out["not_chosen"])
