"""Issue 29 item 9 for `memtune run`'s arguments: any --out name is a run directory or one line
with exit 2, and never replaces an existing file or an earlier run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile.conftest import assert_well_behaved
from tests.hostile.test_properties import SETTINGS

# Names stay inside the test's directory: no separators, no "..".
NAMES = st.text(
    st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), max_size=300
).filter(lambda name: name.strip(".") != "" or name.strip() == "")


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("run-out")


# Each example starts a process: fewer than the other properties, unless asked for more.
@settings(SETTINGS, max_examples=int(os.environ.get("MEMTUNE_PROPERTY_EXAMPLES", "25")))
@given(name=NAMES)
def test_any_out_name_is_a_run_or_one_line(name, workdir, capfd):
    from memtune.cli import main

    keep = workdir / "keep.txt"
    keep.write_text("the user's\n")
    earlier = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        status = main(["run", "--out", name, "--", "true"])
    finally:
        os.chdir(cwd)
    err = capfd.readouterr().err
    assert_well_behaved(status, err, allowed=(0, 2))
    if status == 0:
        assert (workdir / name / "output.log").is_file() and (workdir / name / "run.json").is_file()
    else:
        assert err.splitlines()[-1].startswith("memtune run: ")
    assert {p: p.read_bytes() for p in earlier} == earlier
