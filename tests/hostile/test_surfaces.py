"""Every case of the third campaign's surfaces (tests/hostile/surfaces.py): one of its exit
statuses, no traceback, bounded error lines, and the user's files left as found. How long each
takes and how much memory is measured by benchmarks/hostile_corpus.py, not here."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune import infile
from tests.hostile import surfaces
from tests.hostile.conftest import assert_well_behaved, run_cli


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, surfaces.Case]]:
    directory = tmp_path_factory.mktemp("surfaces")
    return directory, {case.name: case for case in surfaces.build(directory)}


def _names() -> list[str]:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        return [case.name for case in surfaces.build(Path(scratch))]


@pytest.mark.parametrize("name", _names())
def test_case(capfd, monkeypatch, built, name):
    monkeypatch.setattr(infile, "FIFO_WAIT_SECONDS", 0.2)
    directory, cases = built
    precious = directory / "precious.txt"
    before = precious.read_bytes()
    case = cases[name]
    status, _, err = run_cli(capfd, *case.argv)
    assert_well_behaved(status, err, allowed=case.statuses)
    assert precious.read_bytes() == before
