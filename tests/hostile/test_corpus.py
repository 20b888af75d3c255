"""Every hostile input in the corpus: a status of 0, 1 or 2, no traceback, bounded error lines."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import CORPUS, assert_well_behaved, run_cli

FILES = sorted(p.name for p in CORPUS.iterdir())
CONFIGS = [f for f in FILES if not f.startswith(("log-", "snap-"))]
LOGS = [f for f in FILES if f.startswith("log-")]
SNAPSHOTS = [f for f in FILES if f.startswith("snap-")]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("command", ["estimate", "check"])
def test_config(capsys, command, name):
    status, _, err, seconds = run_cli(capsys, command, str(CORPUS / name))
    assert_well_behaved(status, err)
    assert seconds < 10, seconds


@pytest.mark.parametrize("name", LOGS)
def test_log(capsys, name):
    status, _, err, seconds = run_cli(capsys, "diagnose", "--json", str(CORPUS / name))
    assert_well_behaved(status, err)
    assert seconds < 10, seconds


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_snapshot(capsys, name):
    status, _out, err, seconds = run_cli(capsys, "diagnose", "--json", "--snapshot", str(CORPUS / name))
    assert_well_behaved(status, err)
    assert seconds < 10, seconds
