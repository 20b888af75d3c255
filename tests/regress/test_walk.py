"""``memtune bisect --configs A B``: the first change on the way from A to B that stops A fitting."""

import json

import yaml

from memtune.check import gate
from memtune.cli import main
from memtune.config import load_job
from memtune.estimate import estimate
from memtune.estimate.effect import NEEDED, PEAK
from memtune.regress.attribution import diff_configs, effect_alone
from memtune.regress.jobs import apply, load_pair
from memtune.regress.walk import walk

BASE = {
    "model": {
        "preset": "llama3-8b",
        "seq_length": 4096,
        "tensor_model_parallel_size": 2,
        "sequence_parallel": True,
    },
    "train": {"micro_batch_size": 1, "global_batch_size": 64},
    "optimizer": {"use_distributed_optimizer": True},
    "ddp": {"use_distributed_optimizer": True},
    "cluster": {"num_gpus": 8, "gpu": "H100-80GB"},
}


def write(tmp_path, name, **sections):
    # Megatron-Core's defaults: SP at TP 1 is an error there (SEQ001), which these tests lean on.
    data = {"defaults": "megatron-core", **{key: dict(value) for key, value in BASE.items()}}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def peak(path):
    est = estimate(gate(load_job(path).job))
    return est.worst.peak_bytes, est.verdict()


def needed(path):
    est = estimate(gate(load_job(path).job))
    return est.needed_bytes(est.worst)


def test_names_the_change_that_tips_it_over(tmp_path, capsys):
    a = write(tmp_path, "a.yaml")
    b = write(
        tmp_path,
        "b.yaml",
        model={"seq_length": 16384},
        train={"micro_batch_size": 2, "global_batch_size": 128},
    )
    assert peak(a)[1] == "fits" and peak(b)[1] == "does not fit"
    result = walk(*load_pair(a, b))
    # Order: each change alone, estimated independently here; savings first, growth smallest first.
    effects = {}
    for key, value in [
        ("model.seq_length", 16384),
        ("train.micro_batch_size", 2),
        ("train.global_batch_size", 128),
    ]:
        section, name = key.split(".")
        effects[key] = needed(write(tmp_path, "alone.yaml", **{section: {name: value}})) - needed(a)
    assert [c.key for c in result.order] == sorted(
        effects,
        key=lambda k: (0, effects[k]) if effects[k] < 0 else (2, 0) if effects[k] == 0 else (3, effects[k]),
    )
    # The boundary: the prefix before the culprit fits, the one with it does not (checked independently).
    (culprit,) = result.culprits
    at = result.order.index(culprit)
    job_a = load_job(a).job
    before = estimate(gate(apply(job_a, [c.change for c in result.order[:at]])))
    after = estimate(gate(apply(job_a, [c.change for c in result.order[: at + 1]])))
    assert before.verdict() == "fits" and after.verdict() != "fits"
    assert main(["bisect", "--configs", a, b]) == 0
    assert f"First change that stops it fitting: {culprit}" in capsys.readouterr().out


def test_says_when_a_does_not_fit_or_b_fits(tmp_path, capsys):
    small = write(tmp_path, "small.yaml")
    big = write(tmp_path, "big.yaml", model={"seq_length": 32768})
    assert main(["bisect", "--configs", big, small]) == 1
    assert (
        "A already does not fit (estimated): there is no change to blame between A and B."
        in capsys.readouterr().out
    )
    other = write(tmp_path, "other.yaml", model={"seq_length": 2048})
    assert main(["bisect", "--configs", small, other, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1 and data["culprits"] == [] and data["b"]["verdict"] == "fits"


def test_a_step_check_refuses_is_stepped_over(tmp_path):
    # TP 2 -> 1 is refused while sequence parallelism is still on; the walk must not stop there.
    a = write(tmp_path, "a.yaml")
    b = write(
        tmp_path,
        "b.yaml",
        model={"tensor_model_parallel_size": 1, "sequence_parallel": False, "seq_length": 8192},
    )
    result = walk(*load_pair(a, b))
    assert [c.key for c, e in zip(result.order, result.single_effects) if e is None] == [
        "model.tensor_model_parallel_size"
    ]
    assert [(n, reason.split()[0]) for n, reason in result.refused] == [(1, "SEQ001")]
    assert [c.key for c in result.culprits] == ["model.seq_length"]
    assert result.before.applied == 2 and result.after.applied == 3


def test_bad_input(tmp_path, capsys):
    a = write(tmp_path, "a.yaml")
    assert main(["bisect", "--configs", a, a]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"memtune bisect: {a} and {a} describe the same job: nothing to bisect"
    )
    assert main(["bisect", "--configs", a, a, "--measure"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "memtune bisect: --measure needs --rank R: the global rank to measure at each step"
    )


def test_bisect_diff_and_the_attribution_agree_on_what_one_change_does(tmp_path, capsys):
    # An allocator change moves no peak but the fragmentation margin (2% -> 8% of the peak):
    # bisect orders by it, diff lists it, and effect_alone (what fix calls) gives the same bytes.
    a = write(tmp_path, "a.yaml", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    b = write(tmp_path, "b.yaml", model={"seq_length": 16384}, train={"micro_batch_size": 2})
    pair = load_pair(a, b)
    result = walk(*pair)
    by_key = {c.key: e for c, e in zip(result.order, result.single_effects)}
    diff = diff_configs(*pair)
    alone = {k.change.key: k.alone[0][NEEDED] for k in diff.keys if k.alone is not None}
    before = estimate(gate(pair[0].job))
    change = next(k.change for k in diff.keys if k.change.key == "env.PYTORCH_CUDA_ALLOC_CONF")
    effect = effect_alone(before, pair[0].job, [change.change])
    assert not isinstance(effect, str)
    assert by_key == alone
    assert by_key["env.PYTORCH_CUDA_ALLOC_CONF"] == effect.on()[NEEDED] > 0
    assert effect.on()[PEAK] == 0
    # By hand: the needed bytes grow by the margin's 6 points of the peak.
    peak = before.worst.peak_bytes
    assert abs(effect.on()["fragmentation margin"] - round(peak * 0.06)) <= 1
    assert main(["bisect", "--configs", a, b]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "env.PYTORCH_CUDA_ALLOC_CONF expandable_segments:True -> null (needs +" in out
