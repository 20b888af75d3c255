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
from memtune.diagnose.logscan import scan_text
from memtune.regress import gitbisect
from memtune.regress.classify import classify
from memtune.runtime import launch
from tests.diagnose.diagnose_samples import MSG_211_CAPACITY, MSG_211_FRAGMENTATION

OK = "print('step 1 loss 2.3')\n"
IMPORT_ERROR = "import memtune_no_such_module_for_bisect\n"
HANG = "import time\ntime.sleep(60)\n"


def oom(message: str, then: str = "sys.exit(1)") -> str:
    return f"import sys\nprint('step 1 loss 2.3')\nsys.stderr.write({message!r} + '\\n')\n{then}\n"


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


def make_repo(
    tmp_path: Path, scripts: list[str], extra: dict[str, str] | None = None
) -> tuple[Path, list[str]]:
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commits = []
    for i, text in enumerate(scripts):
        (repo / "train.py").write_text(f"# version {i}\n{text}")
        for name, content in (extra or {}).items():
            (repo / name).write_text(f"{content} {i}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        commits.append(git(repo, "rev-parse", "HEAD"))
    return repo, commits


def bisect_argv(repo: Path, good: str, bad: str, *options: str, command: tuple[str, ...] = ()) -> list[str]:
    return [
        "bisect",
        "--repo",
        str(repo),
        "--good",
        good,
        "--bad",
        bad,
        *options,
        "--",
        *(command or (sys.executable, "train.py")),
    ]


def bisect_json(capsys, repo: Path, good: str, bad: str, kind: str = "any") -> tuple[int, dict]:
    code = main(bisect_argv(repo, good, bad, "--kind", kind, "--json"))
    return code, json.loads(capsys.readouterr().out)


def repository_state(repo: Path) -> dict[str, bytes]:
    """Every file of the work tree and of .git (objects aside: no command here writes any), byte
    for byte: HEAD, the branch, the index, reflogs, bisect state, worktree entries, untracked files."""
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and "objects" not in p.relative_to(repo).parts[:2]
    }


def assert_as_found(repo: Path, before: dict[str, bytes]) -> None:
    after = repository_state(repo)
    assert sorted(after) == sorted(before)
    assert [name for name in before if before[name] != after[name]] == []
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_finds_the_commit_that_brought_the_oom_and_skips_the_import_errors(tmp_path, capsys):
    capacity = oom(MSG_211_CAPACITY)
    repo, c = make_repo(tmp_path, [OK, OK, OK, IMPORT_ERROR, IMPORT_ERROR, OK, capacity, capacity, capacity])
    before = repository_state(repo)
    code, data = bisect_json(capsys, repo, c[0], c[8])
    assert code == 0
    assert data["first_bad"] == c[6] and data["subject"] == "commit 6"
    assert data["diagnosis"]["label"] == "capacity" and data["diagnosis"]["exit_status"] == 1
    tested = [(t["commit"], t["outcome"]) for t in data["tested"]]
    assert tested[:2] == [(c[8], "bad"), (c[0], "good")]  # both ends first
    assert tested[2][0] in (c[3], c[4])  # git's midpoints: the ImportErrors say nothing about memory
    expected = {
        c[1]: "good",
        c[2]: "good",
        c[3]: "skip",
        c[4]: "skip",
        c[5]: "good",
        c[6]: "bad",
        c[7]: "bad",
    }
    assert [outcome for _, outcome in tested[2:]] == [expected[commit] for commit, _ in tested[2:]]
    assert (c[5], "good") in tested and (c[6], "bad") in tested
    assert_as_found(repo, before)


def test_kind_selects_which_oom_counts(tmp_path, capsys):
    frag = oom(MSG_211_FRAGMENTATION)
    repo, c = make_repo(tmp_path, [OK, oom(MSG_211_CAPACITY), OK, frag, frag])
    code, data = bisect_json(capsys, repo, c[0], c[4], "fragmentation")
    assert code == 0 and data["first_bad"] == c[3]
    assert data["diagnosis"]["label"] == "fragmentation"
    assert all(t["outcome"] == "skip" for t in data["tested"] if t["commit"] == c[1])
    # Chasing capacity, fragmentation failures are someone else's problem: skipped, so git cannot
    # tell which of the commits after the last good one is first.
    repo2, c2 = make_repo(tmp_path / "2", [OK, OK, frag, frag, oom(MSG_211_CAPACITY)])
    code, data = bisect_json(capsys, repo2, c2[1], c2[4], "capacity")
    assert code == 1 and data["first_bad"] is None
    assert set(data["candidates"]) == {c2[2], c2[3], c2[4]}


