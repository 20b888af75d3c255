"""Preset and recipe names in each other's spelling (``llama3.1-405b`` / ``llama31_405b_...``)."""

from __future__ import annotations

import pytest

from memtune.catalog._data import spelling_key
from memtune.catalog.models import find_model, list_models
from memtune.catalog.recipes import find_recipe, list_recipes
from memtune.config import load_job


@pytest.mark.parametrize("spelled", ["llama31_405b", "LLaMA3.1-405B", "llama3.1_405b"])
def test_a_preset_answers_to_the_recipe_spelling(spelled):
    assert find_model(spelled).name == "llama3.1-405b"


def test_a_recipe_answers_to_the_preset_spelling():
    assert (
        find_recipe("llama3.1-405b_peft_32gpu_h100_bf16").name == "llama31_405b_peft_32gpu_h100_bf16_config"
    )
    assert find_recipe("llama3.1-405b-peft-32gpu-h100-bf16-config") == find_recipe(
        "llama31_405b_peft_32gpu_h100_bf16"
    )


def test_each_recipe_preset_is_found_in_the_recipe_spelling():
    for recipe in list_recipes():
        assert find_model(recipe.preset.replace(".", "").replace("-", "_")).name == recipe.preset


def test_the_spellings_stay_unambiguous():
    assert len({spelling_key(m.name) for m in list_models()}) == len(list_models())
    assert len({spelling_key(r.label) for r in list_recipes()}) == len(list_recipes())


def test_a_config_takes_the_recipe_spelling_as_model_preset(tmp_path):
    spelled = load_job(None, ["model.preset=qwen3_30b_a3b"], recipe="qwen3_30b_a3b_pretrain_config")
    assert spelled.job.model.num_moe_experts == 128
