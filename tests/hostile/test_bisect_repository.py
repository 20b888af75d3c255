"""Issue 29 items 1, 5 and 9 for `memtune bisect`: hostile commands and histories in throwaway git
repositories. Whatever the command does, the repository is left byte for byte as it was found
and no worktree of memtune's remains."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtune.errors import InputError
from memtune.limits import MAX_TIMEOUT_SECONDS
from memtune.numbers import echo
from memtune.regress import gitbisect
from memtune.regress.cli import _seconds
from tests.hostile.conftest import run_cli
from tests.hostile.test_properties import SETTINGS
from tests.hostile.test_run_processes import alive

CAPACITY = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
    "139.80 GiB of which 1.31 GiB is free. Including non-PyTorch memory, this process has 138.48 GiB memory "
    "in use. Of the allocated memory 137.98 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch "
    "but unallocated."
)
IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@t"]


def git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    return subprocess.run(
        ["git", *IDENTITY, "-C", str(repo), *args], check=True, capture_output=True, input=stdin
    ).stdout.decode()


def history(repo: Path, scripts: list[str]) -> list[str]:
    """One commit per script (written as run.sh), made with one `git fast-import`: thousands in a second."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    stream = []
    for i, script in enumerate(scripts):
        data = script.encode()
        stream += [
            b"commit refs/heads/main",
            f"mark :{i + 1}".encode(),
            f"committer t <t@t> {1_700_000_000 + i} +0000".encode(),
            f"data {len(f'c{i}')}".encode(),
            f"c{i}".encode(),
            *([f"from :{i}".encode()] if i else []),
            b"M 100755 inline run.sh",
            f"data {len(data)}".encode(),
            data,
            b"",
        ]
    git(repo, "fast-import", "--quiet", stdin=b"\n".join(stream) + b"\n")
    git(repo, "checkout", "-q", "--force", "main")
    return git(repo, "rev-list", "--reverse", "main").split()


def state(repo: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and "objects" not in p.relative_to(repo).parts[:2]
    }


OK = "exit 0\n"
BROKEN = "exit 3\n"
OOM = f"echo '{CAPACITY}' >&2\nexit 1\n"


def test_three_thousand_skipped_commits_stop_at_the_limit(tmp_path, capsys, monkeypatch):
    """It used to be still walking after 300 s. (A lower limit than memtune's keeps CI quick.)"""
    monkeypatch.setattr(gitbisect, "MAX_BISECT_RUNS", 12)
    repo = tmp_path / "repo"
    commits = history(repo, [OK, *[BROKEN] * 3000, OOM])
    before = state(repo)
    status, _, err = bisect(capsys, repo, commits[0], commits[-1], command=("sh", "run.sh"))
    assert status == 2
    lines = err.splitlines()
    assert len([line for line in lines if line.endswith("-> skip")]) == 10
    assert lines[-1] == (
        "memtune bisect: stopped after 12 commands run, memtune's limit for one bisect: "
        "the first bad commit is still one of 3001 commits; bisect a narrower range (--good, --bad)"
    )
    assert state(repo) == before


VANDALS = {
    "deletes its whole checkout": "rm -rf ./* ./.git",
    "commits and moves its HEAD": "echo x > f && git add f && git -c user.name=v -c user.email=v@v commit -qm v",
    "checks out another commit": "git checkout -q --detach HEAD~1",
    "stages a deletion": "git rm -q run.sh",
    "leaves a read-only directory": "mkdir -p ro/sub && touch ro/sub/f && chmod 500 ro/sub ro",
    "writes one endless line": "head -c 2000000 /dev/zero | tr '\\0' x",
}
# The script is read whole before it runs, so a command that rewrites run.sh still ends as written.
RUN_SCRIPT = ("sh", "-c", 'script=$(cat run.sh); eval "$script"')


def bisect(
    capsys: pytest.CaptureFixture[str], repo: Path, good: str, bad: str, *args: str, command=RUN_SCRIPT
) -> tuple[int, str, str]:
    """`memtune bisect --repo REPO --good GOOD --bad BAD [ARGS] -- COMMAND`: (exit status, stdout, stderr)."""
    return run_cli(capsys, "bisect", "--repo", str(repo), "--good", good, "--bad", bad, *args, "--", *command)


