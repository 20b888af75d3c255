"""``memtune page``: one self-contained HTML file whose every figure is a value of its data."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from memtune.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama3-70b-sft.yaml"
OOM_LOG = ROOT / "tests" / "diagnose" / "fixtures" / "h200" / "capacity.log"
NOT_FITTING = ["model.recompute_granularity=null", "train.micro_batch_size=2"]

# Each format as a reader would write it by hand (independent of memtune/page/html.py).
EXPECTED = {
    "gib": lambda v: f"{v / 2**30:.2f}",
    "pct": lambda v: f"{v * 100:+.1f}%",
    "share": lambda v: f"{v * 100:.1f}%",
    "s": lambda v: f"{v:.3f}",
    "int": lambda v: f"{v:,}",
    "rate": lambda v: f"{v:,.0f}",
    "text": str,
}


class _Page(HTMLParser):
    """The figures (``data-json``), bars (``data-bytes``), headings, the data and every URL."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[tuple[str, str, str]] = []
        self.bars: list[tuple[int, float]] = []
        self.headings: list[str] = []
        self.urls: list[str] = []
        self.data = ""
        self.scales: list[float] = []
        self._open: list[list] = []
        self._tag = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._tag = tag
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        if "data-scale" in a:
            self.scales.append(float(a["data-scale"]))
        if tag == "rect" and "data-bytes" in a:
            self.bars.append((int(a["data-bytes"]), float(a["width"])))
        if "data-json" in a:
            self._open.append([a["data-json"], a["data-format"], ""])

    def handle_endtag(self, tag):
        if tag == "span" and self._open:
            path, fmt, text = self._open.pop()
            self.figures.append((path, fmt, text))

    def handle_data(self, data):
        if self._open:
            self._open[-1][2] += data
        if self._tag == "h2":
            self.headings.append(data)
        if self._tag == "script":
            self.data += data


def _value(doc, path):
    for part in path.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def _write(tmp_path_factory, *words: str) -> tuple[str, _Page, dict]:
    out = tmp_path_factory.mktemp("page") / "report.html"
    assert main(["page", *words, "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    return text, page, json.loads(page.data)


@pytest.fixture(scope="module")
def fitting(tmp_path_factory):
    return _write(tmp_path_factory, str(EXAMPLE))


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    return _write(tmp_path_factory, str(EXAMPLE), *NOT_FITTING, "--oom-log", str(OOM_LOG), "--top", "2")


@pytest.mark.parametrize("which", ["fitting", "failing"])
def test_every_figure_equals_the_pages_data(request, which):
    _, page, doc = request.getfixturevalue(which)
    assert len(page.figures) > 60
    for path, fmt, text in page.figures:
        assert text == EXPECTED[fmt](_value(doc, path)), path


@pytest.mark.parametrize("which", ["fitting", "failing"])
def test_every_bar_draws_its_bytes_to_scale(request, which):
    _, page, doc = request.getfixturevalue(which)
    (scale,) = page.scales
    drawn = [b for b, _ in page.bars]
    expected = [
        size for r in doc["estimate"]["ranks"] for size in [*r["components"].values(), r["non_pytorch_bytes"]]
    ]
    assert drawn == expected
    assert all(abs(width - size * scale) < 0.01 for size, width in page.bars)


def test_the_page_has_each_section_and_the_data_is_what_json_prints(fitting, failing, capsys):
    assert fitting[1].headings == [
        "The job",
        "Memory per pipeline rank",
        "Check",
        "Plan: the fastest layouts that fit",
        "The simulated step",
        "Assumptions",
    ]
    assert "Fix: ranked options" in failing[1].headings
    doc = failing[2]
    assert doc["fix"]["suggestions"] and doc["fix"]["diagnosis"] == "capacity"
    assert doc["estimate"]["verdict"] == "does not fit" and len(doc["plan"]["layouts"]) == 2
    capsys.readouterr()
    assert main(["page", str(EXAMPLE), "--json"]) == 0
    printed, shown = json.loads(capsys.readouterr().out), json.loads(json.dumps(fitting[2]))
    del printed["plan"]["seconds"], shown["plan"]["seconds"]  # the search's own wall time
    assert printed == shown


def test_the_page_is_self_contained_and_under_one_megabyte(fitting):
    text, page, _ = fitting
    assert page.urls == []
    assert not re.search(r"https?://|url\(|@import|<link|<img|<iframe", text, re.I)
    assert re.findall(r"<script[^>]*>", text) == ['<script type="application/json" id="memtune-data">']
    assert len(text.encode()) < 1_000_000
    assert '<meta name=viewport content="width=device-width,initial-scale=1">' in text
    assert "@media print" in text


def test_a_job_megatron_refuses_gets_its_findings_and_nothing_else(tmp_path_factory):
    _, page, doc = _write(tmp_path_factory, str(ROOT / "examples" / "broken-llama3-8b.yaml"))
    assert page.headings == ["The job", "Check"]
    assert doc["estimate"] is None and {"PAR006", "SEQ001"} <= {f["code"] for f in doc["check"]["findings"]}


def test_the_page_is_never_written_over_an_input(tmp_path, capsys):
    copy = tmp_path / "job.yaml"
    copy.write_text(EXAMPLE.read_text())
    assert main(["page", str(copy), "-o", str(copy), "--force"]) == 2
    assert "is the input" in capsys.readouterr().err
