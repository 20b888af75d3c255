"""memtune fix proposes only changes memtune check accepts, that make the failing rank fit."""

from memtune.check import gate
from memtune.config import load_job
from memtune.config.changes import Change, with_changes
from memtune.estimate import estimate
from memtune.fix.changes import options
from memtune.fix.search import find_fixes

EXAMPLE = "examples/llama3-70b-sft.yaml"


def _failing():
    # The bundled example without its recompute and with the default allocator does not fit.
    return load_job(
        EXAMPLE,
        [
            "model.recompute_granularity=null",
            "model.recompute_method=null",
            "model.recompute_num_layers=null",
            "env.PYTORCH_CUDA_ALLOC_CONF=null",
        ],
    ).job


def test_every_suggestion_passes_check_and_fits():
    job = _failing()
    assert estimate(gate(job)).verdict() != "fits"
    result = find_fixes(job)
    assert result.suggestions
    for s in result.suggestions:
        est = estimate(gate(with_changes(job, list(s.changes))))
        assert est.verdict() == "fits"
        assert (
            s.saved_bytes == estimate(gate(job)).worst.peak_bytes - est.ranks[result.failing_rank].peak_bytes
        )


def test_no_cpu_offload_with_pp_and_no_allocator_fix_for_capacity():
    result = find_fixes(_failing(), fragmentation=False)
    families = {r.family for s in result.suggestions for r in s.remedies}
    assert "activation-offload" not in families and "allocator" not in families
    assert (
        "Activation offload to the CPU",
        "CPU offload is impossible with PP > 1 (check OFF001)",
    ) in result.not_chosen


def test_fragmentation_gets_expandable_segments_except_with_nccl_user_buffers():
    job = _failing()
    assert any(r.family == "allocator" for r in options(job))
    ub = with_changes(job, [Change("env.use_nccl_ub", True)])
    assert not any(r.family == "allocator" for r in options(ub))


def test_a_logged_shortfall_must_be_saved_too():
    # The example fits by the estimate; a log that says the run was 12 GiB short raises the bar.
    job = load_job(EXAMPLE).job
    result = find_fixes(job, fragmentation=False, min_saving=12 * 2**30)
    assert result.suggestions
    assert all(s.saved_bytes >= 12 * 2**30 for s in result.suggestions)
