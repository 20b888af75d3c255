from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from memtune.cli import main

CORPUS = Path(__file__).parent / "corpus"

EXAMPLES = int(os.environ.get("MEMTUNE_PROPERTY_EXAMPLES", "60"))
# The properties that take pytest's function-scoped fixtures (tmp_path, capsys): derandomized at the
# default number of examples, no deadline.
FIXTURE_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=EXAMPLES <= 60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole corpus, the generated large inputs included."""
    from tests.hostile import make_corpus

    directory = tmp_path_factory.mktemp("corpus")
    make_corpus.write(directory)
    return directory


MAX_ERROR_LINES = 21  # MAX_PROBLEM_LINES plus the "... and N more" line


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (status, stdout, stderr). An escaping exception fails the test."""
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        status = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return status, out, err


def assert_well_behaved(status: int, err: str, allowed: tuple[int, ...] = (0, 1, 2)) -> None:
    assert status in allowed, (status, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    lines = err.splitlines()
    assert len(lines) <= MAX_ERROR_LINES, lines[:3]
    assert all(len(line) < 2000 for line in lines), max(lines, key=len)[:200]
    if status == 2:
        assert lines and all(line.startswith(("memtune", "usage:")) or "error:" in line for line in lines[:1])
