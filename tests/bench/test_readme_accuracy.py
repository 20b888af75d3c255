"""The README's accuracy table is what `memtune bench accuracy` computes on the measured set."""

from __future__ import annotations

import re
from pathlib import Path

from memtune.bench.accuracy import evaluate, read_runs, summarize
from memtune.cli import main

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(
    r"^\| (?P<split>[a-z0-9]+)[^|]* \| (?P<runs>\d+) \| (?P<mean>[\d.]+)% / (?P<max>[\d.]+)% \| "
    r"(?P<mlm_mean>[\d.]+)% / (?P<mlm_max>[\d.]+)% \|$"
)


def readme_rows() -> dict[str, tuple[int, str, str, str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Accuracy", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if m := ROW.match(line):
            rows[m["split"]] = (int(m["runs"]), m["mean"], m["max"], m["mlm_mean"], m["mlm_max"])
    return rows


def test_readme_accuracy_table_is_reproduced():
    results = [evaluate(r) for r in read_runs([ROOT / "benchmarks" / "measured"])]
    rows = readme_rows()
    assert rows, "the README's accuracy table was not found"
    assert set(rows) == {r.split for r in results}
    for split, (runs, mean, worst, mlm_mean, mlm_max) in rows.items():
        s = summarize([r for r in results if r.split == split])
        assert s is not None
        assert (s.runs, f"{s.mean_abs_error:.1%}", f"{s.max_abs_error:.1%}") == (
            runs,
            f"{mean}%",
            f"{worst}%",
        )
        assert (f"{s.megatron_lm_mean_abs_error:.1%}", f"{s.megatron_lm_max_abs_error:.1%}") == (
            f"{mlm_mean}%",
            f"{mlm_max}%",
        )


def test_unknown_split_is_bad_input(capsys):
    assert main(["bench", "accuracy", "--split", "nope"]) == 2
    assert (
        "--split: no run is in split 'nope'; the splits are all, fresh, fresh2, holdout, tune"
        in capsys.readouterr().err
    )


FAMILY_ROW = re.compile(r"^\| (?P<family>[A-Za-z0-9 ]+) \| (?P<tune>\d[^|]*|-) \| (?P<holdout>\d[^|]*|-) \|$")


def test_readme_published_family_table_is_reproduced():
    from memtune.bench.published import evaluate_published, published_report, read_published
    from memtune.bench.render import _family_cell

    report = published_report(
        [evaluate_published(r) for r in read_published([ROOT / "benchmarks" / "published" / "memory"])]
    )
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Accuracy", 1)[1].split("\n## ", 1)[0]
    rows = {
        m["family"]: (m["tune"], m["holdout"])
        for line in section.splitlines()
        if (m := FAMILY_ROW.match(line))
    }
    expected = {
        f.family: (_family_cell(f.splits["tune"]), _family_cell(f.splits["holdout"])) for f in report.families
    }
    assert rows == expected
