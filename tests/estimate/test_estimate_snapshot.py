"""The measured and published runs' estimates are exactly the committed figures
(``tests/estimate/estimate_snapshot.py`` writes them): a refactor moves no byte."""

import json

import pytest

from tests.estimate.estimate_snapshot import SNAPSHOT, figures, runs

COMMITTED = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
RUNS = runs()


def test_snapshot_covers_every_run():
    assert sorted(COMMITTED) == sorted(run_id for run_id, _, _ in RUNS)
    assert sum(run_id.startswith("measured/") for run_id in COMMITTED) >= 300
    assert sum(run_id.startswith("published/") for run_id in COMMITTED) >= 50


@pytest.mark.parametrize("run_id, rank, config", RUNS, ids=[run_id for run_id, _, _ in RUNS])
def test_estimate_is_bit_identical(run_id, rank, config):
    assert figures(rank, config) == COMMITTED[run_id]
