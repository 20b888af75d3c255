"""``memtune diff A B``: attributions checked against independent estimates and hand arithmetic."""

from pathlib import Path

import yaml

from memtune.check import gate
from memtune.cli import main
from memtune.config import load_job
from memtune.estimate import estimate
from memtune.estimate.effect import COMPONENTS, JUDGED, NEEDED, PEAK
from memtune.estimate.render import components
from memtune.regress.attribution import attributions, diff_configs
from memtune.regress.jobs import load_pair

EXAMPLES = Path(__file__).parents[2] / "examples"

BASE = {
    "model": {
        "preset": "llama3-8b",
        "seq_length": 4096,
        "tensor_model_parallel_size": 2,
        "sequence_parallel": True,
    },
    "train": {"micro_batch_size": 1, "global_batch_size": 64},
    "optimizer": {"use_distributed_optimizer": False},
    "ddp": {"use_distributed_optimizer": False},
    "cluster": {"num_gpus": 8, "gpu": "H100-80GB"},
}


# B's usual changes: a longer sequence, selective recompute, a larger micro-batch.
LONGER = {
    "model": {"seq_length": 8192, "recompute_granularity": "selective"},
    "train": {"micro_batch_size": 2, "global_batch_size": 128},
}
SHARDED = {"use_distributed_optimizer": True}


def write(tmp_path: Path, name: str, **sections: dict) -> str:
    # Megatron-Core's defaults: SP at TP 1 is an error there (SEQ001), which these tests lean on.
    data = {"defaults": "megatron-core", **{key: dict(value) for key, value in BASE.items()}}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def breakdowns(path: str) -> list[dict[str, int]]:
    """Per pp rank, straight from the estimator: the independent reference."""
    est = estimate(gate(load_job(path).job))
    return [
        {
            **components(r),
            "outside PyTorch": est.non_pytorch_bytes,
            "fragmentation margin": round(r.peak_bytes * est.margin),
            "safety margin": est.needed_bytes(r)
            - r.peak_bytes
            - est.non_pytorch_bytes
            - round(r.peak_bytes * est.margin),
            PEAK: r.peak_bytes,
            JUDGED: est.verdict_peak_bytes(r),
            NEEDED: est.needed_bytes(r),
        }
        for r in est.ranks
    ]


def test_one_key_gets_exactly_the_estimators_difference(tmp_path):
    a = write(tmp_path, "a.yaml")
    b = write(tmp_path, "b.yaml", optimizer={"use_distributed_optimizer": True})
    diff = diff_configs(*load_pair(a, b))
    (effect,) = diff.keys
    assert effect.change.key == "optimizer.use_distributed_optimizer"
    before, after = breakdowns(a), breakdowns(b)
    assert effect.alone == [{k: y[k] - x[k] for k in x} for x, y in zip(before, after)]
    assert diff.interactions == [{k: 0 for k in [*COMPONENTS, PEAK, JUDGED, NEEDED]}]
    # By hand: the distributed optimizer shards the fp32 main weights and both Adam moments over
    # DP = 8 / TP2 = 4, so 3/4 of the optimizer state goes.
    optimizer_before = before[0]["optimizer"]
    assert abs(effect.alone[0]["optimizer"] + optimizer_before * 3 / 4) < 0.001 * optimizer_before


def test_singles_plus_interactions_equal_the_total(tmp_path):
    a = write(tmp_path, "a.yaml")
    b = write(tmp_path, "b.yaml", **LONGER, optimizer=SHARDED, ddp=SHARDED)
    diff = diff_configs(*load_pair(a, b))
    before, after = breakdowns(a), breakdowns(b)
    assert diff.total == [{k: y[k] - x[k] for k in x} for x, y in zip(before, after)]
    for i, total in enumerate(diff.total):
        for name in total:
            singles = sum(k.alone[i][name] for k in diff.keys if k.alone is not None)
            assert singles + diff.interactions[i][name] == total[name]
    # Each single is A plus that change alone, estimated independently here.
    for effect in diff.keys:
        alone = write(
            tmp_path,
            "alone.yaml",
            **{
                effect.change.key.split(".")[0]: {effect.change.key.split(".")[1]: effect.change.change.value}
            },
        )
        assert effect.alone == [{k: y[k] - x[k] for k in x} for x, y in zip(before, breakdowns(alone))]
    # Sorted by size, largest first.
    sizes = [abs(x.delta) for x in attributions(diff)]
    assert sizes == sorted(sizes, reverse=True)


