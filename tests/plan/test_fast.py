"""The search's cached fast path gives exactly the estimator's numbers."""

from functools import cached_property

import pytest

from memtune.catalog.gpus import capacity_bytes, get_gpu
from memtune.check import gate
from memtune.config.changes import Change, job_data, with_changes
from memtune.config.derived import Derived, derive
from memtune.config.knobs import SHARDINGS, Knobs, Recompute
from memtune.errors import InputError
from memtune.estimate import estimate
from memtune.perf import constants as K
from memtune.perf.step import StepPricer, predict_step
from memtune.plan.fast import FastEstimator
from memtune.plan.query import Query, base_job
from memtune.plan.space import changes_of


@pytest.fixture(scope="module")
def moe_offload_base():
    """Qwen3-30B-A3B pretraining with fine-grained activation offloading of the experts and
    attention (a per-rank margin and pipelined reloads the fast path must reproduce)."""
    base = base_job(Query("qwen3-30b-a3b", 16, "H100-80GB", 8, 4096, 32, "pretrain"))
    changes = [
        Change("model.fine_grained_activation_offloading", True),
        Change("model.offload_modules", ["core_attn", "attn_proj", "mlp_norm", "expert_fc1"]),
        Change("model.activation_offload_fraction", 0.7),
        Change("env.NVTE_CPU_OFFLOAD_V1", "1"),  # Megatron-Bridge's requirement (check OFF009)
    ]
    return with_changes(base, changes)


@pytest.fixture(scope="module")
def resuming_base(dense_base):
    """The dense base resuming from a torch_dist checkpoint: the verdict judges each rank's
    larger of training and resume (``Estimate.verdict_peak_bytes``)."""
    return with_changes(dense_base, [Change("checkpoint.load", "/ckpt")])


@pytest.mark.parametrize(
    "which", ["dense_base", "moe_lora_base", "moe_offload_base", "uneven_base", "resuming_base"]
)
def test_fast_path_equals_estimate_on_random_candidates(which, request, sample):
    base = request.getfixturevalue(which)
    fast = FastEstimator(base, capacity_bytes(base.cluster.gpu, base.cluster.gpu_memory_gib))
    compared = 0
    for c in sample(base, 60, seed=11):
        try:
            est = estimate(gate(with_changes(base, changes_of(base, c))))
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


def test_a_state_beyond_the_gpu_skips_the_estimate_of_a_layout_that_cannot_fit(dense_base):
    fast = FastEstimator(
        dense_base, capacity_bytes(dense_base.cluster.gpu, dense_base.cluster.gpu_memory_gib)
    )
    # Llama-3 8B replicated by DDP: 8.03e9 parameters x (2 bf16 weight + 2 bf16 gradient + 12
    # optimizer) bytes = 119.7 GiB of state, beyond the 79.1 GiB of an H100
    ddp = Knobs(1, 1, 1, 1, 1, 1, 1, False, Recompute(), "ddp", 0.0, 0, False)
    assert fast.state_exceeds(ddp) and fast.evaluate(ddp).verdict == "does not fit"
    # Megatron-FSDP over 16 ranks keeps 9.4 GiB of it: the estimate decides
    fsdp = Knobs(1, 1, 1, 1, 1, 1, 1, False, Recompute(), "fsdp", 0.0, 0, False)
    assert not fast.state_exceeds(fsdp)


@pytest.mark.parametrize("which", ["dense_base", "moe_lora_base", "uneven_base"])
def test_a_state_beyond_the_gpu_never_fits(which, request, sample):
    base = request.getfixturevalue(which)
    fast = FastEstimator(base, capacity_bytes(base.cluster.gpu, base.cluster.gpu_memory_gib))
    for c in sample(base, 80, seed=13):
        if fast.state_exceeds(c):
            assert fast.evaluate(c).verdict != "fits", c.label()


