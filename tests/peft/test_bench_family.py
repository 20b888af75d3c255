"""`memtune bench accuracy` reports LoRA runs as their own family."""

import argparse
import json
from pathlib import Path

from memtune.bench.cli import run

SET = Path(__file__).resolve().parents[2] / "benchmarks" / "measured" / "h200-mcore0.19.2.jsonl"


def test_lora_runs_are_summarised_apart_from_full_training(tmp_path, capsys):
    record = json.loads(SET.read_text().splitlines()[0])
    lora = dict(record, id="lora-copy", config={**record["config"], "peft": {"dim": 8}})
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(lora) + "\n")
    run(argparse.Namespace(paths=[path], json=True, split="all"))
    out = json.loads(capsys.readouterr().out)
    split = record["split"]
    assert out["families"][f"core/{split}"]["runs"] == 1
    assert out["families"][f"LoRA/{split}"]["runs"] == 1
    assert out["families"][f"LoRA/{split}"]["worst_id"] == "lora-copy"
    assert out["summary"]["all"]["runs"] == 2
    assert {r["family"] for r in out["runs"]} == {"core", "LoRA"}
