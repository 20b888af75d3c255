"""`memtune recipes`, `models` and `gpus` fit 80 and 120 columns; recipe names are never cut."""

from __future__ import annotations

import pytest

from memtune.catalog.recipes import list_recipes
from memtune.cli import main


def _lines(capsys, monkeypatch, width: int, command: str) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    assert main([command]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width and line == line.rstrip() for line in lines)
    return lines


@pytest.mark.parametrize("width", [80, 120])
def test_recipes_fit_and_keep_every_name_whole(capsys, monkeypatch, width):
    lines = _lines(capsys, monkeypatch, width, "recipes")
    names = [r.label.removesuffix("_config") for r in list_recipes()]
    assert [line.split()[0] for line in lines[3 : 3 + len(names)]] == names
    header = lines[1].split()
    if width == 80:  # the longest name is 64 characters: the GPU count, TP and PP beside it
        assert header == ["name", "GPUs", "TP", "PP"]
        assert lines[-1] == "not shown at 80 columns: model, GPU, precision, VPP, CP, EP, seq, GBS"
    else:
        assert header == ["name", "GPUs", "TP", "PP", "VPP", "CP", "EP", "seq", "GBS"]
        row = lines[3 + names.index("llama3_8b_pretrain_16gpu_h100_bf16_16k")].split()
        assert row[1:] == ["16", "4", "2", "-", "2", "1", "16384", "512"]


@pytest.mark.parametrize("width", [80, 120])
def test_models_and_gpus_show_every_column_at_80(capsys, monkeypatch, width):
    models = _lines(capsys, monkeypatch, width, "models")
    assert models[1].split() == ["name", "layers", "hidden", "heads/kv", "ffn", "experts", "vocab"]
    assert models[3].split() == ["llama3-8b", "32", "4096", "32/8", "14336", "-", "128256"]
    gpus = _lines(capsys, monkeypatch, width, "gpus")
    assert gpus[1].split()[:3] == ["name", "memory", "GiB"] and gpus[1].endswith("link GB/s")
