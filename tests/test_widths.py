"""Every command's output at 60, 80 and 120 columns, on the bundled examples and a DeepSeek-V3
config.json (issue 42): no line is wider than the terminal, no number is cut, and no column that
defines a row (a rank, a layout and its recompute and optimizer, EP for an MoE model) is left out.

Each table goes through ``memtune.tables.print_table``; the test records what each was given
(``fit_table``) and checks the printed text against it: every defining column is shown, and every
figure of every shown cell is printed whole.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from memtune import tables
from memtune.cli import main
from memtune.tables import Cell, Column, Fit
from tests.runtime.runtime_fakes import step_values
from tests.runtime.test_report import write_rank

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
JOBS = [str(p) for p in sorted(EXAMPLES.glob("*")) if not p.name.startswith("broken")]
DEEPSEEK = [
    str(ROOT / "tests" / "config" / "fixtures" / "hf" / "deepseek-v3.json"),
    "cluster.num_gpus=8",
    "model.expert_model_parallel_size=8",
]
LOG = ROOT / "tests" / "diagnose" / "fixtures" / "h200" / "capacity.log"
WIDTHS = (60, 80, 120)
GiB = 2**30


@dataclass
class Printed:
    width: int
    columns: tuple[Column, ...]
    rows: list[list[str]]
    fit: Fit


def _commands(tmp: Path) -> Iterator[tuple[str, list[str]]]:
    for job in [*([j] for j in JOBS), DEEPSEEK]:
        name = Path(job[0]).name
        yield f"estimate {name}", ["estimate", *job]
        yield f"estimate --explain {name}", ["estimate", *job, "--explain"]
        yield f"check {name}", ["check", *job]
        yield f"fix {name}", ["fix", *job]
    yield "check broken", ["check", str(EXAMPLES / "broken-llama3-8b.yaml")]
    yield "check --list", ["check", "--list"]
    one = ["--workers", "1", "--top", "3"]
    yield "plan lora", ["plan", str(EXAMPLES / "llama3-8b-lora.yaml"), *one, "--explain", "2"]
    yield "plan megatron-lm", ["plan", str(EXAMPLES / "megatron-lm-llama3-8b.sh"), *one, "--explain", "1"]
    deepseek = [DEEPSEEK[0], "--gpus", "64", "--gbs", "64", "--seq", "4096"]
    pins = ["--pin", "model.expert_model_parallel_size=8", "--pin", "model.pipeline_model_parallel_size=8"]
    yield "plan deepseek-v3", ["plan", *deepseek, *pins, *one, "--explain", "2"]
    mixtral = [str(ROOT / "tests" / "config" / "fixtures" / "hf" / "mixtral-8x7b.json"), "--gpus", "16"]
    yield (
        "plan mixtral-8x7b",
        [
            "plan",
            *mixtral,
            "--gbs",
            "64",
            "--seq",
            "4096",
            "--pin",
            "model.expert_model_parallel_size=1",
            *one,
        ],
    )
    good, bad = _pair(tmp, EXAMPLES / "llama3-70b-sft.yaml")
    yield "diff", ["diff", good, bad]
    yield "diff --all", ["diff", good, bad, "--all"]
    yield "bisect --configs", ["bisect", "--configs", good, bad]
    yield "diff deepseek-v3", ["diff", DEEPSEEK[0], DEEPSEEK[0], *DEEPSEEK[1:], "model.seq_length=4096"]
    long = tmp / ("a-long-directory-name-for-a-training-run" * 3) / "rank0-capacity.log"
    long.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(LOG, long)
    yield "diagnose", ["diagnose", str(long), "--config", str(EXAMPLES / "llama3-70b-sft.yaml")]
    snapshot = ROOT / "tests" / "diagnose" / "fixtures" / "snapshot-fragmentation-torch2.11.pickle"
    yield "diagnose --snapshot", ["diagnose", "--snapshot", str(snapshot)]
    yield "report", ["report", str(_monitor_run(tmp / "run"))]
    yield "models", ["models"]
    yield "recipes", ["recipes"]
    yield "gpus", ["gpus"]
    for bench in (["accuracy"], ["published"], ["resume"], ["plan", "--accuracy"]):
        yield "bench " + " ".join(bench), ["bench", *bench]
    yield "bench step", ["bench", "step", *DEEPSEEK]


def _pair(tmp: Path, example: Path) -> tuple[str, str]:
    """The example, and the example with the allocator setting dropped and `mlp` recompute
    instead of full: a good and a bad config as a user compares them."""
    job = yaml.safe_load(example.read_text(encoding="utf-8"))
    good, bad = tmp / "good.yaml", tmp / "bad.yaml"
    good.write_text(yaml.safe_dump(job), encoding="utf-8")
    del job["env"]["PYTORCH_CUDA_ALLOC_CONF"]
    for key in ("recompute_method", "recompute_num_layers"):
        del job["model"][key]
    job["model"] |= {"recompute_granularity": "selective", "recompute_modules": ["mlp"], "seq_length": 8192}
    bad.write_text(yaml.safe_dump(job), encoding="utf-8")
    return str(good), str(bad)


def _monitor_run(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for rank in range(4):
        write_rank(directory, rank, [step_values((10 + rank) * GiB, 5 * GiB, (11 + rank) * GiB)] * 4)
    return directory


# The columns a row is defined by besides its first (a rank, a run, a name): a layout with its
# recompute and optimizer. The test names them itself, so a table that lets one of them give way
# fails here whatever its Column says.
DEFINING = {"layout", "recompute", "optimizer"}
CUT = re.compile(r"\S…|…\S")  # an ellipsis against a word: something cut short


def _words(cell: str, defining: bool) -> list[str]:
    """The words of a cell that must be printed whole: every word of a defining column's cell,
    those that carry a figure of any other; of a path, its :line."""
    if "/" in cell and " " not in cell.strip():
        found = re.search(r":\d+$", cell)
        return [found[0]] if found else []
    return [word for word in cell.split() if defining or any(ch.isdigit() for ch in word)]


def _text(cell: Cell) -> str:
    return cell.plain if hasattr(cell, "plain") else str(cell)


def _check(out: str, printed: list[Printed], width: int, what: str) -> None:
    lines = out.splitlines()
    too_wide = [line for line in lines if len(line) > width]
    assert not too_wide, f"{what} at {width}: {too_wide[0]!r}"
    for line in lines:
        words = [w for w in line.split() if "/" not in w]  # a path shortened in its middle shows …
        assert not CUT.search(" ".join(words)), f"{what} at {width}: something is cut: {line!r}"
    flat, joined = " ".join(out.split()), "".join(out.split())
    for table in printed:
        shown = set(table.fit.shown)
        defining = [i for i, c in enumerate(table.columns) if c.defines or i == 0 or c.header in DEFINING]
        missing = [table.columns[i].header for i in defining if i not in shown]
        assert not missing, f"{what} at {width}: defining columns left out: {missing}"
        headers = [c.header for c in table.columns]
        if "layout" in headers and what.startswith(("plan deepseek", "plan mixtral")):  # MoE: EP named
            assert all("EP" in _text(row[headers.index("layout")]) for row in table.rows), what
        for row in table.rows:
            for i in shown:
                for figure in _words(_text(row[i]), i in defining):
                    # A name longer than the line (a recipe's, at 60 columns) can only fold onto
                    # the next; everything shorter is printed whole on one line.
                    whole = figure in (flat if len(figure) < width - len("name: ") else joined)
                    assert whole, f"{what} at {width}: {table.columns[i].header} {figure!r} not printed whole"


@pytest.fixture(scope="module")
def cached() -> Iterator[dict[str, Any]]:
    """The plan searches and fix's remedies, computed once for the three widths."""
    memo: dict[str, Any] = {}
    yield memo