@pytest.mark.parametrize("which", ["dense_base", "uneven_base"])
def test_unvalidated_job_equals_validated_job(which, request, sample):
    base = request.getfixturevalue(which)
    d = derive(base)
    splits = set()
    for c in sample(base, 40, seed=3):
        view = d.with_knobs(c)
        assert job_data(view.job) == job_data(with_changes(base, changes_of(base, c)))
        assert derive(view.job).knobs == c
        splits.add(c.split)
    if which == "uneven_base":
        assert {"uneven", "layout"} <= splits


@pytest.mark.parametrize("which", ["dense_base", "moe_lora_base", "uneven_base"])
def test_planner_price_equals_the_step_model_of_the_job(which, request, sample):
    """The search prices a candidate's view with a ``StepPricer`` that keeps each price under
    the knobs it declares (``SHAPE_KNOBS``, ``PASS_KNOBS``, ...): the same step, field by field,
    as ``predict_step`` of the gated job, which keeps nothing."""
    base = request.getfixturevalue(which)
    d = derive(base)
    pricer = StepPricer(get_gpu(base.cluster.gpu), K.MEGATRON_LM_LOOP, reuse=True)
    compared = fsdp = 0
    for c in sample(base, 60, seed=5):
        try:
            checked = gate(with_changes(base, changes_of(base, c)))
        except InputError:
            continue
        mine = predict_step(d.with_knobs(c), pricer=pricer, record_events=True)
        assert mine == predict_step(checked.derived, record_events=True), c.label()
        compared += 1
        fsdp += c.sharding == "fsdp"
    assert compared >= 25 and fsdp >= 3


DERIVED_FACTS = [name for name, value in vars(Derived).items() if isinstance(value, cached_property)]


@pytest.mark.parametrize("which", ["dense_base", "moe_lora_base"])
def test_a_candidates_view_has_every_fact_of_its_validated_job(which, request, sample):
    base = request.getfixturevalue(which)
    d = derive(base)
    assert {"knobs", "dp", "num_microbatches", "recomputed_layers_per_chunk", "chunks"} <= set(DERIVED_FACTS)
    for c in sample(base, 25, seed=13):
        view, job = d.with_knobs(c), derive(with_changes(base, changes_of(base, c)))
        for name in DERIVED_FACTS:
            assert getattr(view, name) == getattr(job, name), (c.label(), name)


def test_megatron_fsdp_buckets_are_not_taken_from_a_sibling_without_fsdp(dense_base):
    """Regression: the fast path keyed chunk activations without the sharding, so a Megatron-FSDP
    candidate reused the activations of its DDP sibling and lost its gradient buckets (TP1 PP2
    CP2 MBS1 of Llama-3 8B on 16 GPUs: 17.3 GiB instead of the estimate's 21.0 GiB)."""
    d = derive(dense_base)
    fast = FastEstimator(
        dense_base, capacity_bytes(dense_base.cluster.gpu, dense_base.cluster.gpu_memory_gib)
    )
    siblings = [
        Knobs(1, 2, 1, 2, 1, 1, 1, False, Recompute(), sharding, 0.0, 0, False) for sharding in SHARDINGS
    ]
    for c in siblings:
        want = estimate(gate(with_changes(dense_base, changes_of(dense_base, c)))).worst.peak_bytes
        assert fast.evaluate(c).peak_bytes == want, c.sharding
    assert d.with_knobs(siblings[-1]).fsdp_strategy == "optim_grads_params"


def test_an_fsdp_candidate_is_predicted_with_fsdps_gradient_dtype(dense_base):
    """Regression: the planner predicted a Megatron-FSDP candidate with the base job's gradient
    dtype (fp32 with ``grad_reduce_in_fp32``), which Megatron-FSDP ignores (Derived.grad_dtype)."""
    base = with_changes(dense_base, [Change("ddp.grad_reduce_in_fp32", True)])
    c = Knobs(1, 2, 1, 2, 1, 1, 1, False, Recompute(), "fsdp", 0.0, 0, False)
    view = derive(base).with_knobs(c)
    assert (derive(base).grad_dtype, view.grad_dtype) == ("fp32", "bf16")
    checked = gate(with_changes(base, changes_of(base, c)))
    assert predict_step(view) == predict_step(checked.derived)
