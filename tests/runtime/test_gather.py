"""Aggregation over ranks: two Gloo processes gather their summaries to rank 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtune.check import gate
from memtune.config import load_job
from memtune.errors import InputError
from memtune.estimate import estimate
from memtune.runtime import MemoryMonitor
from memtune.units import GiB

CONFIGS = Path(__file__).parent / "configs"


def spawn_two(tmp_path: Path, config: str | None) -> Path:
    mp = pytest.importorskip("torch.multiprocessing")
    from tests.runtime.gloo_worker import monitored_rank

    out = tmp_path / "monitor"
    mp.spawn(monitored_rank, args=(str(tmp_path / "init"), str(out), config), nprocs=2, join=True)
    return out


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rank0_gathers_the_most_loaded_rank_and_the_skew(tmp_path):
    out = spawn_two(tmp_path, str(CONFIGS / "pp2.yaml"))
    rank0, rank1 = read(out / "memtune-monitor-rank0.jsonl"), read(out / "memtune-monitor-rank1.jsonl")
    assert [r["kind"] for r in rank1] == ["start"] + ["step"] * 6  # only rank 0 writes gathers
    gathers = [r for r in rank0 if r["kind"] == "gather"]
    assert [(g["step"], g["peaks"], g["most_loaded_rank"], g["skew_bytes"]) for g in gathers] == [
        (3, {"0": 3 * GiB, "1": 7 * GiB}, 1, 4 * GiB),
        (6, {"0": 6 * GiB, "1": 10 * GiB}, 1, 4 * GiB),
    ]
    assert gathers[0]["reserved"] == {"0": 4 * GiB, "1": 8 * GiB}
    # Each rank wrote its own stage's estimate beside its measurement.
    est = estimate(gate(load_job(str(CONFIGS / "pp2.yaml"), []).job))
    for records, rank in ((rank0, 0), (rank1, 1)):
        start = records[0]
        assert (start["world_size"], start["pp_rank"]) == (2, rank)
        assert start["estimate_bytes"] == est.rank(rank).peak_bytes
        last = records[-1] if records[-1]["kind"] == "step" else records[-2]
        assert last["estimate_difference_bytes"] == last["peak_allocated_bytes"] - est.rank(rank).peak_bytes


def test_a_config_of_another_world_size_is_refused(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        with pytest.raises(InputError, match="describes world size 2, this run has 1"):
            MemoryMonitor(tmp_path, config=CONFIGS / "pp2.yaml").start()
    finally:
        dist.destroy_process_group()