def test_text_names_key_values_component_and_rank(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    a = write(tmp_path, "a.yaml", model={"pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16"})
    b = write(
        tmp_path,
        "b.yaml",
        model={"pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16", "seq_length": 8192},
    )
    assert main(["diff", a, b, "--all"]) == 0
    out = capsys.readouterr().out
    before, after = breakdowns(a), breakdowns(b)
    for rank in (0, 1):
        delta = (after[rank]["activations"] - before[rank]["activations"]) / 2**30
        assert f"model.seq_length 4096 -> 8192: +{delta:.2f} GiB activations on pp_rank {rank}" in out
    assert "interactions between the changes:" not in out  # one key: nothing left over


def test_one_line_per_key_largest_first_then_the_interactions(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    a = write(tmp_path, "a.yaml")
    b = write(tmp_path, "b.yaml", **LONGER, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    diff = diff_configs(*load_pair(a, b))
    assert main(["diff", a, b]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines.index("Each change alone on A, largest first (what pp_rank 0 needs):")
    # What each key alone does to what the rank needs, from the independent estimate of A with it.
    before = breakdowns(a)[0]
    expected = []
    for effect in diff.keys:
        section, name = effect.change.key.split(".")
        alone = breakdowns(write(tmp_path, "alone.yaml", **{section: {name: effect.change.change.value}}))[0]
        if alone[NEEDED] != before[NEEDED]:
            expected.append((alone[NEEDED] - before[NEEDED], str(effect)))
    expected.sort(key=lambda e: -abs(e[0]))
    assert len(expected) == 3  # sequence, micro-batch and the allocator; the rest change nothing
    keyed = lines[head + 1 : head + 1 + len(expected)]
    assert [line.split("  ")[2] for line in keyed] == [what for _, what in expected]
    assert [line.split()[0] for line in keyed] == [
        ("+" if n >= 0 else "-") + f"{abs(n) / 2**30:.2f}" for n, _ in expected
    ]
    # The allocator change moves the fragmentation margin, not the peak: 8% -> 2% of the peak.
    (allocator,) = [line for line in keyed if "PYTORCH_CUDA_ALLOC_CONF" in line]
    assert allocator.startswith("  -") and "(fragmentation margin -" in allocator
    interactions = lines[head + 1 + len(expected)]
    assert interactions.startswith("Interactions between the changes (the total less the changes alone): ")
    assert lines[-1].startswith("--all lists every component of every rank")


def test_refused_single_goes_to_the_interactions(tmp_path, capsys):
    a = write(tmp_path, "a.yaml")
    b = write(tmp_path, "b.yaml", model={"tensor_model_parallel_size": 1, "sequence_parallel": False})
    diff = diff_configs(*load_pair(a, b))
    refused = {k.change.key: k.refused for k in diff.keys if k.alone is None}
    # TP1 with sequence parallelism on is refused (SEQ001); SP off alone is fine.
    assert list(refused) == ["model.tensor_model_parallel_size"]
    assert refused["model.tensor_model_parallel_size"].startswith("SEQ001")
    (sp,) = [k for k in diff.keys if k.alone is not None]
    for i, total in enumerate(diff.total):
        assert {n: sp.alone[i][n] + diff.interactions[i][n] for n in total} == total
    assert main(["diff", a, b]) == 0
    assert "Refused alone by memtune check" in capsys.readouterr().out


def test_pipeline_size_change_compares_most_loaded_ranks(tmp_path, capsys):
    a = write(tmp_path, "a.yaml")
    b = write(
        tmp_path,
        "b.yaml",
        model={"pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16"},
        cluster={"num_gpus": 16},
    )
    diff = diff_configs(*load_pair(a, b))
    assert not diff.per_rank and diff.labels == ["most-loaded rank"]
    worst_b = max(breakdowns(b), key=lambda r: r[PEAK])
    assert diff.total[0][PEAK] == worst_b[PEAK] - breakdowns(a)[0][PEAK]
    assert main(["diff", a, b]) == 0
    assert "A has 1 pipeline ranks and B 2: comparing the most-loaded rank of each" in capsys.readouterr().out


def test_keys_memtune_does_not_read_are_listed(tmp_path, capsys):
    source = yaml.safe_load((EXAMPLES / "bridge-llama3-70b-lora.yaml").read_text())
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(source))
    source["checkpoint"]["save_interval"] = 12345
    b.write_text(yaml.safe_dump(source))
    diff = diff_configs(*load_pair(str(a), str(b), ["cluster.num_gpus=32"]))
    assert diff.keys == []
    assert [(u.name, u.after) for u in diff.unread] == [("checkpoint.save_interval", "12345")]
    assert main(["diff", str(a), str(b), "cluster.num_gpus=32", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1 and data["changes"] == []
    assert [u["name"] for u in data["not_read"]] == ["checkpoint.save_interval"]


def test_different_formats_compare(capsys):
    script = EXAMPLES / "megatron-lm-llama3-8b.sh"
    assert main(["diff", str(script), str(script), "model.seq_length=4096"]) == 0
    assert "The two configs describe the same job." in capsys.readouterr().out


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    a = write(tmp_path, "a.yaml")
    assert main(["diff", a, str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"memtune diff: {tmp_path / 'missing.yaml'}: no such file"]
    assert main(["diff", a]) == 2
    assert capsys.readouterr().err.strip() == f"memtune diff: expected two configs A B, got 1: {a}"
