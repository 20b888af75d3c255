"""``memtune bisect --good REV --bad REV -- CMD...``: a git bisection with memtune's classifier.

The repository is left exactly as it was found, held to ``git bisect``'s own standard and
beyond: every commit is tested in a separate, temporary ``git worktree``, forced to the commit
and cleaned of untracked and ignored files before each run, so a command that edits, deletes or
adds files cannot make the next checkout fail, and the user's HEAD, branch, index, work tree,
untracked files and any bisect they have in progress are never touched. The midpoints are git's
own (``git rev-list --bisect-all``, which ``git bisect`` uses) but no bisect state is written:
``git bisect start`` itself rewrites ``.git/packed-refs``. The worktree is removed whatever
happens: the command failing or hanging (``--timeout``), memtune's own limit on the commands one
bisect runs, bad input, or SIGINT, SIGTERM and SIGHUP sent to memtune (passed to the command's
process group first, see ``memtune/runtime/launch.py``).

git is run with an explicit environment (``memtune/childenv.py``: no ``GIT_DIR``,
``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` or any other ``GIT_*`` variable of the caller's, which git
would obey before its command line) and names the git directory and work tree it acts on
explicitly, so a memtune started from a git hook or from a shell that exports them still works on
the temporary worktree alone; the user's hooks do not run for memtune's checkouts, and the
command runs without the variables that point git at a repository.

Both ends are run first: a ``--bad`` commit that does not fail with the chased out-of-memory,
or a ``--good`` one where the command does not pass, is refused, so "found" always means a
commit that fails where its parents did not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from memtune.childenv import child_environment
from memtune.diagnose.logscan import ScanResult, scan
from memtune.errors import InputError
from memtune.limits import KILL_GRACE_SECONDS, MAX_BISECT_RUNS
from memtune.numbers import cut
from memtune.regress.classify import Outcome, classify, describe, kind_words
from memtune.runtime.launch import FileSink, LineSink, Supervisor


@dataclass
class BisectResult:
    first_bad: str | None  # None: git could not narrow it to one commit
    candidates: list[str]  # when only skipped commits were left: every commit that may be first bad
    subject: str = ""
    outcome: Outcome | None = None  # how the first bad commit failed
    tested: list[tuple[str, Outcome]] = field(default_factory=list)  # every commit run, in order


@dataclass(frozen=True)
class _Repository:
    """A git directory and the work tree git commands act on, both named on git's command line."""

    git_dir: Path
    work_tree: Path


def _run_git(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # Its own process group: a Ctrl-C at the terminal reaches memtune, which finishes the git
    # operation under way and then stops, rather than git dying halfway through a checkout.
    # No hooks: the checkouts are memtune's, in its own worktree, not the user's.
    return subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *argv],
        check=False,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        process_group=0,
        cwd=cwd,
        env=child_environment(),
    )


def _git_in(repo: _Repository, *args: str) -> subprocess.CompletedProcess[str]:
    return _run_git(
        ["--git-dir", str(repo.git_dir), "--work-tree", str(repo.work_tree), *args], repo.work_tree
    )


def _discover(directory: Path) -> _Repository | None:
    """The repository whose work tree holds ``directory`` (git's own search, without the
    caller's GIT_* variables), or None."""
    proc = _run_git(["rev-parse", "--show-toplevel", "--absolute-git-dir"], directory)
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        return None
    return _Repository(Path(lines[1]), Path(lines[0]))


def _first_line(proc: subprocess.CompletedProcess[str]) -> str:
    text = proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}"
    return cut(text.splitlines()[0], 200)


def _work_tree(repo: str) -> _Repository:
    path = Path(repo)
    if not path.is_dir():
        raise InputError(f"--repo {cut(repo)}: no such directory")
    found = _discover(path)
    if found is None:
        raise InputError(f"--repo {cut(repo)}: not a git work tree")
    return found


def _commit(repo: _Repository, option: str, rev: str) -> str:
    proc = _git_in(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if proc.returncode != 0:
        raise InputError(f"{option} {cut(rev)}: not a commit in {repo.work_tree}")
    return proc.stdout.strip()


def _make_writable(tree: Path) -> None:
    for directory, _, _ in os.walk(tree):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o700)