def test_classifier_outcomes():
    assert classify(0, scan_text(""), "any").outcome == "good"
    assert classify(1, scan_text(MSG_211_CAPACITY), "capacity").outcome == "bad"
    assert classify(1, scan_text(MSG_211_CAPACITY), "fragmentation").outcome == "skip"
    assert classify(1, scan_text(MSG_211_FRAGMENTATION), "any").outcome == "bad"
    trace = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'x'\n"
    assert classify(1, scan_text(trace), "any").outcome == "skip"
    assert classify(None, scan_text(""), "any").outcome == "skip"  # could not start
    # Stopped at --timeout: a failure, judged by what it printed before it hung.
    assert classify(0, scan_text(MSG_211_CAPACITY), "any", timed_out=True).outcome == "bad"
    assert classify(143, scan_text(OK), "any", timed_out=True).outcome == "skip"


def test_a_bad_commit_that_does_not_fail_is_refused(tmp_path, capsys):
    """Issue 28 item 7 and issue 29 item 6: it used to exit 0 and print "a any OOM"."""
    repo, c = make_repo(tmp_path, [OK, OK, OK])
    before = repository_state(repo)
    assert main(bisect_argv(repo, c[0], c[2])) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"memtune bisect: --bad {c[2]}: the command does not fail with an out-of-memory there "
        "(exit 0 -> good); give a commit where it does"
    )
    assert_as_found(repo, before)
    repo2, c2 = make_repo(tmp_path / "2", [OK, oom(MSG_211_FRAGMENTATION)])
    assert main(bisect_argv(repo2, c2[0], c2[1], "--kind", "capacity")) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"memtune bisect: --bad {c2[1]}: the command does not fail with a capacity out-of-memory there "
        "(exit 1, fragmentation failure -> skip); give a commit where it does"
    )


def test_a_good_commit_that_fails_is_refused(tmp_path, capsys):
    capacity = oom(MSG_211_CAPACITY)
    repo, c = make_repo(tmp_path, [capacity, capacity, IMPORT_ERROR, capacity])
    assert main(bisect_argv(repo, c[0], c[3])) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"memtune bisect: --good {c[0]}: the command does not pass there (exit 1, capacity failure -> bad); "
        "give a commit where it exits 0"
    )
    assert main(bisect_argv(repo, c[2], c[3])) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"memtune bisect: --good {c[2]}: the command does not pass there "
        "(exit 1, no out-of-memory found in the output -> skip); give a commit where it exits 0"
    )


def test_commands_that_edit_delete_and_add_files_leave_the_repository_as_found(tmp_path, capsys):
    """Issue 29 item 1: a build writing a version file used to leave the repo detached mid-bisect."""
    vandal = (
        "import os, pathlib, sys\n"
        "pathlib.Path('VERSION').write_text('built\\n')\n"  # edits a tracked file
        "os.remove('README')\n"  # deletes one
        "pathlib.Path('build').mkdir(exist_ok=True)\n"
        "pathlib.Path('build/out.o').write_text('x')\n"  # adds untracked files
        "pathlib.Path('.gitignore').write_text('ignored.log\\n')\n"
        "pathlib.Path('ignored.log').write_text('x')\n"
        "os.system('git add VERSION build >/dev/null 2>&1')\n"  # and stages them in its checkout
    )
    capacity = vandal + oom(MSG_211_CAPACITY)
    repo, c = make_repo(
        tmp_path, [vandal + OK] * 4 + [capacity] * 3, extra={"VERSION": "v", "README": "readme"}
    )
    (repo / "VERSION").write_text("uncommitted edit\n")  # the user's own changes: kept as they are
    (repo / "notes.txt").write_text("untracked\n")
    git(repo, "add", "notes.txt")
    git(repo, "bisect", "start", "--no-checkout", c[6], c[0])  # and a bisect of their own, in progress
    before = repository_state(repo)
    code, data = bisect_json(capsys, repo, c[0], c[6])
    assert code == 0 and data["first_bad"] == c[4]
    assert_as_found(repo, before)
    git(repo, "bisect", "reset")


def test_timeout_stops_a_hanging_command_and_judges_what_it_printed(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "KILL_GRACE_SECONDS", 0.5)
    deaf = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # needs the SIGKILL
    repo, c = make_repo(
        tmp_path, [OK, deaf + HANG, oom(MSG_211_CAPACITY, then="import time; time.sleep(60)")]
    )
    before = repository_state(repo)
    assert main(bisect_argv(repo, c[0], c[2], "--timeout", "1", "--json")) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert [(t["commit"], t["outcome"]) for t in data["tested"]] == [
        (c[2], "bad"),
        (c[0], "good"),
        (c[1], "skip"),
    ]
    assert f"memtune bisect: {c[2][:12]} timed out, capacity failure -> bad" in captured.err
    assert (
        f"memtune bisect: {c[1][:12]} timed out, no out-of-memory found in the output -> skip" in captured.err
    )
    assert set(data["candidates"]) == {c[1], c[2]}
    assert_as_found(repo, before)


