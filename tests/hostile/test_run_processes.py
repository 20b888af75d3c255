"""Issue 29 items 3 and 4 for `memtune run`, in subprocesses: a closed or full stdout, grandchildren
that keep the pipe open, SIGHUP, and a command that ignores Ctrl-C. No process is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
LINES = 50_000  # about 0.6 MB: far more than a pipe holds (64 KiB), so a dead pump would block the command


def memtune_run(out: Path, code: str, **popen: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "memtune", "run", "--out", str(out), "--", sys.executable, "-c", code],
        env=ENV,
        start_new_session=True,
        **popen,  # type: ignore[call-overload]
    )


def communicate(proc: subprocess.Popen[bytes], seconds: float = 60) -> tuple[bytes, bytes]:
    """Its output; a memtune that does not end is killed, so a failing test leaves nothing behind."""
    try:
        out, err = proc.communicate(timeout=seconds)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out or b"", err or b""


def finish(proc: subprocess.Popen[bytes], seconds: float = 60) -> int:
    try:
        return proc.wait(timeout=seconds)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_for(path: Path, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


PRINT_LINES = f"import sys\nfor i in range({LINES}): print('line', i)\nsys.exit(4)\n"


def test_a_reader_that_closes_early_does_not_stop_the_command(tmp_path):
    """`memtune run -- cmd | head -1`: the pump used to die on EPIPE and the command then blocked."""
    proc = memtune_run(tmp_path / "run", PRINT_LINES, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()
    assert finish(proc) == 4
    log = (tmp_path / "run" / "output.log").read_text().splitlines()
    assert len(log) == LINES and log[-1] == f"line {LINES - 1}"


def test_a_full_stdout_is_reported_and_the_log_is_complete(tmp_path):
    with open("/dev/full", "wb") as full:
        proc = memtune_run(tmp_path / "run", PRINT_LINES, stdout=full, stderr=subprocess.PIPE)
        _, err = communicate(proc)
    assert proc.returncode == 4
    out = tmp_path / "run"
    assert (
        f"memtune run: the command's output could not be written to stdout (No space left on device); "
        f"it is all in {out / 'output.log'}"
    ) in err.decode().splitlines()
    assert len((out / "output.log").read_text().splitlines()) == LINES


def test_run_ends_when_its_command_ends_and_stops_what_it_left_running(tmp_path):
    """A background grandchild holding the pipe used to keep `run` waiting for it."""
    pids = tmp_path / "pids"
    code = (
        "import subprocess, sys\n"
        "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{helper.pid}}\\n')\n"
        "print('done', flush=True)\n"
        "sys.exit(3)\n"
    )
    proc = memtune_run(tmp_path / "run", code, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out, _ = communicate(proc)
    assert proc.returncode == 3 and out == b"done\n"
    helper = int(wait_for(pids))
    deadline = time.monotonic() + 10  # its SIGTERM is delivered asynchronously
    while alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(helper)


def test_sighup_reaches_the_command(tmp_path):
    ready = tmp_path / "ready"
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGHUP, lambda n, f: sys.exit(6))\n"
        f"open({str(ready)!r}, 'w').write('ready\\n')\n"
        "time.sleep(60)\n"
    )
    proc = memtune_run(tmp_path / "run", code, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(ready)
    proc.send_signal(signal.SIGHUP)
    assert finish(proc) == 6


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_kills_a_command_that_ignores_the_first(second, tmp_path):
    ready = tmp_path / "ready"
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(ready)!r}, 'w').write(f'{{os.getpid()}}\\n')\n"
        "time.sleep(60)\n"
    )
    proc = memtune_run(tmp_path / "run", code, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = int(wait_for(ready))
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: memtune's group; the command has its own
    time.sleep(0.3)
    assert proc.poll() is None and alive(child)  # ignored, as the command asked
    os.killpg(proc.pid, second)
    assert finish(proc) == 128 + signal.SIGKILL
    assert not alive(child)


def test_run_ends_even_when_a_process_that_left_the_group_holds_the_pipe(tmp_path):
    """A daemon (setsid) keeps the output pipe open and cannot be reached through the group:
    `run` stops waiting for it after the grace and ends with the command's status."""
    pids = tmp_path / "pids"
    code = (
        "import subprocess, sys\n"
        "daemon = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{daemon.pid}}\\n')\n"
        "sys.exit(9)\n"
    )
    proc = memtune_run(tmp_path / "run", code, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        communicate(proc)
        assert proc.returncode == 9
    finally:
        os.kill(int(wait_for(pids)), signal.SIGKILL)  # the command's own daemon: this test cleans it up