def assert_left_as_found(repo: Path, before: dict[str, bytes]) -> None:
    assert state(repo) == before
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.parametrize("action", sorted(VANDALS))
def test_hostile_commands_leave_the_repository_as_found(action, tmp_path, capsys):
    repo = tmp_path / "repo"
    pass_, fail = f"{VANDALS[action]}\nexit 0\n", f"echo '{CAPACITY}' >&2\n{VANDALS[action]}\nexit 1\n"
    commits = history(repo, [pass_, pass_, pass_, fail, fail])
    (repo / "mine.txt").write_text("untracked, the user's\n")
    before = state(repo)
    status, out, err = bisect(capsys, repo, commits[0], commits[-1], "--json")
    assert "Traceback" not in err
    assert (status, json.loads(out)["first_bad"]) == (0, commits[3]), err
    assert_left_as_found(repo, before)


def test_binary_output_hides_the_oom_and_says_so(tmp_path, capsys):
    repo = tmp_path / "repo"
    commits = history(repo, [OK, f"echo '{CAPACITY}' >&2\nhead -c 300000 /dev/urandom\nexit 1\n"])
    before = state(repo)
    status, _, err = bisect(capsys, repo, commits[0], commits[1])
    assert status == 2
    assert err.splitlines()[-1] == (
        f"memtune bisect: --bad {commits[1]}: the command does not fail with an out-of-memory there "
        "(exit 1, no out-of-memory found in the output -> skip); give a commit where it does"
    )
    assert state(repo) == before


@SETTINGS
@given(st.text(max_size=40))
def test_timeout_is_a_positive_bounded_number_or_one_line(text):
    try:
        value = _seconds(text)
    except InputError as exc:
        assert exc.problems == [
            f"--timeout {echo(text)}: must be a number of seconds, more than 0 and at most {MAX_TIMEOUT_SECONDS}"
        ]
    else:
        assert 0 < value <= MAX_TIMEOUT_SECONDS and float(text) == value


def test_a_checkout_replaced_by_a_link_to_the_repository_is_not_followed(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    monkeypatch.setenv("MEMTUNE_TEST_REPO", str(repo))
    vandal = 'cd .. && rm -rf tree && ln -s "$MEMTUNE_TEST_REPO" tree'
    commits = history(repo, [f"{vandal}\nexit 0\n"] * 3 + [f"echo '{CAPACITY}' >&2\n{vandal}\nexit 1\n"] * 2)
    before = state(repo)
    status, out, err = bisect(capsys, repo, commits[0], commits[-1], "--json")
    assert (status, json.loads(out)["first_bad"]) == (0, commits[3]), err
    assert_left_as_found(repo, before)


def test_a_command_deaf_to_sigterm_is_killed_after_the_grace(tmp_path, capsys, monkeypatch):
    """SIGTERM to memtune (a scheduler's) reaches the command; one that ignores it is SIGKILLed,
    and the bisect still cleans up and exits 143."""
    monkeypatch.setattr(gitbisect, "KILL_GRACE_SECONDS", 0.5)
    repo, pid_file = tmp_path / "repo", tmp_path / "pid"
    deaf = f"trap '' TERM\nsleep 60 &\necho $$ $! > {pid_file}\nwait\n"  # the shell and its child
    commits = history(repo, [OK, deaf, OOM])
    before = state(repo)

    def terminate_when_it_runs() -> None:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=terminate_when_it_runs)
    sender.start()
    try:
        status, _, err = bisect(capsys, repo, commits[0], commits[2])
    finally:
        sender.join()
    assert status == 128 + signal.SIGTERM
    assert err.splitlines()[-1] == "memtune bisect: stopped by SIGTERM; the repository is as it was"
    assert [alive(int(pid)) for pid in pid_file.read_text().split()] == [False, False]
    assert_left_as_found(repo, before)
