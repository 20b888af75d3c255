"""CPU time and memory of every command on every hostile input of the tests (tests/hostile/):
each must finish within a few seconds of CPU and a few hundred MB, however the input is built.
The tests check only how each run ends (status, no traceback, bounded error lines); time and
memory limits live here, measured in CPU seconds, so a loaded machine does not make them fail.

Two parts:

- the corpus of configs, logs and snapshots (tests/hostile/make_corpus.py), each command run
  in this process (CPU seconds of this process);
- the third campaign's surfaces (tests/hostile/surfaces.py: the bench sets, snapshot folders and
  patterns, plots, ``cluster.network``, ``measure``'s options, ``fix --write``, ``run --out``,
  duplicate keys, long words), each case run in its own process under an address-space limit
  (RLIMIT_AS), a CPU limit and a wall-clock limit, so a hang or a memory blow-up is caught and
  counted rather than taking the machine down: CPU seconds and peak RSS come from wait4.

Run:  PYTHONPATH=. python benchmarks/hostile_corpus.py [--limit 10] [--rss-mb 400] [--jobs N]
Prints the slowest cases of each part and the counts of tracebacks, hangs and blow-ups; exits 1
when a case passes a limit, ends in a traceback, hangs or blows up, or exits with a status its
case does not allow.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from memtune.cli import main
from tests.hostile import surfaces
from tests.hostile.conftest import MAX_ERROR_LINES
from tests.hostile.make_corpus import everything, write

WALL_S = 30.0  # a hang: no case needs more (a named pipe is waited on for 5 s)
CPU_S = 60  # RLIMIT_CPU of one case
ADDRESS_SPACE = 3 << 30  # RLIMIT_AS: the interpreter with numpy and matplotlib maps ~1 GiB itself


def commands(name: str, path: Path) -> list[list[str]]:
    """What tests/hostile/test_corpus.py runs on the file."""
    if name.startswith("log-"):
        return [["diagnose", "--json", str(path)]]
    if name.startswith("snap-"):
        return [["diagnose", "--json", "--snapshot", str(path)]]
    return [["estimate", str(path)], ["check", str(path)]]


def cpu_seconds(argv: list[str]) -> float:
    start = time.process_time()
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with quiet[0], quiet[1], contextlib.suppress(SystemExit):  # argparse's usage errors exit
        main(argv)
    return time.process_time() - start


def corpus(limit: float) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "corpus"
        write(directory)
        timings = [
            (cpu_seconds(argv), " ".join([argv[0], *(a for a in argv[1:-1]), name]))
            for name in sorted(everything())
            for argv in commands(name, directory / name)
        ]
    timings.sort(reverse=True)
    print(f"corpus: {len(timings)} runs, {sum(t for t, _ in timings):.1f} CPU s in all; slowest:")
    for seconds, case in timings[:5]:
        print(f"  {seconds:6.2f} s  {case}")
    return [f"{case} took {seconds:.1f} CPU s" for seconds, case in timings if seconds > limit]


@dataclass(frozen=True)
class Outcome:
    case: surfaces.Case
    status: int | None
    cpu_s: float  # user + system of the case's process
    rss: int  # its peak resident memory, bytes
    problem: str | None  # traceback, hang, blow-up, status N; None when it behaved


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S))


# `python -m memtune ARGV...` that writes its peak RSS to the descriptor PEAK_FD names as it exits. VmHWM is the
# process's own high-water mark; wait4's ru_maxrss is not: Linux carries the parent's RSS at the
# fork over the exec, so every case would seem to take at least what this script does.
CHILD = """
import atexit, os, sys
def peak():
    with open('/proc/self/status') as status:
        os.write(int(os.environ["PEAK_FD"]), next(line for line in status if line.startswith('VmHWM:')).split()[1].encode())
atexit.register(peak)
from memtune.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def run_isolated(case: surfaces.Case, rss_budget: int) -> Outcome:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p),
    }
    read_end, write_end = os.pipe()
    env["PEAK_FD"] = str(write_end)
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *case.argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_limits,  # noqa: PLW1509 - only setrlimit runs in the child
        pass_fds=(write_end,),
        env=env,
    )
    os.close(write_end)
    timed_out = threading.Event()
    timer = threading.Timer(WALL_S, lambda: (timed_out.set(), proc.kill()))
    timer.start()
    assert proc.stderr is not None
    err = proc.stderr.read(1 << 20).decode("utf-8", "replace")
    proc.stderr.close()
    _, raw, usage = os.wait4(proc.pid, 0)
    timer.cancel()
    with os.fdopen(read_end, "rb") as report:
        reported = report.read()
    proc.returncode = status = os.waitstatus_to_exitcode(raw)
    rss = int(reported) * 1024 if reported.isdigit() else usage.ru_maxrss * 1024  # killed: no report
    problem = None
    if timed_out.is_set() or status == -24:  # SIGXCPU: the CPU limit
        problem = "hang"
    elif "Traceback" in err:
        problem = "traceback"
    elif status in (-9, -6) or "MemoryError" in err or rss > rss_budget:
        problem = "blow-up"
    elif status not in case.statuses:
        problem = f"status {status}"
    elif len(err.splitlines()) > MAX_ERROR_LINES or any(len(line) >= 2000 for line in err.splitlines()):
        problem = "error lines"  # more than one line per problem, or a value quoted at full length
    return Outcome(case, status, usage.ru_utime + usage.ru_stime, rss, problem)


def surface_cases(limit: float, rss_mb: int, jobs: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        cases = surfaces.build(Path(tmp) / "surfaces")
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            outcomes = list(pool.map(lambda c: run_isolated(c, rss_mb << 20), cases))
    by_cpu = sorted(outcomes, key=lambda o: -o.cpu_s)
    biggest = max(outcomes, key=lambda o: o.rss)
    kinds = {kind: sum(1 for o in outcomes if (o.problem or "").startswith(kind)) for kind in ("traceback", "hang", "blow-up", "status", "error lines")}  # fmt: skip
    print(
        f"surfaces: {len(outcomes)} cases, each in its own process: {sum(o.cpu_s for o in outcomes):.1f} CPU s "
        f"in all, largest peak RSS {biggest.rss >> 20} MiB ({biggest.case.name}); {kinds['traceback']} tracebacks, "
        f"{kinds['hang']} hangs, {kinds['blow-up']} blow-ups, {kinds['status']} unexpected statuses, "
        f"{kinds['error lines']} runs of error lines; slowest:"
    )
    for o in by_cpu[:5]:
        print(f"  {o.cpu_s:6.2f} s  {o.rss >> 20:4d} MiB  {o.case.name}")
    failures = [f"{o.case.name}: {o.problem}" for o in outcomes if o.problem]
    failures += [f"{o.case.name} took {o.cpu_s:.1f} CPU s" for o in outcomes if o.cpu_s > limit]
    return failures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=10.0, metavar="S", help="CPU seconds one run may take")
    parser.add_argument(
        "--rss-mb", type=int, default=400, metavar="MB", help="peak RSS one surface case may take"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="surface cases run at once")
    options = parser.parse_args()
    over = corpus(options.limit) + surface_cases(options.limit, options.rss_mb, options.jobs)
    for line in over:
        print(f"FAILED {line}")
    sys.exit(1 if over else 0)
