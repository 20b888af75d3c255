"""The command ``git bisect run`` calls: ``python -m memtune.regress.classify --kind K --record DIR -- CMD...``.

It runs CMD in the current directory (the work tree at the commit under test), captures its
output and exits as ``git bisect run`` expects:

- 0 (good): CMD exited 0;
- 1 (bad): CMD failed and ``memtune diagnose`` reads its output as an out-of-memory of kind K;
- 125 (skip): any other failure (an ImportError, a crash, an OOM of another kind), which says
  nothing about the regression being chased;
- 128 (abort the bisect): the classifier itself could not work (CMD cannot be started is not
  that: a commit where the command does not exist is skipped).

With ``--record DIR`` it writes ``DIR/<commit>.json`` (outcome, exit status, verdict) and
``DIR/<commit>.log`` (the captured output) so ``memtune bisect`` can report the first bad
commit's diagnosis without running it again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from memtune.diagnose import expandable_state, scan_text, verdict
from memtune.diagnose.classify import Verdict
from memtune.diagnose.evidence import CAPACITY, FRAGMENTATION, HOST_OOM, OUTSIDE_PYTORCH

GOOD, BAD, SKIP, ABORT = 0, 1, 125, 128
KINDS = {
    FRAGMENTATION: (FRAGMENTATION,),
    CAPACITY: (CAPACITY,),
    "any": (FRAGMENTATION, CAPACITY, OUTSIDE_PYTORCH, HOST_OOM),
}
# memtune bisect puts its own package first on PYTHONPATH for this process; CMD gets the user's.
USER_PYTHONPATH = "MEMTUNE_BISECT_USER_PYTHONPATH"


@dataclass(frozen=True)
class Outcome:
    outcome: str  # good | bad | skip
    exit_status: int | None  # None: the command could not be started
    label: str | None  # diagnose's verdict on the output, None when it found no failure
    reasons: tuple[str, ...]

    @property
    def code(self) -> int:
        return {"good": GOOD, "bad": BAD, "skip": SKIP}[self.outcome]


def classify(exit_status: int | None, output: str, kind: str) -> Outcome:
    """Good, bad or skip, from the command's exit status and its output."""
    if exit_status == 0:
        return Outcome("good", 0, None, ())
    found = read_verdict(output)
    outcome = "bad" if found.label in KINDS[kind] else "skip"
    return Outcome(outcome, exit_status, found.label, tuple(found.reasons))


def read_verdict(output: str) -> Verdict:
    """``memtune diagnose``'s verdict on a command's output, from the log alone (no config or
    snapshot, and no fixes, which would need the config stack in every per-commit process)."""
    scanned = scan_text(output)
    formats = [f.numbers.format for f in scanned.failures if f.numbers is not None]
    return verdict(scanned.failures, scanned.facts, expandable_state(scanned.facts, None, None, formats))


def run_command(
    command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int | None, str]:
    """Run ``command``; its exit status (None if it could not start) and its output."""
    try:
        proc = subprocess.run(
            command, check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd
        )
    except OSError as exc:
        return None, f"could not start {command[0]}: {exc}"
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def describe(outcome: Outcome) -> str:
    status = "could not start" if outcome.exit_status is None else f"exit {outcome.exit_status}"
    if outcome.outcome == "good":
        return f"{status} -> good"
    what = f"{outcome.label} failure" if outcome.label else "no out-of-memory found in the output"
    return f"{status}, {what} -> {outcome.outcome}"


def _command_env() -> dict[str, str]:
    env = dict(os.environ)
    user = env.pop(USER_PYTHONPATH, None)
    if user is not None:
        if user:
            env["PYTHONPATH"] = user
        else:
            env.pop("PYTHONPATH", None)
    return env


def _head() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    return proc.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memtune.regress.classify")
    parser.add_argument("--kind", choices=sorted(KINDS), default="any")
    parser.add_argument("--record", metavar="DIR")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("memtune bisect: no command to run", file=sys.stderr)
        return ABORT
    try:
        status, output = run_command(command, _command_env())
        outcome = classify(status, output, args.kind)
        commit = _head()
        if args.record:
            record = Path(args.record)
            (record / f"{commit}.log").write_text(output, encoding="utf-8")
            (record / f"{commit}.json").write_text(json.dumps(asdict(outcome)), encoding="utf-8")
        print(f"memtune bisect: {commit[:12]} {describe(outcome)}", file=sys.stderr, flush=True)
        return outcome.code
    except KeyboardInterrupt:
        return ABORT
    except Exception as exc:  # any failure of the classifier must stop the bisect, not mark a commit
        print(f"memtune bisect: the classifier failed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return ABORT


if __name__ == "__main__":
    sys.exit(main())
