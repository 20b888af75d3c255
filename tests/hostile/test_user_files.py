"""Issue 43 items 2, 3, 8 and 11: what memtune writes never reaches a file it was not asked to
write: not through a link, not into a device or a pipe, not over a file it reads. Every test
compares the user's files byte for byte before and after."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.hostile.conftest import run_cli

EXAMPLE = Path("examples/llama3-70b-sft.yaml")  # does not fit: fix has a suggestion to write
SMALL = Path("examples/llama3-8b-lora.yaml")
LINK = "is a symbolic link; memtune does not write through links (name the file itself)"


def files_of(*roots: Path) -> dict[str, bytes | str]:
    """Every file under ``roots`` byte for byte, and every link by its target."""
    found: dict[str, bytes | str] = {}
    for root in roots:
        for path in sorted([root, *root.rglob("*")] if root.is_dir() else [root]):
            if path.is_symlink():
                found[str(path)] = f"-> {os.readlink(path)}"
            elif path.is_file():
                found[str(path)] = path.read_bytes()
    return found


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file of the user's that no command here is asked to write."""
    precious = tmp_path / "home" / ".bashrc"
    precious.parent.mkdir()
    precious.write_text("export PATH=/usr/bin\n")
    return precious


# --- run --out --------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["output.log", "run.json"])
@pytest.mark.parametrize("force", [False, True])
def test_run_out_never_writes_through_a_link(capfd, tmp_path, outside, entry, force):
    out = tmp_path / "out"
    out.mkdir()
    (out / entry).symlink_to(outside)
    before = files_of(tmp_path)
    status, _, err = run_cli(capfd, "run", "--out", str(out), *(["--force"] if force else []), "--", "true")
    assert status == 2
    expected = (
        f"--out {out / entry}: {LINK}"
        if force
        else f"--out {out} holds an earlier run ({entry}); give a new directory, or --force to replace it"
    )
    assert err == f"memtune run: {expected}\n"
    assert files_of(tmp_path) == before


def test_run_out_force_replaces_a_hard_linked_log_without_touching_the_other_name(capfd, tmp_path, outside):
    out = tmp_path / "out"
    out.mkdir()
    os.link(outside, out / "output.log")
    before = outside.read_bytes()
    status, _, _ = run_cli(capfd, "run", "--out", str(out), "--force", "--", "echo", "new output")
    assert status == 0
    assert (out / "output.log").read_bytes() == b"new output\n"
    assert outside.read_bytes() == before


def test_run_out_refuses_a_pipe_in_the_logs_place_without_waiting(capfd, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "output.log")
    status, _, err = run_cli(capfd, "run", "--out", str(out), "--force", "--", "true")
    assert (status, err) == (2, f"memtune run: --out {out / 'output.log'}: not a regular file\n")


# --- measure --snapshot -----------------------------------------------------------------------

NO_PYTHON = ("--python", "/nonexistent/python")  # were the run to start, this would be the error


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--snapshot", "{config}"), "--snapshot {config}: is the input {config}; write to another file"),
        (
            ("--snapshot", "{config}", "--force"),
            "--snapshot {config}: is the input {config}; write to another file",
        ),
        (("--snapshot", "{mine}"), "--snapshot {mine}: already exists (--force replaces it)"),
        (("--snapshot", "{link}", "--force"), "--snapshot {link}: " + LINK),
        (
            ("--snapshot", "{tmp}/missing/s.pickle"),
            "--snapshot {tmp}/missing/s.pickle: directory {tmp}/missing does not exist",
        ),
        (
            ("--snapshot", "{tmp}/s.pickle", "--resume"),
            "--snapshot records the training run; with --resume there are two runs and no snapshot is recorded: measure without --resume to record one",
        ),
        (("--force",), "--force goes with --snapshot FILE.pickle"),
        (
            ("--timeout", "nan"),
            "--timeout 'nan': must be a number of seconds, more than 0 and at most 604800",
        ),
        (
            ("--timeout", "inf"),
            "--timeout 'inf': must be a number of seconds, more than 0 and at most 604800",
        ),
        (("--timeout", "-5"), "--timeout '-5': must be a number of seconds, more than 0 and at most 604800"),
        (
            ("--timeout", "1e999"),
            "--timeout '1e999': must be a number of seconds, more than 0 and at most 604800",
        ),
        (("--iters", "1000000000"), "--iters 1000000000: at most 1000 (the peak is steady from iteration 2)"),
    ],
)
def test_measure_checks_its_options_and_snapshot_path_before_the_run(
    capsys, tmp_path, outside, extra, message
):
    config = Path(shutil.copy(SMALL, tmp_path / "job.yaml"))
    mine = tmp_path / "mine.pickle"
    mine.write_bytes(b"the user's snapshot")
    link = tmp_path / "link.pickle"
    link.symlink_to(outside)
    names = {"config": config, "mine": mine, "link": link, "tmp": tmp_path}
    before = files_of(tmp_path)
    argv = [a.format(**names) for a in ("measure", "{config}", "--rank", "0", *NO_PYTHON, *extra)]
    status, out, err = run_cli(capsys, *argv)
    assert (status, out, err) == (2, "", f"memtune measure: {message.format(**names)}\n")
    assert files_of(tmp_path) == before