def preflight(repo: str, good: str, bad: str) -> tuple[_Repository, str, str]:
    """The work tree and both commits."""
    root = _work_tree(repo)
    good_commit, bad_commit = _commit(root, "--good", good), _commit(root, "--bad", bad)
    if good_commit == bad_commit:
        raise InputError(f"--good {cut(good)} and --bad {cut(bad)} are the same commit")
    return root, good_commit, bad_commit


def bisect(
    repo: str, good: str, bad: str, command: list[str], kind: str, timeout: float | None = None
) -> BisectResult:
    root, good_commit, bad_commit = preflight(repo, good, bad)
    with (
        Supervisor(kill_after=KILL_GRACE_SECONDS) as supervisor,
        tempfile.TemporaryDirectory(prefix="memtune-bisect-") as scratch,
    ):
        session = _Session(root, Path(scratch), command, kind, timeout, supervisor)
        try:
            session.open(bad_commit)
            return session.bisect(good, good_commit, bad, bad_commit)
        finally:
            session.close()


class _Session:
    """One bisect in its own worktree under ``scratch``."""

    def __init__(
        self,
        root: _Repository,
        scratch: Path,
        command: list[str],
        kind: str,
        timeout: float | None,
        supervisor: Supervisor,
    ) -> None:
        self.root, self.command, self.kind, self.timeout = root, command, kind, timeout
        self.supervisor = supervisor
        self.tree = scratch / "tree"
        self.checkout: _Repository | None = None  # the worktree's git directory and tree, once open
        self.log = scratch / "output.log"
        self.admin: Path | None = None  # the worktree's entry under the repository's .git/worktrees
        self.link = b""  # the worktree's .git file, which points git at that entry
        self.tested: list[tuple[str, Outcome]] = []
        self.remaining: list[str] = []  # the commits that may still be the first bad one

    def git(self, *args: str, where: _Repository | None = None) -> subprocess.CompletedProcess[str]:
        repo = where or self.checkout
        assert repo is not None, "open() names the worktree before any git command runs in it"
        proc = _git_in(repo, *args)
        self.supervisor.check()
        return proc

    def must(self, *args: str, where: _Repository | None = None) -> str:
        proc = self.git(*args, where=where)
        if proc.returncode != 0:
            raise InputError(f"git {args[0]} {args[1] if len(args) > 1 else ''} failed: {_first_line(proc)}")
        return proc.stdout.strip()

    def open(self, commit: str) -> None:
        self.must(
            "worktree", "add", "--detach", "--no-checkout", "--quiet", str(self.tree), commit, where=self.root
        )
        found = _discover(self.tree)
        if found is None:
            raise InputError(f"git worktree add made no work tree at {self.tree}")
        self.admin = found.git_dir
        self.checkout = _Repository(found.git_dir, self.tree)
        self.link = (self.tree / ".git").read_bytes()

    def _relink(self) -> None:
        """Put back the worktree's ``.git`` file (its link to the repository) if the last command
        deleted or replaced it, so git can still check out and clean the tree."""
        if self.tree.is_symlink():  # never let a checkout follow a link out of the scratch directory
            self.tree.unlink()
        dot_git = self.tree / ".git"
        if dot_git.is_dir() and not dot_git.is_symlink():
            shutil.rmtree(dot_git)
        elif dot_git.is_file() and dot_git.read_bytes() == self.link:
            return
        self.tree.mkdir(exist_ok=True)
        dot_git.unlink(missing_ok=True)
        dot_git.write_bytes(self.link)

    def close(self) -> None:
        """Remove the worktree and its entry; signals arriving now are only recorded."""
        if self.tree.is_symlink():  # put there by the command: removing must not follow it
            self.tree.unlink()
        if self.tree.exists():
            _make_writable(self.tree)
        removed = _git_in(self.root, "worktree", "remove", "--force", "--force", str(self.tree))
        if removed.returncode != 0:  # the command deleted or broke its worktree: remove what is ours
            shutil.rmtree(self.tree, ignore_errors=True)
            if self.admin is not None:
                shutil.rmtree(self.admin, ignore_errors=True)
        if self.tree.exists() or (self.admin is not None and self.admin.exists()):
            print(f"memtune bisect: could not remove the worktree {self.tree}", file=sys.stderr)

    def bisect(self, good: str, good_commit: str, bad: str, bad_commit: str) -> BisectResult:
        if self.git("merge-base", "--is-ancestor", good_commit, bad_commit, where=self.root).returncode != 0:
            raise InputError(f"--good {cut(good)} is not an ancestor of --bad {cut(bad)}")
        at_bad = self.test(bad_commit)
        if at_bad.exit_status is None:
            raise InputError(
                f"--bad {cut(bad)}: cannot start {cut(self.command[0])!r} there: {at_bad.reasons[0]}"
            )
        if at_bad.outcome != "bad":
            raise InputError(
                f"--bad {cut(bad)}: the command does not fail with {kind_words(self.kind)} there "
                f"({describe(at_bad)}); give a commit where it does"
            )
        at_good = self.test(good_commit)
        if at_good.outcome != "good":
            raise InputError(
                f"--good {cut(good)}: the command does not pass there ({describe(at_good)}); "
                "give a commit where it exits 0"
            )
        goods, skipped = [good_commit], set()
        while True:
            # git's own choice of midpoint, best first; this leaves no bisect state in any repository.
            ranked = self.must(
                "rev-list", "--bisect-all", bad_commit, "--not", *goods, where=self.root
            ).splitlines()
            self.remaining = [line.split()[0] for line in ranked]
            untested = [c for c in self.remaining if c != bad_commit and c not in skipped]
            if not untested:
                break
            outcome = self.test(untested[0])
            if outcome.outcome == "good":
                goods.append(untested[0])
            elif outcome.outcome == "bad":
                bad_commit = untested[0]
            else:
                skipped.add(untested[0])
        if self.remaining != [bad_commit]:
            return BisectResult(None, self.remaining, tested=self.tested)
        subject = self.must("log", "-1", "--format=%h %s", bad_commit, where=self.root)
        return BisectResult(bad_commit, [bad_commit], subject, dict(self.tested)[bad_commit], self.tested)

    def test(self, commit: str) -> Outcome:
        """Run the command at ``commit`` in a clean checkout and classify it."""
        if len(self.tested) >= MAX_BISECT_RUNS:
            raise InputError(
                f"stopped after {MAX_BISECT_RUNS} commands run, memtune's limit for one bisect: the first "
                f"bad commit is still one of {len(self.remaining)} commits; bisect a narrower range (--good, --bad)"
            )
        self._relink()
        self.must("checkout", "--force", "--detach", "--quiet", commit)
        if self.git("clean", "-ffdxq").returncode != 0:  # a directory the command made read-only
            _make_writable(self.tree)
            self.must("clean", "-ffdxq")
        with open(self.log, "wb") as log_file:
            log = FileSink(log_file)
            try:
                finished = self.supervisor.run(
                    self.command,
                    child_environment(),
                    self.tree,
                    [LineSink(log)],
                    [LineSink(log)],
                    self.timeout,
                )
            except OSError as exc:
                finished, cannot_start = None, exc.strerror or str(exc)
        self.supervisor.check()
        if finished is None:
            outcome = replace(classify(None, ScanResult(), self.kind), reasons=(cannot_start,))
        else:
            try:
                scanned, notes = scan([str(self.log)]), []
            except InputError as unreadable:  # binary output: diagnose reads nothing in it
                scanned, notes = ScanResult(), unreadable.problems
            outcome = classify(finished.status, scanned, self.kind, finished.timed_out)
            # The log is gone when the user reads this: its lines are the command's output.
            reasons = tuple(r.replace(str(self.log), "output") for r in (*notes, *outcome.reasons))
            outcome = replace(outcome, reasons=reasons)
        self.tested.append((commit, outcome))
        print(f"memtune bisect: {commit[:12]} {describe(outcome)}", file=sys.stderr, flush=True)
        return outcome
