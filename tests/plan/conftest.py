import pytest

from memtune.plan.query import Query, base_job


@pytest.fixture(scope="module")
def dense_base():
    """Llama-3 8B on 16 H100s: a search space small enough for tests."""
    return base_job(Query("llama3-8b", 16, "H100-80GB", 8, 4096, 64, "pretrain"))


@pytest.fixture(scope="module")
def moe_lora_base():
    """Qwen3-30B-A3B LoRA on 16 H100s: experts, ETP and LoRA re-gather in the space."""
    return base_job(Query("qwen3-30b-a3b", 16, "H100-80GB", 8, 4096, 32, "lora"))
