"""``memtune diff`` of a dense config against an MoE one: a key no valid config changes alone
(an MoE model's per-layer ``moe_layer_freq`` with another layer count) is attributed together
with the key it needs, instead of the diff refusing (issue 29 item 6)."""

from __future__ import annotations

from pathlib import Path

from memtune.estimate.effect import COMPONENTS, PEAK
from memtune.regress.attribution import diff_configs
from memtune.regress.jobs import load_pair
from tests.hostile.conftest import run_cli

DENSE = "model: {preset: llama3-8b}\ncluster: {num_gpus: 8}\ntrain: {global_batch_size: 64}\n"
MOE = "model: {preset: deepseek-v2-lite}\ncluster: {num_gpus: 8}\ntrain: {global_batch_size: 64}\n"


def configs(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "dense.yaml").write_text(DENSE)
    (tmp_path / "moe.yaml").write_text(MOE)
    return str(tmp_path / "dense.yaml"), str(tmp_path / "moe.yaml")


def test_the_layer_count_and_the_moe_layer_pattern_are_attributed_together(tmp_path):
    diff = diff_configs(*load_pair(*configs(tmp_path)))
    grouped = [k for k in diff.keys if k.together]
    assert [(k.change.key, [t.key for t in k.together]) for k in grouped] == [
        ("model.num_layers", ["model.moe_layer_freq"])
    ]
    assert grouped[0].alone is not None and grouped[0].refused is None
    assert not any(k.change.key == "model.moe_layer_freq" for k in diff.keys)  # counted once
    for i, whole in enumerate(diff.total):  # singles (the pair as one) plus interactions: the total
        for name in (*COMPONENTS, PEAK):
            singles = sum(k.alone[i][name] for k in diff.keys if k.alone is not None)
            assert singles + diff.interactions[i][name] == whole[name]


def test_the_command_prints_the_pair_as_one_change(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    status, out, err = run_cli(capsys, "diff", *configs(tmp_path))
    assert (status, err) == (0, "")
    assert "  model.num_layers 32 -> 27 with model.moe_layer_freq 1 -> [0,1,1," in out
