"""Start the measurement subprocess and read back what it found.

The parent process needs neither torch nor a GPU: it checks that the interpreter it will
start can import both packages, writes the plan as JSON, and runs
``python -m memtune.measure.runner`` under the job's allocator settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memtune.childenv import child_environment
from memtune.errors import InputError, MissingDependencyError

if TYPE_CHECKING:  # the GPU-side batch driver imports this module where pydantic is absent
    from memtune.measure.plan import MeasurePlan

DEFAULT_TIMEOUT_S = 1800
# Allocator settings are read once, when CUDA starts; the job's own go in, inherited ones out.
_ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
_PROBE = (
    "import importlib.util as u\n"
    "missing = [n for n in ('torch', 'megatron.core') if u.find_spec(n.split('.')[0]) is None"
    " or u.find_spec(n) is None]\n"
    "print(','.join(missing))\n"
)


class MeasurementFailed(Exception):
    """The run started but did not finish; the message says why in one line."""


@dataclass(frozen=True)
class Measurement:
    measured: dict[str, Any]
    environment: dict[str, Any]
    pp_rank: int
    wall_seconds: float


SNAPSHOT_VARIABLE = "MEMTUNE_MEASURE_SNAPSHOT"


def subprocess_env(job_env: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``base`` (default: ours) without git's variables
    (``memtune/childenv.py``), with the job's allocator settings."""
    env = child_environment(base)
    for key in _ALLOCATOR_VARIABLES:
        env.pop(key, None)
    env.update(job_env)
    env["PYTHONUNBUFFERED"] = "1"
    # memtune must be importable by the child even when it runs from a source checkout.
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def check_interpreter(python: str) -> None:
    """Refuse early, in one line, when ``python`` lacks torch or megatron-core."""
    try:
        probe = subprocess.run(
            [python, "-c", _PROBE],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env=child_environment(),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingDependencyError(f"cannot start {python}: {exc}") from None
    missing = probe.stdout.strip()
    if probe.returncode != 0 or missing:
        names = {"torch": "PyTorch", "megatron.core": "megatron-core"}
        what = " and ".join(names[n] for n in missing.split(",") if n in names) or "a working interpreter"
        raise MissingDependencyError(
            f"needs {what} with a CUDA GPU; {python} has no {what} (megatron-core 0.19 needs Python >= 3.12)"
        )


def run_plan(
    plan: MeasurePlan,
    python: str = sys.executable,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    snapshot: Path | None = None,
    replace_snapshot: bool = False,
) -> Measurement:
    """Measure in a fresh subprocess. Raises MissingDependencyError (no GPU, no megatron-core),
    InputError (megatron-core rejected the configuration) or MeasurementFailed. With ``snapshot``
    (a path ``memtune.outfile.check_output_path`` accepted) the runner records the allocator's
    history during the last iteration into a scratch directory beside it, and the snapshot is
    moved into place once the run has succeeded (replacing a file only with ``replace_snapshot``)."""
    if snapshot is None:
        return parse_result(run_plan_json(plan.to_json(), plan.env, python, timeout_s))
    from memtune.outfile import move_into_place, scratch_beside

    with scratch_beside(snapshot) as scratch:
        recorded = Path(scratch).resolve() / "snapshot.pickle"
        env = dict(plan.env, **{SNAPSHOT_VARIABLE: str(recorded)})
        result = parse_result(run_plan_json(plan.to_json(), env, python, timeout_s))
        if not recorded.is_file():
            raise MeasurementFailed("the run finished without writing the memory snapshot")
        move_into_place(recorded, snapshot, replace=replace_snapshot, option="--snapshot")
    return result


@dataclass(frozen=True)
class ResumeMeasurement:
    """``memtune measure --resume``: the run that trained and saved, and the fresh process that
    loaded the checkpoint and ran the first iteration after it (``measured["resume"]``)."""

    training: Measurement
    resumed: Measurement


def run_resume(
    plan: MeasurePlan, python: str = sys.executable, timeout_s: float = DEFAULT_TIMEOUT_S
) -> ResumeMeasurement:
    """Train and save a checkpoint of the rank in one subprocess, then load it in a fresh one
    and run one iteration; the checkpoint lives in a temporary directory removed afterwards."""
    result = run_resume_json(plan.to_json(), plan.env, python, timeout_s)
    if "error" in result:
        parse_result(result)  # raises the error's own exception
    return ResumeMeasurement(parse_result(result["training"]), parse_result(result["resumed"]))


def run_resume_json(
    plan: dict[str, Any],
    job_env: Mapping[str, str],
    python: str,
    timeout_s: float,
    log: IO[str] | None = None,
) -> dict[str, Any]:
    """The checkpoint round trip of one resume plan (as JSON): ``{"training", "resumed"}``, the
    runner's results of the save and the load process, or the first one's ``error``; for a job
    that saves and does not resume, the save process's result alone."""
    with tempfile.TemporaryDirectory(prefix="memtune-resume-") as tmp:
        directory = str(Path(tmp, "checkpoint"))
        save = dict(plan, resume={**plan["resume"], "phase": "save", "directory": directory})
        training = run_plan_json(save, job_env, python, timeout_s, log)
        if "error" in training or plan["resume"].get("save_only"):
            return training  # a job that only saves: the save is measured in the training run
        load = dict(plan, iterations=1, resume={**plan["resume"], "phase": "load", "directory": directory})
        resumed = run_plan_json(load, job_env, python, timeout_s, log)
        if "error" in resumed:
            return resumed
    return {"training": training, "resumed": resumed}


def run_plan_json(
    plan: dict[str, Any],
    job_env: Mapping[str, str],
    python: str,
    timeout_s: float,
    log: IO[str] | None = None,
) -> dict[str, Any]:
    """Run one plan (as JSON) in a subprocess; return the runner's result, or an error record
    when the process died or timed out before writing one. ``log`` receives its output."""
    with tempfile.TemporaryDirectory(prefix="memtune-measure-") as tmp:
        plan_path, result_path = Path(tmp, "plan.json"), Path(tmp, "result.json")
        plan_path.write_text(json.dumps(plan))
        try:
            proc = subprocess.run(
                [python, "-m", "memtune.measure.runner", str(plan_path), str(result_path)],
                check=False,
                env=subprocess_env(job_env),
                stdout=log or subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return {
                "error": {
                    "kind": "timeout",
                    "message": f"the measurement ran past {timeout_s:.0f} s and was stopped",
                }
            }
        if not result_path.exists():
            tail = (proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
            return {
                "error": {
                    "kind": "failed",
                    "message": f"the measurement process exited with status {proc.returncode}: {tail[0]}",
                }
            }
        result: dict[str, Any] = json.loads(result_path.read_text())
        return result


def parse_result(result: dict[str, Any]) -> Measurement:
    error = result.get("error")
    if error:
        if error["kind"] == "missing":
            raise MissingDependencyError(error["message"])
        if error["kind"] == "config":
            raise InputError(error["message"])
        raise MeasurementFailed(error["message"])
    return Measurement(
        measured=result["measured"],
        environment=result["environment"],
        pp_rank=result["pp_rank"],
        wall_seconds=result["wall_seconds"],
    )
