import json

import yaml

from memtune.catalog.models import get_model, list_models
from memtune.cli import main


def test_gpus_json_lists_every_gpu_with_its_capacity(capsys):
    assert main(["gpus", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)["gpus"]
    assert [g["name"] for g in gpus] == [
        "A100-40GB",
        "A100-80GB",
        "H100-80GB",
        "H100-NVL",
        "H200",
        "B200",
        "GB200",
        "B300",
        "GB300",
        "MI300X",
    ]
    h200 = next(g for g in gpus if g["name"] == "H200")
    assert h200["memory_gib"] == 139.8 and h200["memory_measured"] is True


def test_gpus_table_marks_derived_capacities(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "79.11 " in out and "178.47*" in out and "139.80 " in out


def test_models_table_and_json_list_every_preset(capsys):
    assert main(["models"]) == 0
    table = capsys.readouterr().out
    assert main(["models", "--json"]) == 0
    names = [m["name"] for m in json.loads(capsys.readouterr().out)["models"]]
    assert names == [p.name for p in list_models()]
    assert all(name in table for name in names)
    assert "256x2048 top-8" in table  # DeepSeek-V3's routed experts


def test_models_name_prints_a_pasteable_model_section(capsys):
    assert main(["models", "Qwen3-30B-A3B"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == {"model": get_model("qwen3-30b-a3b")}


def test_models_unknown_name_exits_2(capsys):
    assert main(["models", "llama9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memtune models: unknown model preset 'llama9'; known: llama3-8b,")
    assert "Traceback" not in err