def test_the_work_is_bounded(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gitbisect, "MAX_BISECT_RUNS", 4)
    repo, c = make_repo(tmp_path, [OK, *[IMPORT_ERROR] * 6, oom(MSG_211_CAPACITY)])
    before = repository_state(repo)
    assert main(bisect_argv(repo, c[0], c[7])) == 2
    err = capsys.readouterr().err.splitlines()
    assert len([line for line in err if line.endswith("-> skip")]) == 2
    assert err[-1] == (
        "memtune bisect: stopped after 4 commands run, memtune's limit for one bisect: the first bad commit "
        "is still one of 7 commits; bisect a narrower range (--good, --bad)"
    )
    assert_as_found(repo, before)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9", "abc", "", "٣"])
def test_timeout_values_are_checked(value, tmp_path, capsys):
    repo, c = make_repo(tmp_path, [OK, oom(MSG_211_CAPACITY)])
    assert main(bisect_argv(repo, c[0], c[1], "--timeout", value)) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"memtune bisect: --timeout {value!r}: must be a number of seconds, more than 0 and at most 604800"
    ]


def test_refusals_are_one_line_exit_2(tmp_path, capsys):
    repo, c = make_repo(tmp_path, [OK, oom(MSG_211_CAPACITY)])
    cases = [
        (["--repo", str(tmp_path / "nowhere")], f"--repo {tmp_path / 'nowhere'}: no such directory"),
        (["--repo", str(tmp_path)], f"--repo {tmp_path}: not a git work tree"),
        (["--repo", str(repo), "--good", "nosuchrev"], f"--good nosuchrev: not a commit in {repo}"),
        (["--repo", str(repo), "--good", c[1]], f"--good {c[1]} and --bad {c[1]} are the same commit"),
    ]
    for extra, message in cases:
        argv = ["bisect", "--good", c[0], "--bad", c[1], *extra, "--", sys.executable, "train.py"]
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == f"memtune bisect: {message}"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_for(path: Path, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_everything_and_leaves_the_repository_as_found(signum, tmp_path):
    """Issue 29 item 4: SIGTERM/SIGHUP used to leave git bisect, the classifier and the command running."""
    pids = tmp_path / "pids"
    pids.mkdir()
    slow = (
        "import os, subprocess, sys, time\n"
        "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids / 'command')!r}, 'w').write(f'{{os.getpid()}} {{helper.pid}}')\n"
        "time.sleep(60)\n"
    )
    capacity = oom(MSG_211_CAPACITY)
    repo, c = make_repo(tmp_path, [OK, OK, slow, capacity, capacity])
    before = repository_state(repo)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memtune", *bisect_argv(repo, c[0], c[4])],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        _wait_for(pids / "command")
        time.sleep(0.2)  # the file is written before its content: let it land
        command_pid, helper_pid = map(int, (pids / "command").read_text().split())
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # what Ctrl-C in a terminal does: the whole foreground group
        else:
            proc.send_signal(signum)  # a scheduler's SIGTERM or a closed terminal's SIGHUP: memtune alone
        assert proc.wait(timeout=30) == 128 + signum
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert err.splitlines()[-1] == (
        f"memtune bisect: stopped by {signal.Signals(signum).name}; the repository is as it was"
    )
    assert not _alive(command_pid) and not _alive(helper_pid)
    assert_as_found(repo, before)


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


def test_good_must_be_an_ancestor_of_bad(tmp_path, capsys):
    repo, c = make_repo(tmp_path, [OK, oom(MSG_211_CAPACITY)])
    git(repo, "checkout", "-q", "-b", "side", c[0])
    (repo / "train.py").write_text(OK + "# on a side branch\n")
    git(repo, "commit", "-q", "-am", "side")
    side = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    assert main(bisect_argv(repo, side, c[1])) == 2
    # refused before any command ran
    assert capsys.readouterr().err.splitlines() == [
        f"memtune bisect: --good {side} is not an ancestor of --bad {c[1]}"
    ]


def test_a_command_that_cannot_start_is_named(tmp_path, capsys):
    repo, c = make_repo(tmp_path, [OK, oom(MSG_211_CAPACITY)])
    missing = str(tmp_path / "no-such-program")
    assert main(bisect_argv(repo, c[0], c[1], command=(missing,))) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"memtune bisect: --bad {c[1]}: cannot start {missing!r} there: No such file or directory"
    )
