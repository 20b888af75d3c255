"""`memtune estimate` on every bundled example and every model preset."""

import json
from pathlib import Path

import pytest

from memtune.catalog.models import list_models
from memtune.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if p.name != "broken-llama3-8b.yaml")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_estimates(path, capsys):
    assert main(["estimate", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for rank in data["ranks"]:
        assert rank["peak_bytes"] == sum(rank["components"].values()) > 0


def test_the_broken_example_is_refused(capsys):
    assert main(["estimate", str(ROOT / "examples" / "broken-llama3-8b.yaml")]) == 2
    assert "OFF001" in capsys.readouterr().err


@pytest.mark.parametrize("name", [m.name for m in list_models()])
def test_every_preset_estimates(name, tmp_path, capsys):
    config = tmp_path / "job.yaml"
    config.write_text(f"model: {{preset: {name}, bf16: true}}\ncluster: {{gpu: H200}}\n")
    assert main(["estimate", str(config), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranks"][0]["components"]["weights"] > 0
