"""The parent side of `memtune measure`: subprocess environment, refusals, CLI exit statuses.

No GPU here: the interpreter handed to the measurement is this one started with ``-S`` (no
site-packages, so neither torch nor megatron-core), which is exactly the machine the refusals are for.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from memtune.check import gate
from memtune.cli import main
from memtune.config import load_job
from memtune.errors import InputError, MissingDependencyError
from memtune.measure.plan import plan_measurement
from memtune.measure.run import MeasurementFailed, check_interpreter, parse_result, run_plan, subprocess_env

CONFIGS = Path(__file__).parent / "configs"


@pytest.fixture
def bare_python(tmp_path) -> str:
    """An interpreter without site-packages: no torch, no megatron-core."""
    wrapper = tmp_path / "python-bare"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def test_child_gets_the_jobs_allocator_settings_and_loses_inherited_ones():
    base = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync", "PYTORCH_ALLOC_CONF": "x", "HOME": "/h"}
    env = subprocess_env({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, base)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_ALLOC_CONF" not in env
    assert env["HOME"] == "/h"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in subprocess_env({}, base)
    # memtune itself must be importable by the child, also from a source checkout
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(__file__).resolve().parents[2])


def test_interpreter_without_torch_is_refused_in_one_line(bare_python):
    with pytest.raises(MissingDependencyError) as exc:
        check_interpreter(bare_python)
    assert exc.value.problems == [
        f"needs PyTorch and megatron-core with a CUDA GPU; {bare_python} has no PyTorch and megatron-core "
        "(megatron-core 0.19 needs Python >= 3.12)"
    ]


def test_runner_subprocess_reports_missing_torch_as_a_refusal(bare_python):
    plan = plan_measurement(gate(load_job(CONFIGS / "qwen3-moe-ep4.yaml").job), rank=3)
    with pytest.raises(MissingDependencyError) as exc:
        run_plan(plan, python=bare_python, timeout_s=60)
    assert exc.value.problems == ["needs PyTorch, which is not installed for this Python"]


@pytest.mark.parametrize(
    ("kind", "exception"),
    [
        ("missing", MissingDependencyError),
        ("config", InputError),
        ("oom", MeasurementFailed),
        ("failed", MeasurementFailed),
    ],
)
def test_runner_errors_map_to_exceptions(kind, exception):
    with pytest.raises(exception, match="^why$"):
        parse_result({"error": {"kind": kind, "message": "why"}})


def test_cli_exits_2_with_one_line_where_measurement_cannot_run(bare_python, capsys):
    status = main(
        ["measure", str(CONFIGS / "llama-pp2-vpp2-recompute.yaml"), "--rank", "15", "--python", bare_python]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err == [
        f"memtune measure: needs PyTorch and megatron-core with a CUDA GPU; {bare_python} has no PyTorch and "
        "megatron-core (megatron-core 0.19 needs Python >= 3.12)"
    ]


def test_cli_refuses_bad_arguments_before_starting_anything(capsys):
    status = main(["measure", str(CONFIGS / "qwen3-moe-ep4.yaml"), "--rank", "8", "--iters", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err == [
        "memtune measure: --rank 8: must be between 0 and 7 (world size 8)",
        "memtune measure: --iters 1: needs at least 2 (Adam creates its state at the first step)",
    ]


def test_cli_requires_a_rank():
    with pytest.raises(SystemExit) as exc:
        main(["measure", str(CONFIGS / "qwen3-moe-ep4.yaml")])
    assert exc.value.code == 2


def test_report_sets_the_estimate_beside_a_real_measurement():
    from rich.console import Console

    from memtune.config import validate
    from memtune.measure.render import print_report, report_json
    from memtune.measure.run import Measurement

    record = json.loads(
        (CONFIGS.parents[2] / "benchmarks" / "measured" / "h200-mcore0.19.2.jsonl")
        .read_text()
        .splitlines()[0]
    )
    plan = plan_measurement(gate(validate(record["config"])), record["rank"])
    result = Measurement(record["measured"], record["environment"], record["pp_rank"], record["wall_seconds"])
    peak = record["measured"]["peak_allocated_bytes"]
    report = report_json(plan, result, peak + 2**30)
    assert report["estimate"] == {"peak_bytes": peak + 2**30, "difference_bytes": 2**30}
    console = Console(record=True, width=200)
    print_report(console, plan, result, peak + 2**30)
    text = console.export_text()
    assert (
        f"steady-state peak allocated {peak / 2**30:.2f}   estimate {(peak + 2**30) / 2**30:.2f}   difference +1.00"
        in text
    )
    assert "1 (warm-up)" in text


def test_the_snapshot_is_recorded_beside_its_target_and_moved_into_place(monkeypatch, tmp_path):
    """The runner writes into a scratch directory next to the target (an absolute path), and the
    snapshot reaches the target only when the run succeeded; a failed run leaves nothing."""
    import memtune.measure.run as run_module

    seen = {}

    def failing_run(plan_json, env, python, timeout_s):
        seen.update(env)
        return {"error": {"kind": "failed", "message": "stop here"}}

    monkeypatch.setattr(run_module, "run_plan_json", failing_run)
    monkeypatch.chdir(tmp_path)
    plan = plan_measurement(gate(load_job(CONFIGS / "qwen3-moe-ep4.yaml").job), rank=3)
    with pytest.raises(MeasurementFailed):
        run_plan(plan, snapshot=Path("peak.pickle"))
    recorded = Path(seen[run_module.SNAPSHOT_VARIABLE])
    assert recorded.is_absolute() and recorded.parent.parent == tmp_path
    assert list(tmp_path.iterdir()) == []
    seen.clear()
    with pytest.raises(MeasurementFailed):
        run_plan(plan)
    assert run_module.SNAPSHOT_VARIABLE not in seen

    def writing_run(plan_json, env, python, timeout_s):
        Path(env[run_module.SNAPSHOT_VARIABLE]).write_bytes(b"snapshot")
        return {"measured": {}, "environment": {}, "pp_rank": 0, "wall_seconds": 1.0}

    monkeypatch.setattr(run_module, "run_plan_json", writing_run)
    run_plan(plan, snapshot=Path("peak.pickle"))
    assert [p.name for p in tmp_path.iterdir()] == ["peak.pickle"]
    assert (tmp_path / "peak.pickle").read_bytes() == b"snapshot"
