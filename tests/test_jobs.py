import pytest

from memtune.errors import InputError
from tests.jobs import build_job

BASE = {
    "defaults": "megatron-core",
    "model": {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000},
}


def test_sections_update_keys_then_overrides_apply_and_the_base_stays():
    job = build_job(BASE, "model.num_layers=8", model={"hidden_size": 512}, defaults="megatron-lm")
    assert (job.model.num_layers, job.model.hidden_size, job.model.num_attention_heads) == (8, 512, 4)
    assert job.defaults == "megatron-lm"
    assert BASE["model"]["hidden_size"] == 256 and BASE["defaults"] == "megatron-core"


def test_a_bad_override_is_the_clis_error():
    with pytest.raises(InputError, match=r"^override 'model.num_layers': expected section.key=value"):
        build_job(BASE, "model.num_layers")
