"""Real Megatron-Bridge override files name no architecture: one line says what they need and
which recipe they most likely override (fixtures/bridge-overrides/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.cli import main
from memtune.config import load_job

FIXTURES = Path(__file__).parent / "fixtures" / "bridge-overrides"
CLOSEST = {
    "llama32_1b_finetune.yaml": "llama3_8b_peft_1gpu_h100_bf16_config",  # its peft: section is LoRA
    "llama32_1b_pretrain.yaml": "llama3_8b_pretrain_2gpu_h100_bf16_config",
    "llama32_3b-1b_distill_override_example.yaml": "llama3_8b_sft_2gpu_h100_bf16_config",
    "quantized_llama3_8b_pretrain_override_example.yaml": "llama3_8b_pretrain_2gpu_h100_bf16_config",
    "qwen3_next_80b_a3b_finetune_override_example.yaml": "qwen3_30b_a3b_sft_8gpu_h100_bf16_config",
    "qwen3_vl_pretrain_override_example.yaml": "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config",
}


def test_the_fixtures_are_the_listed_files():
    assert sorted(p.name for p in FIXTURES.glob("*.yaml")) == sorted(CLOSEST)


@pytest.mark.parametrize("name", sorted(CLOSEST))
def test_one_line_names_the_recipe_or_preset_it_needs(name, capsys):
    path = FIXTURES / name
    assert main(["estimate", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "ignored" not in line]
    assert err == [
        f"memtune estimate: {name}: an override file without a model architecture: give the recipe it "
        f"overrides (--recipe NAME {name}) or a preset (model.preset=NAME, `memtune models`); closest "
        f"recipe by its name and keys: {CLOSEST[name]}"
    ]


@pytest.mark.parametrize("name", sorted(CLOSEST))
def test_the_file_loads_over_the_recipe_it_names_or_with_a_preset(name):
    path = FIXTURES / name
    over_recipe = load_job(None, recipe=CLOSEST[name], layers=[str(path)]).job
    assert over_recipe.model.num_layers > 0
    with_preset = load_job(path, ["model.preset=llama3-8b"]).job
    assert with_preset.model.hidden_size == 4096


def test_an_override_in_memtunes_own_layout_gets_the_same_line(tmp_path, capsys):
    path = tmp_path / "llama3_8b_pretrain_tp2.yaml"
    path.write_text(
        "model:\n  tensor_model_parallel_size: 2\ntrain:\n  global_batch_size: 512\n", encoding="utf-8"
    )
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"memtune check: {path.name}: an override file without a model architecture: give the recipe it "
        f"overrides (--recipe NAME {path.name}) or a preset (model.preset=NAME, `memtune models`); closest "
        "recipe by its name and keys: llama3_8b_pretrain_2gpu_h100_bf16_config"
    ]
