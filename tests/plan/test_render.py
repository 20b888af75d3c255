"""`memtune plan` fits the terminal and names what stopped every layout."""

from __future__ import annotations

import json
import re

import pytest

from memtune.cli import main

SEARCH = ["plan", "llama3-8b", "--gpus", "8", "--seq", "4096", "--gbs", "32"]
SEARCH += ["--pin", "model.tensor_model_parallel_size=2", "--pin", "model.sequence_parallel=true"]


def _plan(capsys, monkeypatch, width: int, args: list[str]) -> tuple[int, list[str]]:
    monkeypatch.setenv("COLUMNS", str(width))
    code = main([*args, "--workers", "1"])
    return code, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_one_line_per_layout_within_the_width_without_trailing_blanks(capsys, monkeypatch, width):
    code, lines = _plan(capsys, monkeypatch, width, SEARCH)
    assert code == 0
    assert all(len(line) <= width and line == line.rstrip() for line in lines)
    header = next(i for i, line in enumerate(lines) if line.startswith("#  layout"))
    rows = lines[header + 2 : header + 7]
    assert [row.split()[0] for row in rows] == ["1", "2", "3", "4", "5"]
    # at fixed tokens the larger micro-batch is the faster (measured: MBS 4 ~4% over MBS 2)
    assert rows[0].split()[1:5] == ["TP2", "PP1", "MBS4", "SP"]
    if width == 80:
        # DP (the layout implies it) and TFLOP/s (tokens/s says the same) give way first; what
        # defines a layout (its sizes, recompute and optimizer) never does
        assert lines[header].split()[1:] == [
            "layout", "recompute", "optimizer", "peak", "headroom", "tok/s/GPU", "rel"
        ]  # fmt: skip
        assert lines[header + 7] == "not shown at 80 columns: DP, TFLOP/s"
    else:
        assert lines[header].split()[1:4] == ["layout", "DP", "recompute"]
        assert (
            rows[0].split()[5] == "4" and rows[0].endswith("100.0%") and "not shown" not in "\n".join(lines)
        )


def test_thirteen_gpus_name_divisibility_not_memory(capsys, monkeypatch):
    # 32 heads and 32 layers: no TP and no split of the layers over 13 stages (uneven first/last
    # stages would need a middle stage of 3 layers and the edges -1 between them)
    code, lines = _plan(
        capsys, monkeypatch, 80, ["plan", "llama3-8b", "--gpus", "13", "--seq", "4096", "--gbs", "64"]
    )
    assert code == 1
    assert lines[:9] == [
        "No layout fits: every one of the 3,192 layouts breaks a divisibility rule.",
        "  PAR001  3,078  The GPU count is not a multiple of TP × PP × CP",
        "  BAT001    114  The global batch is not a multiple of micro-batch ×",
        "                 data-parallel size",
        "  PP 13: the 32 layers split over that many stages neither evenly, nor with",
        "first/last stage sizes Megatron accepts (PIP001, PIP006-008), nor with an",
        "explicit layout",
        "Try a GPU count with small factors (a multiple of 8) or a global batch size",
        "divisible by the data-parallel size.",
    ]
    assert "more GPUs" not in "\n".join(lines)


def test_a_model_too_large_for_its_gpus_names_memory(capsys, monkeypatch):
    args = ["plan", "llama3-70b", "--gpus", "1", "--seq", "8192", "--gbs", "8"]
    code, lines = _plan(capsys, monkeypatch, 80, args)
    assert code == 1
    assert lines[:2] == [
        "No layout fits: none of the layouts that divide evenly fits in the GPU's memory.",
        "Try more GPUs, LoRA (--mode lora) or a shorter sequence.",
    ]


def test_the_json_names_the_constraint_too(capsys, monkeypatch):
    code, lines = _plan(
        capsys,
        monkeypatch,
        80,
        ["plan", "llama3-8b", "--gpus", "13", "--seq", "4096", "--gbs", "64", "--json"],
    )
    found = json.loads("\n".join(lines))["obstacle"]
    assert code == 0 and found["constraint"] == "divisibility" and found["candidates"] == 3192
    assert [(r["code"], r["candidates"]) for r in found["refusals"]] == [("PAR001", 3078), ("BAT001", 114)]
    assert found["unsplittable_pp"] == [13]


def test_a_pinned_pipeline_size_no_split_serves_is_named(capsys):
    args = ["plan", "llama3-8b", "--gpus", "13", "--seq", "4096", "--gbs", "64", "--workers", "1"]
    code = main([*args, "--pin", "model.pipeline_model_parallel_size=13"])
    assert code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "no layout on 13 GPUs has it (PP 13: the 32 layers split over that many stages neither evenly, nor "
            "with first/last stage sizes Megatron accepts (PIP001, PIP006-008), nor with an explicit layout)"
        )
    )


def test_explain_prints_list_values_as_typed(capsys, monkeypatch):
    args = [*SEARCH, "--pin", "model.recompute_granularity=selective", "--explain", "1", "--top", "1"]
    code, lines = _plan(capsys, monkeypatch, 80, args)
    assert code == 0 and all(len(line) <= 80 for line in lines)
    # the brackets are not taken for rich markup
    assert re.search(r"model\.recompute_modules=\[[a-z_]+(,[a-z_]+)*\]", " ".join(lines))


def test_the_summary_writes_every_count_with_thousands_separators(capsys, monkeypatch):
    _, lines = _plan(
        capsys, monkeypatch, 200, ["plan", "llama3-70b", "--gpus", "64", "--gbs", "128", "--seq", "4096"]
    )
    summary = next(line for line in lines if " candidates in " in line)
    refused = re.search(r"refused by arithmetic \(([^)]*)\)", summary).group(1)
    assert refused == "PAR001 39,669, PIP010 455, BAT001 38"
