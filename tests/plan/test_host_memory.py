"""The planner's fast path judges host memory and the save phase as ``estimate`` does, so
``plan`` never ranks a layout whose node RAM is exceeded."""

from __future__ import annotations

from memtune.catalog.gpus import capacity_bytes
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.errors import InputError
from memtune.estimate import HOST_VERDICT, estimate
from memtune.plan.fast import FastEstimator
from memtune.plan.query import Query, base_job
from memtune.plan.space import changes_of


def _offloading(base, host_gib):
    job = with_changes(
        base,
        [
            Change("cluster.host_memory_gib", host_gib),
            Change("optimizer.use_distributed_optimizer", True),
            Change("ddp.use_distributed_optimizer", True),
            Change("optimizer.optimizer_cpu_offload", True),
            Change("optimizer.use_precision_aware_optimizer", True),
        ],
    )
    return job


def test_a_layout_beyond_the_nodes_ram_does_not_fit_in_the_fast_path_either():
    base = base_job(Query("llama3-8b", 8, "H100-80GB", 8, 4096, 64, "pretrain"))
    roomy, tiny = _offloading(base, 2048.0), _offloading(base, 8.0)
    fast = FastEstimator(tiny, capacity_bytes(tiny.cluster.gpu, None))
    knobs = gate(tiny).derived.knobs
    est = estimate(gate(tiny))
    assert not est.host_fits and est.verdict() == HOST_VERDICT
    assert fast.evaluate(knobs).verdict == HOST_VERDICT
    assert fast.evaluate(knobs, stop_when_over=True).verdict != "fits"
    roomy_fast = FastEstimator(roomy, capacity_bytes(roomy.cluster.gpu, None))
    assert roomy_fast.evaluate(gate(roomy).derived.knobs).verdict == estimate(gate(roomy)).verdict()


def test_the_fast_path_judges_the_save_phase(sample):
    base = base_job(Query("llama3-8b", 8, "H100-80GB", 8, 4096, 64, "pretrain"))
    saving = with_changes(
        base,
        [Change("checkpoint.save", "/ckpt"), Change("checkpoint.dist_ckpt_optim_fully_reshardable", True)],
    )
    fast = FastEstimator(saving, capacity_bytes(saving.cluster.gpu, None))
    compared = 0
    for c in sample(saving, 40, seed=5):
        try:
            est = estimate(gate(with_changes(saving, changes_of(saving, c))))
        except InputError:  # a candidate memtune check refuses
            continue
        got = fast.evaluate(c)
        assert got.needed_bytes == est.needed_bytes(est.worst) and got.verdict == est.verdict()
        compared += 1
    assert compared >= 15
