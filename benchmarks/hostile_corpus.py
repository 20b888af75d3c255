"""CPU time of every command on every hostile input of the test corpus (tests/hostile/): each
must finish within a few seconds of CPU, however the input is built. The tests check only how
each run ends (status, no traceback, bounded error lines); time limits live here, measured in
CPU seconds of this process, so a loaded machine does not make them fail.

Run:  PYTHONPATH=. python benchmarks/hostile_corpus.py [--limit 10]
Prints the slowest cases and exits 1 when one takes more than --limit CPU seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

from memtune.cli import main
from tests.hostile.make_corpus import everything, write


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


def run(limit: float) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "corpus"
        write(directory)
        timings = [
            (cpu_seconds(argv), " ".join([argv[0], *(a for a in argv[1:-1]), name]))
            for name in sorted(everything())
            for argv in commands(name, directory / name)
        ]
    timings.sort(reverse=True)
    print(f"{len(timings)} runs, {sum(t for t, _ in timings):.1f} CPU s in all; slowest:")
    for seconds, case in timings[:10]:
        print(f"  {seconds:6.2f} s  {case}")
    over = [case for seconds, case in timings if seconds > limit]
    if over:
        print(f"{len(over)} over {limit:g} CPU s: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=10.0, metavar="S", help="CPU seconds one run may take")
    sys.exit(run(parser.parse_args().limit))
