"""Optimizer offload without manual GC: the measured peak is judged against the estimate's range."""

from __future__ import annotations

import pytest

from memtune.bench.accuracy import RunResult, collection_range, evaluate

GiB = 2**30


def run(measured: float, estimated: float, collected: float, run_id: str = "ooff-x") -> RunResult:
    return RunResult(
        id=run_id,
        split="tune",
        pp_rank=0,
        measured=round(measured * GiB),
        estimated=round(estimated * GiB),
        megatron_lm=0,
        collected=round(collected * GiB),
    )


@pytest.mark.parametrize(
    ("measured", "outside"),
    [(10.0, 0.0), (12.0, 0.0), (11.0, 0.0), (12.5, 0.5 / 12.5), (9.5, 0.5 / 9.5)],
)
def test_distance_outside_the_range_is_relative_to_the_measured_peak(measured, outside):
    assert run(measured, estimated=12.0, collected=10.0).outside_collection_range == pytest.approx(outside)


def test_the_range_reports_the_run_farthest_outside():
    summary = collection_range(
        [run(11.0, 12.0, 10.0, "a"), run(12.6, 12.0, 10.0, "b"), run(9.9, 12.0, 10.0, "c")]
    )
    assert summary is not None
    assert (summary.runs, summary.worst_id) == (3, "b")
    assert summary.worst_outside == pytest.approx(0.6 / 12.6)
    assert collection_range([]) is None


def test_manual_gc_removes_the_replaced_optimizers_copies_from_the_estimate():
    config = {
        "defaults": "megatron-core",
        "model": {
            "num_layers": 4,
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "vocab_size": 32000,
            "seq_length": 2048,
            "bf16": True,
        },
        "optimizer": {
            "use_distributed_optimizer": True,
            "use_precision_aware_optimizer": True,
            "optimizer_cpu_offload": True,
            "optimizer_offload_fraction": 0.5,
        },
        "ddp": {"use_distributed_optimizer": True},
        "cluster": {"num_gpus": 4},
    }
    automatic = evaluate({"id": "a", "config": config, "rank": 0, "measured": {"peak_allocated_bytes": GiB}})
    manual = evaluate(
        {
            "id": "m",
            "config": {**config, "train": {"manual_gc": True}},
            "rank": 0,
            "measured": {"peak_allocated_bytes": GiB},
        }
    )
    assert automatic.collected < automatic.estimated
    assert manual.collected == manual.estimated == automatic.collected
