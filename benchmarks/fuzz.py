"""Fuzz the memtune CLI in subprocesses: any traceback, hang or memory blow-up is a bug.

Generates inputs from the bundled examples and fixtures (mutated numbers, types, structure,
aliases, nesting), from hostile fragments (shell doubling, arithmetic, here-docs, long digit
runs, NUL bytes, adversarial log lines) and from random pickles, and runs ``estimate``,
``check`` and ``diagnose`` on them with random options and output channels (a pipe, /dev/full,
a closed stdout). Each run has a wall-clock limit, an address-space limit (RLIMIT_AS) and a CPU
limit; the peak RSS comes from wait4. A case fails when stderr shows a traceback, the run times
out (hang), hits the memory limit or exceeds the RSS budget (blow-up), exits with a status other
than 0, 1, 2 or 130, or exits 2 without a one-line message.

Run:  python benchmarks/fuzz.py [--seconds 180] [--seed 1] [--jobs N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import os
import pickle
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WALL_S = 20.0  # a case under 1 MB must finish well within this
CPU_S = 30
ADDRESS_SPACE = 3 << 30  # RLIMIT_AS: the interpreter with numpy/matplotlib maps ~1 GiB by itself
RSS_BUDGET = 400 << 20  # "a few hundred MB"

EXTREME_NUMBERS = [
    "0", "-1", "1", "true", "false", "null", ".inf", "-.inf", ".nan", "1e999", "9" * 40, "9" * 5000,
    "10000", "10001", "1000000", "100000000", "2147483648", "18446744073709551616", "٣٢", "３２", "1_000",
    "0x10", "'8'", "[1, 2]", "{a: 1}", "1.5", "-0", "'" + "x" * 5000 + "'",
]  # fmt: skip
YAML_JUNK = [
    "&a [1, 2, 3]", "*a", "!!python/object/apply:os.system ['true']", "[" * 300, "{" * 300, "? [a]\n: 1",
    "\x00", "\t", "'unterminated", "- - - -", "%TAG ! tag:x,2000:", "&b\n  k: *b", "<<: *a",
]  # fmt: skip
SHELL_JUNK = [
    "A=$A$A", "A=(${A[@]} ${A[@]})", "N=$((" + "1+" * 3000 + "1))", "N=$((" + "(" * 2000 + "1" + ")" * 2000 + "))",
    "X=$((1", "Y=${A:-", "cat <<EOF", "EOF", "cat <<-'END'", "\tEND", "'", '"', "\\", "$(rm -rf /)", "`id`",
    "--moe-layer-freq '([1]*100000)*100000'", "--moe-layer-freq '[1]*10000+[0]'", "--num-layers ٣٢",
    "--nproc-per-node " + "9" * 5000, "WORLD_SIZE=" + "9" * 5000, "export PYTORCH_CUDA_ALLOC_CONF=" + "x" * 3000,
]  # fmt: skip
LOG_PIECES = [
    "CUDA out of memory. Tried to allocate ", "2.00 GiB", "9" * 500, " " * 2000, "[rank{r}]: ", "[Rank {r}] ",
    "(after 10 iterations) memory (MB) | max reserved: 80000.0", "NCCL WARN ", "out of memory", "fragmentation",
    "inactive ", "reserved ", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "torch ", "torch==2.11.0",
    "exitcode: -9", "Killed", "CPU Virtual Memory: percent = 95.0%", "\x00", "\x1b[31m", "memory summary",
    "| Allocated memory | 1 GiB | 2 GiB |", "CUDA OOMs: 1", "but unallocated", "world size: 8", "\xff\xfe",
    "OOMKilled", "Signal 9 (SIGKILL)", "would exceed allowed memory", "NCCL error: unhandled cuda error",
]  # fmt: skip


@dataclass
class Case:
    argv: list[str]
    stdout: str = "pipe"  # pipe | full | closed
    stdin: str = "null"  # null | closed | file path


@dataclass
class Outcome:
    case: Case
    status: int | None
    seconds: float
    rss: int
    stderr: str
    problem: str | None


def _mutate_text(rng: random.Random, text: str, junk: list[str]) -> str:
    lines = text.splitlines() or [""]
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(lines))
        action = rng.random()
        if action < 0.35 and ":" in lines[i]:
            key = lines[i].split(":", 1)[0]
            lines[i] = f"{key}: {rng.choice(EXTREME_NUMBERS)}"
        elif action < 0.5:
            lines.insert(i, rng.choice(junk))
        elif action < 0.6:
            lines[i] = lines[i] * rng.choice([2, 50, 2000])
        elif action < 0.7:
            del lines[i]
        elif action < 0.8:
            lines[i] = lines[i].replace(" ", rng.choice(["", "  ", "\t", " " * 1000]))
        elif action < 0.9:
            words = lines[i].split()
            if words:
                words[rng.randrange(len(words))] = rng.choice(EXTREME_NUMBERS)
            lines[i] = " ".join(words)
        else:
            lines = lines * rng.choice([2, 10])
    return "\n".join(lines)[: 900 << 10] + "\n"


def _log_text(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(1, 400)):
        parts = [
            rng.choice(LOG_PIECES).format(r=rng.choice([0, 7, rng.randrange(10**6), "9" * 50]))
            for _ in range(rng.randint(1, 8))
        ]
        lines.append("".join(parts))
    return "\n".join(lines)


def _plain(rng: random.Random, depth: int = 0) -> object:
    kind = rng.random()
    if depth > 4 or kind < 0.4:
        return rng.choice(
            [0, -1, 2**64, 2**2000, 1.5, float("nan"), "x", b"\x00", None, True, (1, 2), "active_allocated"]
        )
    if kind < 0.6:
        return [_plain(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    if kind < 0.8:
        keys = [
            "segments",
            "blocks",
            "size",
            "total_size",
            "state",
            "frames",
            "device_traces",
            "action",
            "allocator_settings",
            7,
            (1,),
        ]
        return {rng.choice(keys): _plain(rng, depth + 1) for _ in range(rng.randint(0, 5))}
    return {1, 2, 3} if kind < 0.9 else (_plain(rng, depth + 1),)


def _snapshot_bytes(rng: random.Random) -> bytes:
    block = {
        "size": rng.choice([512, 2**70, -1, "x"]),
        "state": rng.choice(["active_allocated", "inactive"]),
        "frames": _plain(rng),
    }
    segment = {"total_size": rng.choice([2**21, 2**2000, None]), "blocks": [block] * rng.randint(0, 3000)}
    snap = {
        "segments": [segment] * rng.randint(0, 300),
        "allocator_settings": _plain(rng),
        "device_traces": _plain(rng),
    }
    data = bytearray(pickle.dumps(snap if rng.random() < 0.7 else _plain(rng), protocol=rng.randint(0, 5)))
    for _ in range(rng.choice([0, 0, 1, 3])):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    if rng.random() < 0.1:
        data = bytearray(
            rng.choice([b"\x80\x04r\xff\xff\xff\x7fN.", b"p99999999999\nN.", b"cos\nsystem\n(S'true'\ntR."])
        )
    return bytes(data)


def generate(rng: random.Random, workdir: Path, n: int) -> Case:
    seeds = sorted((ROOT / "examples").iterdir()) + sorted(
        (ROOT / "tests" / "config" / "fixtures" / "hf").glob("*.json")
    )
    corpus = sorted((ROOT / "tests" / "hostile" / "corpus").iterdir())
    roll = rng.random()
    if roll < 0.45:
        seed = rng.choice(seeds)
        junk = SHELL_JUNK if seed.suffix == ".sh" else YAML_JUNK
        path = workdir / f"case{n}{seed.suffix}"
        path.write_text(_mutate_text(rng, seed.read_text(), junk), encoding="utf-8", errors="surrogateescape")
        command = rng.choice(["estimate", "check"])
        argv = [command, str(path)]
        if rng.random() < 0.3:
            argv.append(
                f"model.{rng.choice(['num_layers', 'hidden_size', 'x', 'seq_length'])}={rng.choice(EXTREME_NUMBERS)}"
            )
        if rng.random() < 0.3:
            argv.append("--json")
        if command == "estimate" and rng.random() < 0.2:
            argv += rng.choice([["--moe-imbalance", rng.choice(["nan", "inf", "1e308", "2", "-1"])], ["--rank", rng.choice(["0", "-1", "9" * 30])],
                                ["--plot", rng.choice([str(workdir / "p.png"), str(workdir / "missing" / "p.png"), str(workdir / "p"), str(workdir / "p.xyz"), "/proc/p.png"])],
                                ["--explain"]])  # fmt: skip
    elif roll < 0.75:
        path = workdir / f"case{n}.log{'.gz' if rng.random() < 0.15 else ''}"
        data = _log_text(rng).encode("utf-8", "surrogateescape")
        if path.suffix == ".gz":
            data = gzip.compress(data)
            data = data[: rng.randrange(1, len(data) + 1)]
        path.write_bytes(data)
        argv = ["diagnose", str(path)] + (["--json"] if rng.random() < 0.5 else [])
    elif roll < 0.9:
        path = workdir / f"case{n}.pickle"
        path.write_bytes(_snapshot_bytes(rng))
        argv = ["diagnose", "--snapshot", str(path)] + (["--json"] if rng.random() < 0.5 else [])
        if rng.random() < 0.2:
            argv += ["--plot", str(workdir / rng.choice(["p.png", "p", "nodir/p.png"]))]
    else:
        path = rng.choice(corpus)
        if path.name.startswith("snap-"):
            argv = ["diagnose", "--json", "--snapshot", str(path)]
        elif path.name.startswith("log-"):
            argv = ["diagnose", "--json", str(path)]
        else:
            argv = [rng.choice(["estimate", "check"]), str(path)]
    stdout = rng.choices(["pipe", "full", "closed"], weights=[8, 1, 1])[0]
    stdin = "closed" if rng.random() < 0.05 else "null"
    if stdin == "closed" and rng.random() < 0.5:
        argv = ["diagnose", "-"]
    return Case(argv, stdout, stdin)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S))


def run_case(case: Case) -> Outcome:
    cmd = [sys.executable, "-m", "memtune", *case.argv]
    stdout = {"pipe": subprocess.DEVNULL, "full": open("/dev/full", "wb"), "closed": None}[case.stdout]  # noqa: SIM115
    close_fds = []
    if case.stdout == "closed":
        close_fds.append(1)
    if case.stdin == "closed":
        close_fds.append(0)

    def limits_and_closes() -> None:
        _limits()
        for fd in close_fds:
            os.close(fd)

    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        preexec_fn=limits_and_closes,  # noqa: PLW1509 - only setrlimit and close run in the child
    )
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(WALL_S, kill)
    timer.start()
    err = proc.stderr.read(1 << 20).decode("utf-8", "replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    _, raw_status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(raw_status)
    timer.cancel()
    seconds = time.perf_counter() - start
    if case.stdout == "full":
        stdout.close()
    rss = usage.ru_maxrss * 1024
    status = proc.returncode
    problem = None
    if timed_out.is_set():
        problem = "hang"
    elif "Traceback" in err or "internal error" in err:
        problem = "traceback"
    elif (
        "MemoryError" in err or status in (-9, -6) or rss > RSS_BUDGET or "out of memory while reading" in err
    ):
        problem = "blow-up"
    elif status == -24:  # SIGXCPU
        problem = "hang"
    elif status not in (0, 1, 2, 130):
        problem = f"status {status}"
    elif status == 2 and not err.strip():
        problem = "exit 2 without a message"
    return Outcome(case, status, seconds, rss, err, problem)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--keep", metavar="DIR", help="copy failing inputs here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    workroot = Path(tempfile.mkdtemp(prefix="memtune-fuzz-"))
    outcomes: list[Outcome] = []
    deadline = time.monotonic() + args.seconds
    n = 0
    try:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            running: set[concurrent.futures.Future[Outcome]] = set()
            while time.monotonic() < deadline or running:
                while time.monotonic() < deadline and len(running) < args.jobs:
                    workdir = workroot / f"w{n}"
                    workdir.mkdir()
                    running.add(pool.submit(run_case, generate(rng, workdir, n)))
                    n += 1
                done, running = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    outcome = future.result()
                    outcomes.append(outcome)
                    if outcome.problem:
                        print(f"{outcome.problem}: memtune {' '.join(a[:80] for a in outcome.case.argv)} "
                              f"(stdout {outcome.case.stdout}, {outcome.seconds:.1f} s, {outcome.rss >> 20} MiB)")  # fmt: skip
                        print("   " + outcome.stderr.strip()[-600:].replace("\n", "\n   "))
                        if args.keep:
                            for arg in outcome.case.argv:
                                if Path(arg).is_file():
                                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                                    shutil.copy(arg, Path(args.keep) / Path(arg).name)
    finally:
        shutil.rmtree(workroot, ignore_errors=True)
    counts = {
        kind: sum(1 for o in outcomes if o.problem and o.problem.startswith(kind))
        for kind in ("traceback", "hang", "blow-up", "status", "exit 2")
    }
    slowest = max(outcomes, key=lambda o: o.seconds)
    biggest = max(outcomes, key=lambda o: o.rss)
    print(
        f"{len(outcomes)} cases in {args.seconds:.0f} s (seed {args.seed}): {counts['traceback']} tracebacks, "
        f"{counts['hang']} hangs, {counts['blow-up']} blow-ups, {counts['status']} odd statuses, "
        f"{counts['exit 2']} silent exit-2; slowest {slowest.seconds:.1f} s, largest RSS {biggest.rss >> 20} MiB"
    )
    return 1 if any(o.problem for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
