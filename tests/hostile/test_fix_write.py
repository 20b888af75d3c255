"""``memtune fix --write``: never over a file without --force, never over the input config, and
atomically (issue 29 item 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memtune.errors import InputError
from memtune.outfile import check_output_path, write_atomically
from tests.hostile.conftest import run_cli

EXAMPLE = Path("examples/llama3-70b-sft.yaml")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """The example on GPUs of 64 GiB, where it does not fit: fix has a suggestion to write."""
    text = EXAMPLE.read_text().replace("  gpu: H100-80GB\n", "  gpu: H100-80GB\n  gpu_memory_gib: 64\n")
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_the_input_config_is_never_replaced_even_with_force(capsys, config):
    before = config.read_bytes()
    for extra in ((), ("--force",)):
        status, out, err = run_cli(capsys, "fix", str(config), "--write", str(config), *extra)
        assert (status, out) == (2, "")
        assert err == f"memtune fix: --write {config}: is the input {config}; write to another file\n"
    link = config.parent / "link.yaml"
    link.symlink_to(config.name)
    status, _, err = run_cli(capsys, "fix", str(config), "--write", str(link), "--force")
    assert status == 2 and "is the input" in err
    assert config.read_bytes() == before


def test_an_existing_file_needs_force(capsys, config, tmp_path):
    out_file = tmp_path / "out.yaml"
    out_file.write_text("mine\n")
    status, _, err = run_cli(capsys, "fix", str(config), "--write", str(out_file))
    assert status == 2
    assert err == f"memtune fix: --write {out_file}: already exists (--force replaces it)\n"
    assert out_file.read_text() == "mine\n"
    status, out, _ = run_cli(capsys, "fix", str(config), "--write", str(out_file), "--force")
    assert status == 0 and "written to" in out
    assert out_file.read_text().startswith("# written by memtune fix: ")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_a_new_file_is_written_with_the_usual_mode(capsys, config, tmp_path):
    out_file = tmp_path / "new.yaml"
    status, _, _ = run_cli(capsys, "fix", str(config), "--write", str(out_file))
    assert status == 0
    umask = os.umask(0)
    os.umask(umask)
    assert out_file.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("missing/out.yaml", "directory {tmp}/missing does not exist"),
        (".", "is a directory"),
        ("new/", "names a directory; give a file name"),
    ],
)
def test_bad_targets_are_refused_before_any_work(capsys, config, tmp_path, target, message):
    path = str(tmp_path) if target == "." else f"{tmp_path}/{target}"
    status, _, err = run_cli(capsys, "fix", str(config), "--write", path)
    assert status == 2
    assert err == f"memtune fix: --write {path}: {message.format(tmp=tmp_path)}\n"


def test_force_without_write_is_refused(capsys, config):
    status, _, err = run_cli(capsys, "fix", str(config), "--force")
    assert (status, err) == (2, "memtune fix: --force goes with --write OUT.yaml\n")


def test_a_file_created_after_the_check_is_not_replaced(tmp_path):
    target = check_output_path("--write", str(tmp_path / "late.yaml"), force=False)
    target.write_text("created meanwhile\n")
    with pytest.raises(InputError, match=r"late\.yaml: already exists \(--force replaces it\)$"):
        write_atomically(target, lambda handle: handle.write(b"new"), replace=False, option="--write")
    assert target.read_text() == "created meanwhile\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.yaml"]


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "out.yaml"

    def fail(handle: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError, match=r"out\.yaml: cannot write \(No space left on device\)$"):
        write_atomically(target, fail, replace=True, option="--write")
    assert list(tmp_path.iterdir()) == []


def test_a_device_is_not_replaced_even_with_force(capsys, config):
    status, _, err = run_cli(capsys, "fix", str(config), "--write", "/dev/null", "--force")
    assert (status, err) == (2, "memtune fix: --write /dev/null: not a regular file\n")
    assert not Path("/dev/null").is_file()


def test_a_name_at_the_file_systems_limit_is_written(capsys, config, tmp_path):
    out_file = tmp_path / ("x" * 250 + ".yaml")
    status, _, _ = run_cli(capsys, "fix", str(config), "--write", str(out_file))
    assert status == 0 and out_file.read_text().startswith("# written by memtune fix: ")
