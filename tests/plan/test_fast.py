"""The search's cached fast path gives exactly the estimator's numbers."""

import pytest

from memtune.catalog.gpus import capacity_bytes
from memtune.check import gate
from memtune.config.changes import Change, job_data, with_changes
from memtune.config.derived import derive
from memtune.errors import InputError
from memtune.estimate import estimate
from memtune.perf import layout_of
from memtune.plan.fast import FastEstimator, job_of
from memtune.plan.query import Query, base_job
from memtune.plan.search import layout_of_candidate


@pytest.fixture(scope="module")
def moe_offload_base():
    """Qwen3-30B-A3B pretraining with fine-grained activation offloading of the experts and
    attention (a per-rank margin and pipelined reloads the fast path must reproduce)."""
    base = base_job(Query("qwen3-30b-a3b", 16, "H100-80GB", 8, 4096, 32, "pretrain"))
    changes = [
        Change("model.fine_grained_activation_offloading", True),
        Change("model.offload_modules", ["core_attn", "attn_proj", "mlp_norm", "expert_fc1"]),
        Change("model.activation_offload_fraction", 0.7),
    ]
    return with_changes(base, changes)


@pytest.mark.parametrize("which", ["dense_base", "moe_lora_base", "moe_offload_base"])
def test_fast_path_equals_estimate_on_random_candidates(which, request, sample):
    base = request.getfixturevalue(which)
    fast = FastEstimator(base, capacity_bytes(base.cluster.gpu, base.cluster.gpu_memory_gib))
    compared = 0
    for c in sample(base, 60, seed=11):
        try:
            est = estimate(gate(with_changes(base, c.changes(base))))
        except InputError:
            continue
        got = fast.evaluate(c)
        want = est.worst
        assert (got.worst.pp_rank, got.worst.peak_bytes, got.peak_bytes) == (
            want.pp_rank,
            want.peak_bytes,
            want.peak_bytes,
        )
        assert got.worst.state == want.state
        assert got.worst.activations == want.activations and got.worst.transient == want.transient
        assert got.worst.in_flight == want.in_flight and got.worst.peak_phase == want.peak_phase
        assert got.needed_bytes == est.needed_bytes(want) and got.verdict == est.verdict()
        # Stopping early at an over-full rank never changes whether the layout fits.
        assert (fast.evaluate(c, stop_when_over=True).verdict == "fits") == (est.verdict() == "fits")
        compared += 1
    assert compared >= 30


def test_unvalidated_job_equals_validated_job(dense_base, sample):
    for c in sample(dense_base, 40, seed=3):
        assert job_data(job_of(dense_base, c)) == job_data(with_changes(dense_base, c.changes(dense_base)))


def test_throughput_layout_of_candidate_equals_layout_of_job(moe_lora_base, sample):
    d = derive(moe_lora_base)
    for c in sample(moe_lora_base, 40, seed=5):
        job_d = derive(with_changes(moe_lora_base, c.changes(moe_lora_base)))
        assert layout_of_candidate(d, c, job_d.layers_per_stage) == layout_of(job_d)
