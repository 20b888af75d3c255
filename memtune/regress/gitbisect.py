"""``memtune bisect --good REV --bad REV -- CMD...``: ``git bisect run`` with memtune's classifier.

The repository is left as it was found: ``git bisect reset`` runs in a ``finally`` (also on
Ctrl-C, and on SIGTERM, which is turned into the same interruption), so HEAD, the branch and the
work tree come back and no bisect state remains. A repository with uncommitted changes to tracked
files, or with a bisect already in progress, is refused before anything is touched.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import memtune
from memtune.errors import InputError
from memtune.regress.classify import USER_PYTHONPATH, Outcome, classify, run_command

_FIRST_BAD = re.compile(r"^([0-9a-f]{7,64}) is the first bad commit", re.M)
_CANDIDATES = re.compile(r"could be any of:\n((?:[0-9a-f]{7,64}\n)+)")


@dataclass
class BisectResult:
    first_bad: str | None  # None: git could not narrow it to one commit
    candidates: list[str]  # when only skipped commits were left: every commit that may be first bad
    subject: str = ""
    outcome: Outcome | None = None  # how the first bad commit failed
    log: str = ""  # its captured output
    tested: list[tuple[str, Outcome]] = field(default_factory=list)  # every commit run, in order


def _git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], check=False, capture_output=True, text=True)
    if check and proc.returncode != 0:
        first = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[0]
        raise InputError(f"git {args[0]} failed in {repo}: {first}")
    return proc.stdout.strip()


def _work_tree(repo: str) -> Path:
    path = Path(repo)
    if not path.is_dir():
        raise InputError(f"--repo {repo}: no such directory")
    proc = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--show-toplevel"], check=False, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise InputError(f"--repo {repo}: not a git work tree")
    return Path(proc.stdout.strip())


def _commit(repo: Path, option: str, rev: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        check=False,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise InputError(f"{option} {rev}: not a commit in {repo}")
    return proc.stdout.strip()


def preflight(repo: str, good: str, bad: str) -> tuple[Path, str, str]:
    """The work tree and both commits; refuses a dirty tree or a bisect in progress."""
    root = _work_tree(repo)
    if Path(root, _git(root, "rev-parse", "--git-path", "BISECT_START")).exists():
        raise InputError(f"{root}: a git bisect is already in progress (finish it with `git bisect reset`)")
    if _git(root, "status", "--porcelain", "--untracked-files=no"):
        raise InputError(f"{root}: uncommitted changes to tracked files; commit or stash them first")
    return root, _commit(root, "--good", good), _commit(root, "--bad", bad)


@contextmanager
def _interruptible() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt, so the cleanup below runs for it too."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def bisect(repo: str, good: str, bad: str, command: list[str], kind: str) -> BisectResult:
    root, good_commit, bad_commit = preflight(repo, good, bad)
    with tempfile.TemporaryDirectory(prefix="memtune-bisect-") as record, _interruptible():
        started = False
        try:
            _git(root, "bisect", "start", bad_commit, good_commit)
            started = True
            proc = subprocess.run(
                [
                    *("git", "-C", str(root), "bisect", "run"),
                    *(sys.executable, "-P", "-m", "memtune.regress.classify"),
                    *("--kind", kind, "--record", record, "--"),
                    *command,
                ],
                check=False,
                stdout=subprocess.PIPE,
                stderr=None,  # the classifier's one line per commit reaches the user as it runs
                text=True,
                env=_classifier_env(),
            )
            return _result(root, proc.stdout, Path(record), command, kind)
        finally:
            if started:
                _reset(root)


def _reset(root: Path) -> None:
    proc = subprocess.run(
        ["git", "-C", str(root), "bisect", "reset"], check=False, capture_output=True, text=True
    )
    if proc.returncode != 0:
        # Cleanup must not hide what interrupted the bisect; say what is left to do instead.
        print(f"memtune bisect: `git bisect reset` failed in {root}; run it yourself", file=sys.stderr)


def _classifier_env() -> dict[str, str]:
    """The classifier must import this memtune, not one in the repository being bisected."""
    env = dict(os.environ)
    env[USER_PYTHONPATH] = env.get("PYTHONPATH", "")
    package_root = str(Path(memtune.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def _result(root: Path, output: str, record: Path, command: list[str], kind: str) -> BisectResult:
    tested = _tested(record)
    if m := _FIRST_BAD.search(output):
        first = _git(root, "rev-parse", m.group(1))
        result = BisectResult(first, [first], tested=tested)
    elif m := _CANDIDATES.search(output):
        return BisectResult(None, m.group(1).split(), tested=tested)
    else:
        last = output.strip().splitlines()[-1:] or ["no output"]
        raise InputError(f"git bisect run did not finish: {last[0]}")
    result.subject = _git(root, "log", "-1", "--format=%h %s", first)
    log_file = record / f"{first}.log"
    if log_file.exists():
        result.log = log_file.read_text(encoding="utf-8")
        result.outcome = dict(tested)[first]
    else:
        # git never runs the revision given as bad; when it is the first bad one, run it now.
        _git(root, "checkout", "--quiet", first)
        status, result.log = run_command(command, cwd=root)
        result.outcome = classify(status, result.log, kind)
    return result


def _tested(record: Path) -> list[tuple[str, Outcome]]:
    files = sorted(record.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    out = []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["reasons"] = tuple(data["reasons"])
        out.append((path.stem, Outcome(**data)))
    return out
