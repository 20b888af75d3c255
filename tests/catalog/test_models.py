import pytest

from memtune.catalog.models import get_model, list_models
from memtune.config import validate
from memtune.errors import InputError
from memtune.estimate.params import total_parameters

# Published total parameter counts (model cards / safetensors totals), raw vocabulary.
PUBLISHED = {
    "llama3-8b": 8.03e9,
    "llama3-70b": 70.6e9,
    "llama3.1-405b": 405.9e9,
    "qwen3-8b": 8.19e9,
    "qwen3-32b": 32.8e9,
    "qwen3-30b-a3b": 30.5e9,
    "qwen3-235b-a22b": 235.1e9,
    "mixtral-8x7b": 46.7e9,
    "mixtral-8x22b": 140.6e9,
    "deepseek-v3": 671e9,  # main model; the 685B on Hugging Face adds the 14B MTP module
    "deepseek-v2-lite": 15.7e9,
    "deepseek-v2": 236e9,
    "moonlight-16b": 16.0e9,  # model card: 16B total, 3B activated
    "gpt-oss-20b": 20.9e9,
    "gpt-oss-120b": 116.8e9,
    "nemotron-4-340b": 341e9,
}


def test_catalog_has_exactly_the_published_models():
    assert [p.name for p in list_models()] == list(PUBLISHED)


@pytest.mark.parametrize("name", PUBLISHED)
def test_preset_parameter_count_matches_published_figure(name):
    model = get_model(name)
    if name == "deepseek-v3":
        model["mtp_num_layers"] = 0
    total = total_parameters(validate({"model": model}), pad_vocab=False)
    assert total == pytest.approx(PUBLISHED[name], rel=0.01)


def test_deepseek_v3_preset_includes_one_mtp_layer():
    assert get_model("deepseek-v3")["mtp_num_layers"] == 1


def test_presets_are_bf16():
    assert all(p.model["bf16"] is True for p in list_models())


def test_get_model_ignores_case_and_returns_a_copy():
    first = get_model("Llama3-70B")
    first["num_layers"] = 1
    assert get_model("llama3-70b")["num_layers"] == 80


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(InputError) as exc:
        get_model("llama9")
    assert exc.value.problems == ["unknown model preset 'llama9'; known: " + ", ".join(PUBLISHED)]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("qwen3-30b", "qwen3-30b-a3b"), ("llama3-405b", "llama3.1-405b"), ("Mixtral", "mixtral-8x7b")],
)
def test_a_mistyped_preset_names_the_one_it_most_likely_meant(typed, meant):
    with pytest.raises(InputError) as exc:
        get_model(typed)
    assert exc.value.problems == [
        f"unknown model preset {typed!r}; did you mean {meant!r}? known: " + ", ".join(PUBLISHED)
    ]
