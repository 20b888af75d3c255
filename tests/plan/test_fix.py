"""memtune fix proposes only changes memtune check accepts, that make the failing rank fit."""

from memtune.check import gate
from memtune.config import load_job
from memtune.config.changes import Change, with_changes
from memtune.estimate import estimate
from memtune.fix.changes import options
from memtune.fix.search import find_fixes

EXAMPLE = "examples/llama3-70b-sft.yaml"


def _failing():
    # The bundled example with an unfused SwiGLU, without its recompute and with the default
    # allocator does not fit.
    return load_job(
        EXAMPLE,
        [
            "model.bias_activation_fusion=false",
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


def test_no_layer_wise_cpu_offload_with_pp_and_no_allocator_fix_for_capacity():
    # Megatron-Core refuses cpu_offloading with PP > 1 (transformer_config.py); fine-grained
    # activation offloading has no such limit and is proposed at PP 4.
    result = find_fixes(_failing(), fragmentation=False)
    changed = {c.key for s in result.suggestions for c in s.changes}
    assert "model.cpu_offloading" not in changed and not any(k.startswith("env.") for k in changed)
    # Estimated, not refused: here it saves 6.01 GiB, short of what the verdict's margin needs.
    assert (
        "Fine-grained activation offload of qkv_linear, core_attn, attn_proj, mlp_norm",
        "not enough: saves 6.01 GiB, still tight",
    ) in result.not_chosen
    assert (
        "Layer-wise activation offload (model.cpu_offloading)",
        "Megatron-Core refuses it with PP > 1 (check OFF001); fine-grained offloading is tried instead",
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


def test_offload_without_manual_gc_is_fixed_first_by_collecting_before_training():
    # The replaced offloading optimizer's fp32 copies (estimate/state.py) are the cheapest saving.
    offload = [
        "model.bias_activation_fusion=false",
        "optimizer.use_precision_aware_optimizer=true",
        "optimizer.optimizer_cpu_offload=true",
        "optimizer.optimizer_offload_fraction=0.5",
        "cluster.gpu_memory_gib=68",
    ]
    job = load_job(EXAMPLE, offload).job
    before = estimate(gate(job))
    assert before.verdict() != "fits"
    best = find_fixes(job, fragmentation=False).suggestions[0]
    assert [c.key for c in best.changes] == ["train.manual_gc"]
    assert best.saved_bytes == round(before.worst.state.orphaned_optimizer_copies)
    assert best.throughput_change == 0.0
    collected = with_changes(job, [Change("train.manual_gc", True)])
    assert not any(r.family == "manual-gc" for r in options(collected))
