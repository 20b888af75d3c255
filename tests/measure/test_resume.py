"""``memtune measure --resume`` without a GPU: the plan, its refusals, the two-process round trip
and the resume runs of benchmarks/measured/matrix.py (defined, not yet measured)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from memtune.check import gate
from memtune.cli import main
from memtune.config import derive, validate
from memtune.errors import InputError
from memtune.estimate import estimate
from memtune.estimate.resume import ResumeEstimate
from memtune.measure import run as measure_run
from memtune.measure.plan import plan_measurement
from memtune.measure.render import print_resume_report, resume_report_json
from memtune.measure.run import Measurement, run_resume
from tests.estimate.conftest import make_job
from tests.measure.test_measured_set import SET_DIR, load_matrix

ONE_GPU = {"num_gpus": 1}
RESUME = {"load": "/ckpt"}


def test_resume_plan_carries_the_checkpoint_settings():
    job = make_job(
        cluster=ONE_GPU,
        checkpoint={**RESUME, "fully_parallel_load": True},
        ddp={"use_distributed_optimizer": True},
        optimizer={"use_distributed_optimizer": True},
    )
    plan = plan_measurement(gate(job), 0, resume=True)
    assert plan.resume == {
        "format": "torch_dist",
        "load_optim": True,
        "fully_parallel_load": True,
        "distrib_optim_sharding_type": "dp_reshardable",
        "gated_linear_unit": True,
        "phase": "save",
        "directory": None,
        "save_only": False,
        "save_optim": True,
        "fully_parallel_save": True,
        "fully_reshardable_mem_efficient": False,
        "async_save": False,
        "gloo": False,
    }
    assert plan_measurement(gate(job), 0).resume is None
    json.dumps(plan.to_json())


@pytest.mark.parametrize(
    "sections, message",
    [
        (
            {"cluster": ONE_GPU},
            "--resume: the job neither resumes nor saves; set checkpoint.load or checkpoint.save (the"
            " estimate's resume and save phases need them)",
        ),
        (
            {"checkpoint": RESUME},  # TINY has 2 GPUs
            "--resume with checkpoint.ckpt_format torch_dist: the distributed checkpoint exchanges its "
            "metadata between ranks, which the fake process group does not carry; measure a world size 1 job",
        ),
        (
            {
                "cluster": ONE_GPU,
                "checkpoint": {**RESUME, "ckpt_format": "torch"},
                "optimizer": {"use_distributed_optimizer": True},
                "ddp": {"use_distributed_optimizer": True},
            },
            "--resume with checkpoint.ckpt_format torch and the distributed optimizer: the legacy format "
            "gathers the optimizer state over Gloo, which the measurement creates only to save at world size 1",
        ),
        (
            {"cluster": ONE_GPU, "checkpoint": {**RESUME, "ckpt_format": "fsdp_dtensor"}},
            "--resume: Megatron-FSDP saves and loads only checkpoint.ckpt_format fsdp_dtensor, and "
            "fsdp_dtensor needs ddp.use_megatron_fsdp",
        ),
        (
            {"cluster": ONE_GPU, "checkpoint": {**RESUME, "ckpt_format": "torch_dcp"}},
            "--resume: checkpoint.ckpt_format torch_dcp (torch FSDP2's) is not measured or modeled",
        ),
    ],
)
def test_refusals_are_one_line_each(sections, message):
    with pytest.raises(InputError) as exc:
        plan_measurement(gate(make_job(**sections)), 0, resume=True)
    assert exc.value.problems == [message]


def test_legacy_format_runs_with_more_ranks_each_saving_its_own_file():
    plan = plan_measurement(gate(make_job(checkpoint={**RESUME, "ckpt_format": "torch"})), 1, resume=True)
    assert plan.world_size == 2 and plan.resume["format"] == "torch"


def test_cli_refuses_in_one_line_with_exit_2(tmp_path, capsys):
    config = tmp_path / "job.yaml"
    config.write_text(
        json.dumps({"model": {"preset": "llama3-8b", "num_layers": 2}, "cluster": {"num_gpus": 1}})
    )
    assert main(["measure", str(config), "--rank", "0", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "--resume: the job neither resumes nor saves; set checkpoint.load or checkpoint.save (the"
        " estimate's resume and save phases need them)"
    )


def test_round_trip_saves_then_loads_in_a_fresh_process_into_the_same_directory(monkeypatch):
    plan = plan_measurement(gate(make_job(cluster=ONE_GPU, checkpoint=RESUME)), 0, resume=True)
    calls = []

    def fake_run(plan_json, env, python, timeout_s, log=None):
        calls.append(plan_json)
        measured = {"peak_allocated_bytes": 10, "iterations": [{"iteration": 1, "peak_allocated_bytes": 7}]}
        if plan_json["resume"]["phase"] == "load":
            measured["resume"] = {
                "format": "torch_dist",
                "allocated_before_load": 5,
                "load_peak_bytes": 9,
                "load_peak_reserved_bytes": 10,
                "allocated_after_load": 6,
                "first_step_peak_bytes": 7,
            }
        return {"measured": measured, "environment": {}, "pp_rank": 0, "wall_seconds": 1.0}

    monkeypatch.setattr(measure_run, "run_plan_json", fake_run)
    result = run_resume(plan)
    save, load = calls
    assert (save["resume"]["phase"], load["resume"]["phase"]) == ("save", "load")
    assert save["resume"]["directory"] == load["resume"]["directory"] is not None
    assert (save["iterations"], load["iterations"]) == (plan.iterations, 1)
    estimate_resume = ResumeEstimate(load_bytes=8, first_step_bytes=6, resident=5.0, parts={"x": 3.0})
    doc = resume_report_json(plan, result, 10, estimate_resume)
    assert doc["resume"]["estimate"]["load_difference_bytes"] == 8 - 9
    assert doc["resume"]["estimate"]["first_step_difference_bytes"] == 6 - 7
    assert isinstance(result.training, Measurement)
    console = Console(record=True, width=80)
    print_resume_report(console, result, estimate_resume)
    text = console.export_text()
    assert "resume from a torch_dist checkpoint" in text and "first iteration after it" in text


def test_resume_runs_are_defined_across_formats_optimizers_and_models():
    matrix = load_matrix()
    runs = matrix.resume_entries()
    assert len(runs) >= 12
    assert len({r.id for r in runs}) == len(runs)
    assert not {r.id for r in runs} & {e.id for e in matrix.entries()}
    seen = set()
    for r in runs:
        checked = gate(matrix.validate(r.config))
        d = checked.derived
        plan_measurement(checked, r.rank, resume=True)  # each one a plan memtune measure --resume runs
        assert d.resumes and d.world_size == 1
        resume = estimate(checked).resume(estimate(checked).ranks[0])
        assert resume is not None
        seen.add((d.resume_format, d.use_distributed_optimizer, d.is_moe, d.optimizer_loaded_at_resume))
    formats = {f for f, *_ in seen}
    assert formats == {"torch_dist", "torch", "fsdp_dtensor"}
    assert {do for _, do, _, _ in seen} == {True, False}
    assert {moe for _, _, moe, _ in seen} == {True, False}
    assert {loaded for *_, loaded in seen} == {True, False}
    splits = {r.id: matrix.split_of(r.id) for r in runs}
    assert set(splits.values()) == {"tune", "holdout"}


def test_every_resume_run_is_measured_once_with_its_matrix_config_and_split():
    matrix = load_matrix()
    wanted = {r.id: r for r in matrix.resume_entries()}
    records = [
        json.loads(line) for line in (SET_DIR / "resume" / "h200-mcore0.19.2.jsonl").read_text().splitlines()
    ]
    assert sorted(r["id"] for r in records) == sorted(wanted)
    for record in records:
        entry = wanted[record["id"]]
        assert record["split"] == matrix.split_of(record["id"])
        assert validate(record["config"]) == validate(entry.config) and record["rank"] == entry.rank
        phase = record["measured"]["resume"]
        assert phase["format"] == derive(validate(entry.config)).resume_format
        # the load ran in a fresh process: it starts from the model state, before the first step
        assert phase["allocated_before_load"] <= phase["load_peak_bytes"]
        assert phase["first_step_peak_bytes"] == phase["first_iteration"]["peak_allocated_bytes"]


def test_cli_refuses_a_job_that_only_saves_in_one_line(tmp_path, capsys):
    config = tmp_path / "job.yaml"
    config.write_text(
        json.dumps(
            {
                "model": {"preset": "llama3-8b", "num_layers": 2},
                "cluster": {"num_gpus": 1},
                "checkpoint": {"save": "/ckpt"},
            }
        )
    )
    assert main(["measure", str(config), "--rank", "0", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "--resume: the job does not resume; set checkpoint.load (a job that only saves is measured by"
        " benchmarks/gpu/run_matrix.py --save, docs/save.md)"
    )


def test_a_save_plan_carries_the_save_options():
    job = make_job(
        cluster=ONE_GPU,
        checkpoint={
            "save": "/ckpt",
            "dist_ckpt_optim_fully_reshardable": True,
            "distrib_optim_fully_reshardable_mem_efficient": True,
        },
        ddp={"use_distributed_optimizer": True},
        optimizer={"use_distributed_optimizer": True},
    )
    resume = plan_measurement(gate(job), 0, resume=True).resume
    assert resume["save_only"] and resume["gloo"]
    assert resume["distrib_optim_sharding_type"] == "fully_reshardable"
    assert resume["fully_reshardable_mem_efficient"] and not resume["async_save"]