def _memoized(memo: dict[str, Any], key: str, compute: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if key not in memo:
            memo[key] = compute(*args, **kwargs)
        return memo[key]

    return call


@pytest.fixture(scope="module")
def commands(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    found = dict(_commands(tmp_path_factory.mktemp("widths")))
    assert list(found) == _NAMES
    return found


_NAMES = [
    *(
        f"{c} {Path(j).name}"
        for j in [*JOBS, DEEPSEEK[0]]
        for c in ("estimate", "estimate --explain", "check", "fix")
    ),
    "check broken",
    "check --list",
    "plan lora",
    "plan megatron-lm",
    "plan deepseek-v3",
    "plan mixtral-8x7b",
    "diff",
    "diff --all",
    "bisect --configs",
    "diff deepseek-v3",
    "diagnose",
    "diagnose --snapshot",
    "report",
    "models",
    "recipes",
    "gpus",
    "bench accuracy",
    "bench published",
    "bench resume",
    "bench plan --accuracy",
    "bench step",
]


@pytest.mark.parametrize("name", _NAMES)
def test_every_line_fits_no_number_is_cut_no_defining_column_is_left_out(
    name, commands, cached, capsys, monkeypatch
):
    import memtune.fix.cli
    import memtune.plan.cli

    argv = commands[name]
    monkeypatch.chdir(ROOT)  # the benchmarks read their sets from the repository's root
    monkeypatch.setattr(
        memtune.plan.cli, "search", _memoized(cached, f"plan {name}", memtune.plan.cli.search)
    )
    if hasattr(memtune.fix.cli, "fixes_for_failure"):
        compute = memtune.fix.cli.fixes_for_failure
        monkeypatch.setattr(memtune.fix.cli, "fixes_for_failure", _memoized(cached, f"fix {name}", compute))
    printed: list[Printed] = []
    fit_table = tables.fit_table

    def recording(width: int, columns: Any, rows: Any) -> Fit:
        fit = fit_table(width, columns, rows)
        printed.append(Printed(width, tuple(columns), [list(r) for r in rows], fit))
        return fit

    monkeypatch.setattr(tables, "fit_table", recording)
    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        printed.clear()
        status = main(argv)
        out = capsys.readouterr().out
        assert status in (0, 1), f"{name}: exit {status}"
        assert out.strip(), f"{name}: printed nothing"
        _check(out, printed, width, name)
