"""The public API the estimator and planner call, and its small helpers."""

from __future__ import annotations

import pytest

from memtune.check import ERROR, CheckedJob, Finding, gate, run_checks
from memtune.config.allocator import parse_alloc_conf
from memtune.config.versions import parse_version
from memtune.errors import InputError
from tests.check.check_fixtures import make_job


def test_gate_raises_one_line_per_error():
    job = make_job(
        "model.cpu_offloading=true", "model.cpu_offloading_num_layers=4", "train.global_batch_size=62"
    )
    with pytest.raises(InputError) as exc:
        gate(job)
    assert exc.value.problems == [
        "OFF001 model.cpu_offloading=true with model.pipeline_model_parallel_size=2",
        "BAT001 train.global_batch_size=62 is not divisible by train.micro_batch_size=1 × DP=4",
    ]


def test_gate_keeps_warnings_and_infos():
    job = make_job("model.sequence_parallel=false", "model.recompute_method=uniform")
    checked = gate(job)
    assert [f.code for f in checked.findings] == ["SEQ004", "REC004"]
    assert all(isinstance(f, Finding) and f.severity != ERROR for f in checked.findings)
    assert checked.job is job and checked.derived.job is job


def test_checked_job_cannot_be_built_around_the_gate():
    job = make_job()
    with pytest.raises(TypeError, match="only from memtune.check.gate"):
        CheckedJob(job=job, derived=gate(job).derived, findings=(), _token=object())


def test_findings_come_in_catalogue_order():
    job = make_job("train.global_batch_size=62", "model.tensor_model_parallel_size=1", "cluster.num_gpus=15")
    assert [f.code for f in run_checks(job)] == ["PAR001", "SEQ001", "BAT001"]


def test_bad_version_string_is_bad_input():
    with pytest.raises(InputError, match=r"env.torch_version: expected a version like 2.11.0, got 'latest'"):
        run_checks(make_job("env.torch_version=latest"))


@pytest.mark.parametrize(
    "text, version",
    [
        ("0.19.2", (0, 19, 2)),
        ("2.11.0+cu130", (2, 11, 0)),
        ("0.16.0rc1", (0, 16, 0)),
        ("2.9", (2, 9, 0)),
        ("v0.15.3", (0, 15, 3)),
    ],
)
def test_parse_version(text, version):
    assert parse_version(text, "env.x") == version


def test_alloc_conf_keeps_bracketed_values_whole():
    conf = parse_alloc_conf(
        "expandable_segments:True, roundup_power2_divisions:[256:1,512:2,>:8],max_split_size_mb:128"
    )
    assert conf == {
        "expandable_segments": "True",
        "roundup_power2_divisions": "[256:1,512:2,>:8]",
        "max_split_size_mb": "128",
    }


def test_the_gate_refuses_an_error_the_job_ignores():
    with pytest.raises(InputError) as exc:
        gate(make_job("cluster.num_gpus=15", "train.global_batch_size=60", "check.ignore=[PAR]"))
    assert exc.value.problems == [
        "PAR001 cluster.num_gpus=15 is not divisible by TP×PP×CP = 2×2×1 = 4"
        " (select/ignore cannot silence an error Megatron raises at start-up)"
    ]


def test_ignore_filters_warnings_from_the_gate():
    job = make_job("model.sequence_parallel=false", "model.recompute_method=uniform", "check.ignore=[REC004]")
    assert [f.code for f in gate(job).findings] == ["SEQ004"]
