"""``memtune bisect --good --bad``: a real temporary repository whose history brings in an OOM."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memtune.cli import main
from memtune.regress.classify import BAD, GOOD, SKIP, classify
from tests.diagnose.diagnose_samples import MSG_211_CAPACITY, MSG_211_FRAGMENTATION

OK = "print('step 1 loss 2.3')\n"
IMPORT_ERROR = "import memtune_no_such_module_for_bisect\n"


def oom(message: str) -> str:
    return f"import sys\nprint('step 1 loss 2.3')\nsys.stderr.write({message!r} + '\\n')\nsys.exit(1)\n"


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def make_repo(tmp_path: Path, scripts: list[str]) -> tuple[Path, list[str]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commits = []
    for i, text in enumerate(scripts):
        (repo / "train.py").write_text(f"# version {i}\n{text}")
        git(repo, "add", "train.py")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        commits.append(git(repo, "rev-parse", "HEAD"))
    return repo, commits


def bisect_json(capsys, repo: Path, good: str, bad: str, kind: str = "any") -> tuple[int, dict]:
    code = main(
        [
            "bisect",
            "--repo",
            str(repo),
            "--good",
            good,
            "--bad",
            bad,
            "--kind",
            kind,
            "--json",
            "--",
            sys.executable,
            "train.py",
        ]
    )
    return code, json.loads(capsys.readouterr().out)


def assert_restored(repo: Path, head: str) -> None:
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert not Path(repo, git(repo, "rev-parse", "--git-path", "BISECT_START")).exists()
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "for-each-ref", "refs/bisect") == ""


def test_finds_the_commit_that_brought_the_oom_and_skips_the_import_error(tmp_path, capsys):
    capacity = oom(MSG_211_CAPACITY)
    repo, c = make_repo(tmp_path, [OK, OK, OK, IMPORT_ERROR, OK, capacity, capacity, capacity])
    code, data = bisect_json(capsys, repo, c[0], c[7])
    assert code == 0
    assert data["first_bad"] == c[5] and data["subject"] == "commit 5"
    assert data["diagnosis"]["label"] == "capacity" and data["diagnosis"]["exit_status"] == 1
    outcomes = {t["commit"]: t["outcome"] for t in data["tested"]}
    assert outcomes[c[3]] == "skip"  # git's first midpoint; the ImportError says nothing about memory
    expected = {c[1]: "good", c[2]: "good", c[4]: "good", c[5]: "bad", c[6]: "bad"}
    assert {commit: expected[commit] for commit in outcomes if commit != c[3]} == {
        commit: outcome for commit, outcome in outcomes.items() if commit != c[3]
    }
    assert_restored(repo, c[7])


def test_kind_selects_which_oom_counts(tmp_path, capsys):
    frag = oom(MSG_211_FRAGMENTATION)
    repo, c = make_repo(tmp_path, [OK, oom(MSG_211_CAPACITY), OK, frag, frag])
    code, data = bisect_json(capsys, repo, c[0], c[4], "fragmentation")
    assert code == 0 and data["first_bad"] == c[3]
    assert data["diagnosis"]["label"] == "fragmentation"
    assert all(t["outcome"] == "skip" for t in data["tested"] if t["commit"] == c[1])
    assert_restored(repo, c[4])
    # Chasing capacity, fragmentation failures are someone else's problem: skipped, so git cannot
    # tell which of the commits after the last good one is first.
    code, data = bisect_json(capsys, repo, c[2], c[4], "capacity")
    assert code == 1 and data["first_bad"] is None
    assert set(data["candidates"]) == {c[3], c[4]}
    assert_restored(repo, c[4])


def test_classifier_exit_codes():
    assert classify(0, "", "any").code == GOOD
    assert classify(1, MSG_211_CAPACITY, "capacity").code == BAD
    assert classify(1, MSG_211_CAPACITY, "fragmentation").code == SKIP
    assert classify(1, MSG_211_FRAGMENTATION, "any").code == BAD
    trace = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'x'\n"
    assert classify(1, trace, "any").code == SKIP


def test_the_bad_revision_itself_is_run_for_its_diagnosis(tmp_path, capsys):
    repo, c = make_repo(tmp_path, [OK, OK, oom(MSG_211_CAPACITY)])
    code, data = bisect_json(capsys, repo, c[0], c[2])
    # git ran only the commit in between; the one given as bad was never run under the bisect
    assert code == 0 and data["first_bad"] == c[2]
    assert [(t["commit"], t["outcome"]) for t in data["tested"]] == [(c[1], "good")]
    assert data["diagnosis"]["label"] == "capacity"
    assert_restored(repo, c[2])


def test_refusals_are_one_line_exit_2(tmp_path, capsys):
    repo, c = make_repo(tmp_path, [OK, oom(MSG_211_CAPACITY)])
    cases = [
        (["--repo", str(tmp_path / "nowhere")], f"--repo {tmp_path / 'nowhere'}: no such directory"),
        (["--repo", str(tmp_path)], f"--repo {tmp_path}: not a git work tree"),
        (["--repo", str(repo), "--good", "nosuchrev"], f"--good nosuchrev: not a commit in {repo}"),
    ]
    for extra, message in cases:
        argv = ["bisect", "--good", c[0], "--bad", c[1], *extra, "--", sys.executable, "train.py"]
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == f"memtune bisect: {message}"
    (repo / "train.py").write_text(OK + "# edited\n")
    assert main(["bisect", "--repo", str(repo), "--good", c[0], "--bad", c[1], "--", "true"]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    git(repo, "checkout", "--", "train.py")
    git(repo, "bisect", "start", c[1], c[0])
    assert main(["bisect", "--repo", str(repo), "--good", c[0], "--bad", c[1], "--", "true"]) == 2
    assert "a git bisect is already in progress" in capsys.readouterr().err
    git(repo, "bisect", "reset")


def test_ctrl_c_leaves_the_repository_as_found(tmp_path):
    slow = "import time\ntime.sleep(30)\n"
    repo, c = make_repo(tmp_path, [OK, slow, slow, oom(MSG_211_CAPACITY)])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memtune",
            "bisect",
            "--repo",
            str(repo),
            "--good",
            c[0],
            "--bad",
            c[3],
            "--",
            sys.executable,
            "train.py",
        ],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    bisect_start = repo / ".git" / "BISECT_START"
    deadline = time.monotonic() + 10
    while not bisect_start.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bisect_start.exists()
    time.sleep(0.5)  # let git start the classifier and the sleeping command
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    assert proc.wait(timeout=20) == 130
    assert_restored(repo, c[3])


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["bisect", "--good", "a"],
            "give --good REV and --bad REV (and the command after --), or --configs A B",
        ),
        (
            ["bisect", "--good", "a", "--bad", "b"],
            "give the command to run at each commit after --, e.g. -- python train.py",
        ),
    ],
)
def test_missing_arguments(argv, message, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"memtune bisect: {message}"
