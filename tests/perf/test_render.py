"""`memtune bench step`: the job's simulated step as JSON, text and a Gantt chart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtune.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama3-70b-sft.yaml"


def test_json_stages_add_up_to_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "step", str(EXAMPLE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    assert len(doc["stages"]) == 4  # the example's PP 4
    for stage in doc["stages"]:
        assert stage["compute_s"] + stage["exposed_comm_s"] + stage["idle_s"] == pytest.approx(
            doc["step_time_s"]
        )


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "step.png"
    assert main(["bench", "step", str(EXAMPLE), "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "model TFLOP/s per GPU" in capsys.readouterr().out


def test_bad_config_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "step", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_recipe_is_priced_as_estimate_and_plan_take_it(capsys: pytest.CaptureFixture[str]) -> None:
    recipe = "llama3_70b_sft_32gpu_h100_fp8cs_config"
    assert main(["bench", "step", f"recipe:{recipe}", "--json"]) == 0
    by_word = json.loads(capsys.readouterr().out)
    assert main(["bench", "step", "--recipe", recipe, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_word
    assert len(by_word["stages"]) == 4  # the recipe's PP 4
    assert main(["bench", "step"]) == 2
    assert capsys.readouterr().err == (
        "memtune bench: a config file or --recipe NAME is required: "
        "memtune bench step CONFIG|--recipe NAME [OVERRIDE.yaml ...] [key=value ...]\n"
    )


def test_text_gives_the_step_and_the_rates_on_two_lines_of_the_json_figures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["bench", "step", str(EXAMPLE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["bench", "step", str(EXAMPLE)]) == 0
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert first == (
        f"step {doc['step_time_s']:.3f} s ± {doc['step_time_uncertainty']['relative']:.0%}, "
        f"bubble {doc['bubble_fraction']:.1%}"
    )
    assert second == (
        f"{doc['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, "
        f"{doc['model_tflops_per_gpu']:,.0f} model TFLOP/s per GPU"
    )
