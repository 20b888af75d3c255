"""MemoryMonitor in one process: its JSONL records, warnings, estimates and CPU behaviour."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from memtune.check import gate
from memtune.config import load_job
from memtune.errors import InputError
from memtune.estimate import estimate
from memtune.runtime import MemoryMonitor, MemoryWarning
from memtune.units import GiB, MiB
from tests.runtime.runtime_fakes import FixedDevice, SeriesStats, step_values

CONFIGS = Path(__file__).parent / "configs"


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_step_records_carry_the_allocator_and_nvml_fields(tmp_path):
    stats = SeriesStats([step_values(3 * GiB, 1 * GiB, 4 * GiB), step_values(5 * GiB, 2 * GiB, 6 * GiB)])
    with MemoryMonitor(tmp_path, stats=stats, device=FixedDevice(7 * GiB, 140 * GiB)) as monitor:
        monitor.step()
        monitor.step()
    records = read(tmp_path / "memtune-monitor-rank0.jsonl")
    assert [r["kind"] for r in records] == ["start", "step", "step"]
    start, first, second = records
    assert start["schema_version"] == 1 and start["world_size"] == 1 and start["nvml"] is True
    assert start["estimate_bytes"] is None and start["config"] is None
    assert (first["step"], second["step"]) == (1, 2)
    assert second["peak_allocated_bytes"] == 5 * GiB
    assert second["allocated_bytes"] == 2 * GiB
    assert second["cached_bytes"] == 4 * GiB  # reserved 6 GiB minus allocated 2 GiB
    assert second["device_used_bytes"] == 7 * GiB and second["device_total_bytes"] == 140 * GiB
    assert second["estimate_difference_bytes"] is None
    assert second["step_seconds"] >= 0
    assert stats.resets == 3  # at the start and after each step


def test_explicit_step_numbers_and_the_resume_marker(tmp_path):
    stats = SeriesStats([step_values(GiB, GiB, GiB)])
    with MemoryMonitor(tmp_path, stats=stats, device=FixedDevice(None, None)) as monitor:
        monitor.mark_resume()
        monitor.step(101)
        monitor.step()
    records = read(tmp_path / "memtune-monitor-rank0.jsonl")
    assert records[1] == {**records[1], "kind": "event", "event": "resume", "step": 1}
    assert [r["step"] for r in records if r["kind"] == "step"] == [101, 102]
    assert records[2]["device_used_bytes"] is None


def test_retries_warn_once_when_they_start_growing(tmp_path):
    steps = [step_values(GiB, GiB, GiB, retries=r) for r in (0, 0, 2, 5)]
    monitor = MemoryMonitor(tmp_path, stats=SeriesStats(steps), device=FixedDevice(None, None))
    with monitor, pytest.warns(MemoryWarning, match="step 3: num_alloc_retries rose from 0 to 2") as caught:
        for _ in steps:
            monitor.step()
    assert len([w for w in caught if "num_alloc_retries" in str(w.message)]) == 1
    events = [r for r in read(tmp_path / "memtune-monitor-rank0.jsonl") if r["kind"] == "event"]
    assert [(e["check"], e["step"]) for e in events] == [("alloc_retries", 3)]


def test_over_estimate_warning_and_difference(tmp_path):
    steps = [step_values(80 * MiB, 0, 0), step_values(92 * MiB, 0, 0)]
    monitor = MemoryMonitor(
        tmp_path,
        estimate_bytes=80 * MiB,
        over_estimate_margin=0.10,
        stats=SeriesStats(steps),
        device=FixedDevice(None, None),
    )
    with monitor, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = monitor.step()
        second = monitor.step()
    assert first["estimate_difference_bytes"] == 0
    assert second["estimate_difference_bytes"] == 12 * MiB
    messages = [str(w.message) for w in caught]
    assert messages == [
        "memtune monitor: rank 0 step 2: peak allocated 92.0 MiB exceeds the estimate 80.0 MiB by 15% (margin 10%)"
    ]


def test_config_gives_the_estimate_of_this_rank(tmp_path):
    config = CONFIGS / "pp2.yaml"
    expected = estimate(gate(load_job(str(config), []).job)).rank(0)
    over = expected.peak_bytes // 5  # 20 %, above the 10 % margin
    steps = [step_values(expected.peak_bytes + over, 0, 0)]
    with (
        MemoryMonitor(
            tmp_path, config=config, stats=SeriesStats(steps), device=FixedDevice(None, None)
        ) as monitor,
        pytest.warns(MemoryWarning, match="exceeds the estimate"),
    ):
        record = monitor.step()
    start = read(tmp_path / "memtune-monitor-rank0.jsonl")[0]
    assert start["estimate_bytes"] == expected.peak_bytes
    assert start["pp_rank"] == 0
    assert start["config"]["model"]["pipeline_model_parallel_size"] == 2
    assert record["estimate_difference_bytes"] == over


def test_gather_without_a_process_group_summarises_this_rank(tmp_path):
    steps = [step_values(g * GiB, 0, 2 * g * GiB) for g in (1, 2, 3, 4)]
    with MemoryMonitor(
        tmp_path, gather_every=2, stats=SeriesStats(steps), device=FixedDevice(None, None)
    ) as monitor:
        for _ in steps:
            monitor.step()
    gathers = [r for r in read(tmp_path / "memtune-monitor-rank0.jsonl") if r["kind"] == "gather"]
    assert [(g["step"], g["peaks"], g["most_loaded_rank"], g["skew_bytes"]) for g in gathers] == [
        (2, {"0": 2 * GiB}, 0, 0),
        (4, {"0": 4 * GiB}, 0, 0),
    ]


def test_on_cpu_the_allocator_fields_are_null_and_a_note_says_why(tmp_path):
    with pytest.warns(MemoryWarning) as caught, MemoryMonitor(tmp_path) as monitor:
        record = monitor.step()
    # Both notes are warned, once each: no MemoryWarning escapes the block.
    assert sorted(str(w.message) for w in caught) == [
        "memtune monitor: CUDA is not available: the allocator fields are null",
        "memtune monitor: no CUDA device: the NVML fields are null",
    ]
    start = read(tmp_path / "memtune-monitor-rank0.jsonl")[0]
    assert start["cuda"] is False and start["nvml"] is False
    assert "CUDA is not available: the allocator fields are null" in start["notes"]
    assert record["peak_allocated_bytes"] is None and record["cached_bytes"] is None


def test_bad_arguments_are_input_errors(tmp_path):
    with pytest.raises(InputError, match=r"gather_every: must be from 1 to 2\^40, got 0"):
        MemoryMonitor(tmp_path, gather_every=0)
    with pytest.raises(InputError, match="give config or estimate_bytes, not both"):
        MemoryMonitor(tmp_path, config="x.yaml", estimate_bytes=1)
    with pytest.raises(RuntimeError, match="before start"):
        MemoryMonitor(tmp_path).step()
    monitor = MemoryMonitor(tmp_path, stats=SeriesStats([{}]), device=FixedDevice(None, None))
    with monitor, pytest.raises(RuntimeError, match="already started"):
        monitor.start()


def test_tensorboard_missing_is_a_clear_message(tmp_path):
    pytest.importorskip("torch")
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("tensorboard is installed here")
    monitor = MemoryMonitor(
        tmp_path, tensorboard_dir=tmp_path / "tb", stats=SeriesStats([{}]), device=FixedDevice(None, None)
    )
    with pytest.raises(InputError, match=r"pip install 'memtune\[tensorboard\]'"):
        monitor.start()
