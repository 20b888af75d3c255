import random

import pytest

from memtune.config.derived import derive
from memtune.plan.query import Query, base_job
from memtune.plan.space import default_space, layouts, pruned


@pytest.fixture(scope="module")
def dense_base():
    """Llama-3 8B on 16 H100s: a search space small enough for tests."""
    return base_job(Query("llama3-8b", 16, "H100-80GB", 8, 4096, 64, "pretrain"))


@pytest.fixture(scope="module")
def moe_lora_base():
    """Qwen3-30B-A3B LoRA on 16 H100s: experts, ETP and LoRA re-gather in the space."""
    return base_job(Query("qwen3-30b-a3b", 16, "H100-80GB", 8, 4096, 32, "lora"))


@pytest.fixture(scope="module")
def uneven_base():
    """Llama-3 8B (32 layers) on 24 H100s: PP 3, 6, 12 and 24 split the layers only with
    explicit first/last stage sizes or an explicit layout."""
    return base_job(Query("llama3-8b", 24, "H100-80GB", 8, 4096, 48, "pretrain"))


@pytest.fixture
def sample():
    return sample_candidates


def sample_candidates(base, n, seed, want_pruned=False):
    """``n`` random candidates (pruned ones, or ones arithmetic lets through), drawn group by group
    so that a test need not enumerate the whole space."""
    d = derive(base)
    rng = random.Random(seed)
    groups = list(layouts(d, default_space(d)))
    out = []
    for _ in range(50 * n):
        c = rng.choice(rng.choice(groups).members)
        if bool(pruned(d, c, d.global_batch_size)) == want_pruned and c not in out:
            out.append(c)
            if len(out) == n:
                break
    return out
