"""The figures README.md and docs/ quote come from one command, `memtune bench figures`, and a
document that drifts from it fails here (issue 42 item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.bench import figures
from memtune.check.registry import catalogue
from memtune.cli import main
from memtune.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_the_documents_quote_the_current_figures(at_root, capsys):
    assert main(["bench", "figures", "--check"]) == 0, capsys.readouterr().out
    # Every figure is quoted somewhere, the false-fit table in both the README and docs/verdict.md.
    where = figures.marked()
    assert set(where) == set(figures.FIGURES)
    assert where["false-fits"] == [Path("README.md"), Path("docs/verdict.md")]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"<!-- figure: rule-count -->{len(catalogue())} rules<!-- /figure -->" in readme


def test_a_drifted_figure_is_named_and_write_restores_it(at_root, tmp_path):
    text = (ROOT / "docs" / "verdict.md").read_text(encoding="utf-8")
    drifted = tmp_path / "verdict.md"
    drifted.write_text(text.replace("| 0 of 240 |", "| 0 of 192 |"), encoding="utf-8")
    assert figures.drift((drifted,)) == [figures.Drift(drifted, "false-fits")]
    assert figures.rewritten(drifted.read_text(encoding="utf-8")) == text


def test_an_unknown_figure_is_bad_input(at_root, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- figure: nope -->x<!-- /figure -->", encoding="utf-8")
    with pytest.raises(InputError, match="unknown figure 'nope' in a document; the figures are rule-count"):
        figures.drift((doc,))
