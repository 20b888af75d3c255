"""Megatron-Bridge's own memory-tuning case (skills/nemo-mbridge-perf-memory-tuning): Llama3-70B
SFT FP8 on 32 H100, TP4 PP4 VPP5 DP2, no allocator setting. The field's answer is expandable
segments first; VPP is no memory fix; layer-wise CPU offload is refused with PP > 1; PP 8, TP 8
and mlp recompute each fit at a price. ``memtune fix`` must give that answer with and without the
fragmentation log."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.config import load_job
from memtune.diagnose import diagnose
from memtune.diagnose.advice import fixes_for_failure
from memtune.fix.search import FITS, FixResult

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "llama3-70b-sft-fp8.yaml"
LOG = ROOT / "tests" / "fix" / "fixtures" / "seed-fragmentation.log"


def _with_log() -> FixResult:
    verdict = diagnose([str(LOG)], config=str(SEED)).verdict
    assert verdict.label == "fragmentation"
    return fixes_for_failure(load_job(SEED).job, verdict)


def _without_log() -> FixResult:
    return fixes_for_failure(load_job(SEED).job, None)


@pytest.mark.parametrize("result", [_without_log, _with_log], ids=["no log", "fragmentation log"])
def test_the_field_answer(result):
    result = result()
    # Expandable segments first, at zero cost, under every other suggestion.
    assert result.suggestions[0] is result.lead
    assert result.lead.title == "Turn on expandable segments"
    assert [str(c) for c in result.lead.changes] == ["env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    assert result.lead.throughput_change == 0.0 and result.lead.saved_bytes == 0
    for s in result.suggestions[1:]:
        assert "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in [str(c) for c in s.changes]
    # VPP named as no memory fix, layer-wise CPU offload as refused with PP > 1.
    notes = dict(result.notes)
    assert notes["More virtual pipeline stages"].startswith("VPP is no memory fix")
    assert (
        "Currently there is no support for Pipeline parallelism with CPU offloading"
        in notes["Layer-wise activation offload (model.cpu_offloading)"]
    )
    # PP 8, TP 8 and mlp recompute each fit, each with its saving and its price.
    tried = {t.title: t for t in result.suggestions + result.not_chosen}
    for title in ("8 pipeline stages", "Tensor parallelism 8", "Selective recompute of core_attn, mlp"):
        option = tried[title]
        assert option.status == FITS
        assert option.saved_bytes > 0
        assert option.throughput_change is not None and option.throughput_change < 0
    # Doubling TP costs more than doubling PP (measured: -28.4% and -5.9%).
    assert tried["Tensor parallelism 8"].throughput_change < tried["8 pipeline stages"].throughput_change
    # Megatron-FSDP comes with what Megatron-Bridge asks of it.
    fsdp = tried["Megatron-FSDP (shard weights, gradients and optimizer state)"]
    overrides = [str(c) for c in fsdp.changes]
    assert "checkpoint.ckpt_format=fsdp_dtensor" in overrides
    assert "env.CUDA_DEVICE_MAX_CONNECTIONS=null" in overrides
    assert "ddp.use_distributed_optimizer=true" in overrides


def test_without_a_log_the_job_is_tight_and_says_why():
    result = _without_log()
    assert result.fragmentation is None and result.before.verdict() == "tight"
    assert result.lead.status != FITS  # expandable segments alone leave it tight by the estimate
    assert result.lead.reason.startswith("still tight")