# --- fix --write --------------------------------------------------------------------------------

OOM_LOG = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.31 GiB is free.\n"
)


@pytest.mark.parametrize("read_as", ["--oom-log", "--snapshot"])
def test_fix_write_never_replaces_a_file_it_reads(capsys, tmp_path, read_as):
    config = Path(shutil.copy(EXAMPLE, tmp_path / "job.yaml"))
    log = tmp_path / "train.log"
    log.write_text(OOM_LOG)
    before = files_of(tmp_path)
    status, out, err = run_cli(capsys, "fix", str(config), read_as, str(log), "--write", str(log), "--force")
    assert (status, out) == (2, "")
    assert err == f"memtune fix: --write {log}: is the input {log}; write to another file\n"
    assert files_of(tmp_path) == before


def test_fix_write_never_replaces_a_log_in_a_folder_it_reads(capsys, tmp_path):
    config = Path(shutil.copy(EXAMPLE, tmp_path / "job.yaml"))
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text(OOM_LOG)
    before = files_of(tmp_path)
    target = logs / "rank0.log"
    status, _, err = run_cli(
        capsys, "fix", str(config), "--oom-log", str(logs), "--write", str(target), "--force"
    )
    assert (status, err) == (
        2,
        f"memtune fix: --write {target}: is a file of the input {logs}; write to another file\n",
    )
    assert files_of(tmp_path) == before


def test_fix_write_refuses_a_link_even_with_force(capsys, tmp_path, outside):
    config = Path(shutil.copy(EXAMPLE, tmp_path / "job.yaml"))
    link = tmp_path / "fixed.yaml"
    link.symlink_to(outside)
    before = files_of(tmp_path)
    status, _, err = run_cli(capsys, "fix", str(config), "--write", str(link), "--force")
    assert (status, err) == (2, f"memtune fix: --write {link}: {LINK}\n")
    assert files_of(tmp_path) == before


# --- --plot -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("p.xyz", "the file name must end in .png, .pdf, .svg (the extension picks the format)"),
        ("noext", "the file name must end in .png, .pdf, .svg (the extension picks the format)"),
        ("dir/", "names a directory; give a file name such as plot.png"),
        ("missing/p.png", "directory {tmp}/missing does not exist"),
        ("link.png", LINK),
    ],
)
def test_bench_step_plot_is_checked_before_any_work(capsys, tmp_path, outside, target, message):
    (tmp_path / "link.png").symlink_to(outside)
    before = files_of(tmp_path)
    path = f"{tmp_path}/{target}"
    status, out, err = run_cli(capsys, "bench", "step", str(SMALL), "--plot", path)
    assert (status, out) == (2, "")
    assert err == f"memtune bench: --plot {path}: {message.format(tmp=tmp_path)}\n"
    assert files_of(tmp_path) == before


def test_a_pipe_as_plot_is_refused_and_nothing_is_created_beside_it(capsys, tmp_path):
    """`--plot /dev/null` used to create /dev/null.png: matplotlib appends .png to a name without one."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    status, _, err = run_cli(capsys, "bench", "step", str(SMALL), "--plot", str(pipe))
    assert (status, err) == (
        2,
        f"memtune bench: --plot {pipe}: the file name must end in .png, .pdf, .svg (the extension picks the format)\n",
    )
    assert list(tmp_path.iterdir()) == [pipe]
    named = tmp_path / "pipe.png"
    os.mkfifo(named)
    status, _, err = run_cli(capsys, "bench", "step", str(SMALL), "--plot", str(named))
    assert (status, err) == (2, f"memtune bench: --plot {named}: not a regular file\n")


@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "step", str(SMALL), "--plot", "{out}"),
        ("plan", "llama3-8b", "--gpus", "8", "--gbs", "16", "--top", "1", "--plot", "{out}"),
    ],
)
def test_a_plot_that_fails_to_draw_names_the_file(capsys, tmp_path, monkeypatch, argv):
    from matplotlib.figure import Figure

    def fail(self, *args, **kwargs):
        raise ValueError("Image size of 100000x100000 pixels is too large")

    monkeypatch.setattr(Figure, "savefig", fail)
    out = tmp_path / "p.png"
    status, _, err = run_cli(capsys, *(a.format(out=out) for a in argv))
    assert status == 2
    assert err.splitlines()[-1].endswith(
        f"--plot {out}: cannot draw the plot (Image size of 100000x100000 pixels is too large)"
    )
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind


def test_a_plot_over_an_input_is_refused(capsys, tmp_path):
    snapshot_dir = tmp_path / "snaps"
    snapshot_dir.mkdir()
    log = tmp_path / "train.png"  # a log may have any name
    log.write_text(OOM_LOG)
    before = files_of(tmp_path)
    status, _, err = run_cli(capsys, "diagnose", str(log), "--snapshot", str(log), "--plot", str(log))
    assert (status, err) == (
        2,
        f"memtune diagnose: --plot {log}: is the input {log}; write to another file\n",
    )
    assert files_of(tmp_path) == before
