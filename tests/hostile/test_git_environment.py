"""Issue 43 item 1: a memtune started with git's variables set (git exports GIT_DIR to its hooks;
some dotfile set-ups export GIT_DIR and GIT_WORK_TREE for a whole shell) still leaves the user's
repository and work tree byte for byte as found, and starts no process with those variables."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from memtune.childenv import child_environment, command_environment
from memtune.measure.run import subprocess_env
from tests.hostile.conftest import run_cli
from tests.hostile.test_bisect_repository import CAPACITY, IDENTITY, bisect, history

# A command that, given git's variables, would wipe the user's untracked files, edits and staged
# changes and detach their HEAD. (One that commits adds objects to the shared object store:
# tests/hostile/test_bisect_repository.py compares all but those.)
VANDAL = (
    "git clean -ffdxq\n"
    "git checkout -q --force --detach HEAD\n"
    "env | grep -E '^GIT_(DIR|WORK_TREE|INDEX_FILE|COMMON_DIR|CONFIG)' > /dev/null && exit 7\n"  # none reach it
)


def hostile_variables(repo: Path) -> dict[str, str]:
    git_dir = repo / ".git"
    return {
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(repo),
        "GIT_INDEX_FILE": str(git_dir / "index"),
        "GIT_COMMON_DIR": str(git_dir),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.worktree",
        "GIT_CONFIG_VALUE_0": str(repo),
        "GIT_CONFIG_PARAMETERS": "'core.bare'='false'",
        "GIT_AUTHOR_NAME": "x",
    }


def everything(repo: Path) -> dict[str, bytes]:
    """Every file of the work tree and of .git (objects included), byte for byte."""
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file()}


def plain_git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        ["git", *IDENTITY, "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def test_bisect_under_hostile_git_variables_leaves_repository_and_work_tree_as_found(
    tmp_path, capsys, monkeypatch
):
    repo = tmp_path / "repo"
    good, bad = f"{VANDAL}exit 0\n", f"echo '{CAPACITY}' >&2\n{VANDAL}exit 1\n"
    commits = history(repo, [good, good, good, bad, bad])
    # The user's own state: a branch checked out, a staged change, an edit, an untracked file.
    (repo / "run.sh").write_text("# edited, not committed\n")
    (repo / "staged.txt").write_text("staged\n")
    plain_git(repo, "add", "staged.txt")
    (repo / "untracked.txt").write_text("the user's\n")
    before = everything(repo)
    head = plain_git(repo, "symbolic-ref", "HEAD")
    for name, value in hostile_variables(repo).items():
        monkeypatch.setenv(name, value)

    status, out, err = bisect(capsys, repo, commits[0], commits[-1], "--json")

    for name in hostile_variables(repo):
        monkeypatch.delenv(name)
    assert "Traceback" not in err
    assert (status, json.loads(out)["first_bad"]) == (0, commits[3]), err
    assert everything(repo) == before
    assert plain_git(repo, "symbolic-ref", "HEAD") == head
    assert plain_git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_run_starts_its_command_without_git_variables_and_says_so(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))
    monkeypatch.setenv("GIT_SSL_CAINFO", "/etc/ca.pem")  # how git reaches a network: the user's, kept
    seen = tmp_path / "env.txt"
    status, _, err = run_cli(capfd, "run", "--out", str(tmp_path / "out"), "--", "sh", "-c", f"env > {seen}")
    assert status == 0
    names = {line.partition("=")[0] for line in seen.read_text().splitlines()}
    assert "GIT_SSL_CAINFO" in names and not names & {"GIT_DIR", "GIT_WORK_TREE"}
    assert (
        "memtune run: GIT_DIR, GIT_WORK_TREE from your environment dropped: they point git at a repository, "
        "and memtune starts no process with them"
    ) in err.splitlines()


BASE = {
    "PATH": "/bin",
    "GIT_DIR": "/x",
    "GIT_INDEX_FILE": "/x/index",
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "core.worktree",
    "GIT_SSL_CAINFO": "/etc/ca.pem",
}


@pytest.mark.parametrize("make", [child_environment, lambda base: subprocess_env({}, base)])
def test_processes_memtune_runs_for_itself_get_no_git_variable(make):
    env = make(BASE)
    assert {k for k in env if k.startswith("GIT_")} == set() and env["PATH"] == "/bin"


def test_a_users_command_keeps_git_variables_that_name_no_repository():
    assert command_environment(BASE) == {"PATH": "/bin", "GIT_SSL_CAINFO": "/etc/ca.pem"}
