"""Every hostile input in the corpus: a status of 0, 1 or 2, no traceback, bounded error lines.
How long each takes is measured in CPU seconds by benchmarks/hostile_corpus.py, not here."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import assert_well_behaved, run_cli
from tests.hostile.make_corpus import everything

FILES = sorted(everything())
CONFIGS = [f for f in FILES if not f.startswith(("log-", "snap-"))]
LOGS = [f for f in FILES if f.startswith("log-")]
SNAPSHOTS = [f for f in FILES if f.startswith("snap-")]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("command", ["estimate", "check"])
def test_config(capsys, corpus, command, name):
    status, _, err = run_cli(capsys, command, str(corpus / name))
    assert_well_behaved(status, err)


@pytest.mark.parametrize("name", LOGS)
def test_log(capsys, corpus, name):
    status, _, err = run_cli(capsys, "diagnose", "--json", str(corpus / name))
    assert_well_behaved(status, err)


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_snapshot(capsys, corpus, name):
    status, _out, err = run_cli(capsys, "diagnose", "--json", "--snapshot", str(corpus / name))
    assert_well_behaved(status, err)
