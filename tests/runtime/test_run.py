"""``memtune run``: environment, output, exit status, signals, and the diagnosis on failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def test_an_earlier_run_is_never_overwritten_without_force(tmp_path, capfd):
    """Issue 29 item 2: `run --out` of an earlier run truncated its output.log and run.json."""
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--", *python("print('first run')")]) == 0
    before = {name: (out / name).read_bytes() for name in ("output.log", "run.json")}
    capfd.readouterr()
    assert main(["run", "--out", str(out), "--", *python("print('second run')")]) == 2
    assert capfd.readouterr().err.splitlines() == [
        f"memtune run: --out {out} holds an earlier run (output.log, run.json); "
        "give a new directory, or --force to replace it"
    ]
    assert {name: (out / name).read_bytes() for name in ("output.log", "run.json")} == before
    assert main(["run", "--out", str(out), "--force", "--", *python("print('second run')")]) == 0
    assert (out / "output.log").read_text() == "second run\n"
    assert json.loads((out / "run.json").read_text())["command"][-1] == "print('second run')"


def test_out_must_be_a_directory(tmp_path, capfd):
    plain = tmp_path / "file"
    plain.write_text("mine\n")
    assert main(["run", "--out", str(plain), "--", "true"]) == 2
    assert capfd.readouterr().err.splitlines() == [f"memtune run: --out {plain}: not a directory"]
    assert plain.read_text() == "mine\n"


def test_default_directories_of_the_same_second_are_distinct(tmp_path, monkeypatch):
    from memtune.runtime.launch import default_out_dir

    monkeypatch.chdir(tmp_path)
    second = time.strptime("2026-12-01 21:30:05", "%Y-%m-%d %H:%M:%S")
    made = [default_out_dir(second) for _ in range(3)]
    assert made == [
        Path("memtune-run-20261201-213005"),
        Path("memtune-run-20261201-213005-2"),
        Path("memtune-run-20261201-213005-3"),
    ]
    assert all(p.is_dir() for p in made)


def test_default_directory_is_made_by_run(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--", *python("print('a')")]) == 0
    assert main(["run", "--", *python("print('b')")]) == 0
    logs = sorted(p.read_text() for p in tmp_path.glob("memtune-run-*/output.log"))
    assert logs == ["a\n", "b\n"]


def test_errors_name_the_run_command(tmp_path, capfd):
    """Issue 29 item 7: the prefix was `memtune ['--', 'cmd', ...]:`."""
    missing = str(tmp_path / "no-such-program")
    assert main(["run", "--out", str(tmp_path / "run"), "--", missing, "--flag"]) == 2
    err = capfd.readouterr().err.splitlines()
    assert err[-1] == f"memtune run: cannot start {missing!r}: No such file or directory"
    assert not (tmp_path / "run" / "output.log").exists()  # nothing of a run to keep


def test_binary_output_keeps_the_commands_status(tmp_path, capfd):
    """Issue 29 item 6: diagnose refusing the binary log turned the child's status into 2."""
    out = tmp_path / "run"
    code = "import sys; sys.stdout.buffer.write(bytes(range(256)) * 400); sys.exit(3)"
    assert main(["run", "--out", str(out), "--", *python(code)]) == 3
    assert f"memtune run: no diagnosis: {out / 'output.log'}: skipped: binary data, not a text log" in (
        capfd.readouterr().err.splitlines()
    )
    assert (out / "output.log").read_bytes() == bytes(range(256)) * 400


def test_output_without_newlines_is_written_in_bounded_pieces():
    from memtune.limits import OUTPUT_CHUNK_BYTES
    from memtune.runtime.launch import LineSink

    class Recorder:
        def __init__(self) -> None:
            self.writes: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.writes.append(data)

    target = Recorder()
    sink = LineSink(target)  # type: ignore[arg-type]
    piece = b"x" * 1000
    for _ in range(300):
        sink.write(piece)
        assert len(sink.pending) < OUTPUT_CHUNK_BYTES
    sink.write(b"end\nhalf")
    sink.finish()
    assert b"".join(target.writes) == piece * 300 + b"end\nhalf"
    assert max(len(w) for w in target.writes) < OUTPUT_CHUNK_BYTES + len(piece)
    assert target.writes[-1] == b"half"


def test_a_reused_directory_does_not_diagnose_with_an_earlier_runs_snapshot(tmp_path, capfd):
    out = tmp_path / "run"
    earlier = out / "oom-rank0" / "oom-snapshot-rank0.pickle"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes((FIXTURES / "h200" / "fragmentation-snapshot.pickle").read_bytes())
    os.utime(earlier, (time.time() - 3600, time.time() - 3600))  # an hour old: not this run's
    (out / "output.log").write_text("the earlier run\n")
    code = f"import sys; sys.stderr.write(open({str(CAPACITY_LOG)!r}).read()); sys.exit(1)"
    assert main(["run", "--out", str(out), "--force", "--", *python(code)]) == 1
    err = capfd.readouterr().err
    assert "diagnosis: capacity" in err and "snapshot" not in err


def test_a_blank_out_name_is_refused(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a blank name would have meant this directory
    for name in ("", "  "):
        assert main(["run", "--out", name, "--", "true"]) == 2
        assert capfd.readouterr().err.splitlines() == [f"memtune run: --out {name!r}: give a directory name"]
    assert list(tmp_path.iterdir()) == []


def test_memtune_failing_while_it_runs_a_command_does_not_leave_it_running():
    from memtune.runtime.launch import Supervisor

    class Failing:
        seen = b""

        def write(self, data: bytes) -> None:
            Failing.seen += data
            raise RuntimeError("a bug in memtune")

        def finish(self) -> None:
            pass

    def hung(signum, frame):
        raise AssertionError("memtune waited for the command it should have killed")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)  # stops the test if the command was left running (it sleeps 120 s)
    try:
        with Supervisor() as supervisor, pytest.raises(RuntimeError, match="a bug in memtune"):
            supervisor.run(["sh", "-c", "echo $$; exec sleep 120"], None, None, [Failing()], [])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not Path(f"/proc/{int(Failing.seen)}").exists()  # killed and reaped


def test_force_without_out_is_refused(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--force", "--", "true"]) == 2
    assert capfd.readouterr().err.splitlines() == [
        "memtune run: --force replaces an earlier run in --out DIR; without --out the directory is new"
    ]
    assert list(tmp_path.iterdir()) == []
