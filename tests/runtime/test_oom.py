"""The OOM snapshot writer and the capture hook (the CUDA path runs in benchmarks/gpu/runtime_overhead.py)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

from memtune.runtime import capture_oom, write_snapshot
from memtune.runtime import oom as oom_module


def test_snapshot_goes_through_a_temporary_file_and_a_rename(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def replace(source, target):
        seen.append((os.path.dirname(source), os.path.basename(source), os.path.exists(target)))
        real_replace(source, target)

    monkeypatch.setattr(oom_module.os, "replace", replace)
    snapshot = {"segments": [{"total_size": 1 << 20}], "device_traces": [[]]}
    path = write_snapshot(snapshot, tmp_path, rank=3)
    assert path == tmp_path / "oom-rank3" / "oom-snapshot-rank3.pickle"
    [(directory, temporary, target_existed)] = seen
    assert directory == str(path.parent)  # same file system, so the rename is atomic
    assert temporary.startswith(".memtune-") and temporary.endswith(".tmp")
    assert target_existed is False
    assert pickle.loads(path.read_bytes()) == snapshot
    assert os.listdir(path.parent) == ["oom-snapshot-rank3.pickle"]


def test_a_failed_write_leaves_the_previous_snapshot_and_no_temporary(tmp_path):
    path = write_snapshot({"first": 1}, tmp_path, rank=0)
    with pytest.raises((pickle.PicklingError, AttributeError)):
        write_snapshot({"unpicklable": lambda: None}, tmp_path, rank=0)
    assert pickle.loads(path.read_bytes()) == {"first": 1}
    assert os.listdir(path.parent) == ["oom-snapshot-rank0.pickle"]


def test_capture_without_cuda_records_nothing_and_lets_errors_through(tmp_path):
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="boom"), capture_oom(tmp_path, max_entries=10) as hook:
        assert hook.active is False
        raise ValueError("boom")
    assert not list(tmp_path.iterdir())

    @capture_oom(tmp_path)
    def train(x: int) -> int:
        return x + 1

    assert train(1) == 2
    with pytest.raises(ValueError, match="max_entries: must be from 1 to 10000000, got 0"):
        capture_oom(tmp_path, max_entries=0)


def test_importing_the_runtime_does_not_import_torch():
    code = "import sys, memtune.runtime, memtune.runtime.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
