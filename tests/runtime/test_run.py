"""``memtune run``: environment, output, exit status, signals, and the diagnosis on failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from memtune.cli import main

HERE = Path(__file__).parent
FIXTURES = HERE.parent / "diagnose" / "fixtures"
CAPACITY_LOG = FIXTURES / "h200" / "capacity.log"


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_failing_command_is_diagnosed_from_its_saved_output(tmp_path, capfd):
    out = tmp_path / "run"
    code = f"import sys; sys.stderr.write(open({str(CAPACITY_LOG)!r}).read()); sys.exit(1)"
    assert main(["run", "--out", str(out), "--", *python(code)]) == 1
    captured = capfd.readouterr()
    assert (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"
        in (out / "output.log").read_text()
    )
    assert "diagnosis: capacity" in captured.err
    assert json.loads((out / "run.json").read_text())["exit_status"] == 1


def test_the_snapshot_the_hook_wrote_joins_the_diagnosis(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one reason a line
    out = tmp_path / "run"
    code = (
        "import os, shutil, sys\n"
        "d = os.path.join(os.environ['MEMTUNE_RUNTIME_DIR'], 'oom-rank0')\n"
        "os.makedirs(d)\n"
        f"shutil.copy({str(FIXTURES / 'h200' / 'fragmentation-snapshot.pickle')!r}, os.path.join(d, 'oom-snapshot-rank0.pickle'))\n"
        f"sys.stderr.write(open({str(FIXTURES / 'h200' / 'fragmentation.log')!r}).read())\n"
        "sys.exit(1)\n"
    )
    assert main(["run", "--out", str(out), "--", *python(code)]) == 1
    err = capfd.readouterr().err
    snapshot = out / "oom-rank0" / "oom-snapshot-rank0.pickle"
    assert f"snapshot {snapshot}: largest free block 1.00 GiB < request 2.00 GiB" in err
    assert "diagnosis: fragmentation" in err


def test_success_streams_and_saves_both_streams(tmp_path, capfd):
    out = tmp_path / "run"
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"
    assert main(["run", "--out", str(out), "--", *python(code)]) == 0
    captured = capfd.readouterr()
    assert "to stdout" in captured.out and "to stderr" in captured.err
    assert sorted((out / "output.log").read_text().splitlines()) == ["to stderr", "to stdout"]
    assert "diagnos" not in captured.err


def test_exit_status_passes_through(tmp_path):
    assert main(["run", "--out", str(tmp_path / "a"), "--", *python("raise SystemExit(7)")]) == 7
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert main(["run", "--out", str(tmp_path / "b"), "--", *python(killed)]) == 128 + signal.SIGKILL


def test_the_config_sets_the_memory_environment(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    out = tmp_path / "run"
    names = [
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_CUDA_ALLOC_CONF",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "MEMTUNE_RUNTIME_DIR",
    ]
    code = f"import json, os; print(json.dumps({{n: os.environ.get(n) for n in {names!r}}}))"
    assert (
        main(["run", "--config", str(HERE / "configs" / "tp2.yaml"), "--out", str(out), "--", *python(code)])
        == 0
    )
    captured = capfd.readouterr()
    assert json.loads(captured.out.splitlines()[-1]) == {
        "PYTORCH_ALLOC_CONF": "expandable_segments:True",
        "PYTORCH_CUDA_ALLOC_CONF": None,  # inherited, and it would have shadowed the config's setting
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "MEMTUNE_RUNTIME_DIR": str(out),
    }
    assert "PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:64' from your environment dropped" in captured.err


def test_no_command_is_bad_input(capfd):
    assert main(["run", "--"]) == 2
    assert "give the command to run after --" in capfd.readouterr().err


def test_sigterm_reaches_the_child_and_its_status_comes_back(tmp_path):
    out = tmp_path / "run"
    child = (
        "import signal, sys, time\n"
        "def stop(n, f):\n"
        "    print('child got', n, flush=True); sys.exit(5)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1])}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "memtune", "run", "--out", str(out), "--", *python(child)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    assert launcher.stdout is not None
    assert launcher.stdout.readline().strip() == "ready"
    launcher.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert launcher.returncode == 5
    assert f"child got {int(signal.SIGTERM)}" in (out / "output.log").read_text()
