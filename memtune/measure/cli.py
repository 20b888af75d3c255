"""``memtune measure CONFIG --rank R [--iters N] [--resume] [--json]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from memtune.check import CheckedJob, gate
from memtune.config import report_ignored
from memtune.config.arguments import add_job_arguments, load_from_args
from memtune.errors import InputError
from memtune.estimate import estimate
from memtune.infile import names_a_file
from memtune.limits import MAX_MEASURE_ITERATIONS, MAX_TIMEOUT_SECONDS
from memtune.measure.plan import DEFAULT_ITERATIONS, MeasurePlan, plan_measurement
from memtune.measure.render import print_report, print_resume_report, report_json, resume_report_json
from memtune.measure.run import DEFAULT_TIMEOUT_S, MeasurementFailed, check_interpreter, run_plan, run_resume
from memtune.options import seconds
from memtune.outfile import check_output_path
from memtune.output import print_json

EXIT_FAILED = 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "measure",
        help="train one rank of the job on this GPU (fake process group) and report its true peak",
        description="Build the model shard that global rank R of the job holds, wrap it as Megatron training "
        "does, run full training iterations through Megatron-Core's pipeline schedule with a fake process "
        "group, and report the allocator's peaks beside memtune's estimate. Needs a CUDA GPU and "
        "megatron-core. Sizes are GiB (2^30 bytes); steady state starts at iteration 2.",
    )
    add_job_arguments(p, "training config (the same files `memtune estimate` reads)")
    p.add_argument(
        "--rank", type=int, required=True, metavar="R", help="global rank to measure (order tp-cp-ep-dp-pp)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=DEFAULT_ITERATIONS,
        metavar="N",
        help=f"training iterations (default {DEFAULT_ITERATIONS}, 2 to {MAX_MEASURE_ITERATIONS})",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the measurement, the config it ran and the estimate as JSON",
    )
    p.add_argument(
        "--python",
        default=sys.executable,
        metavar="PATH",
        help="interpreter with torch and megatron-core (default: this one)",
    )
    p.add_argument(
        "--snapshot",
        metavar="FILE.pickle",
        help="also record the allocator during the last iteration and write a memory snapshot "
        "(read it with `memtune diagnose --snapshot` or pytorch.org/memory_viz)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="also save a checkpoint of the rank in the job's checkpoint.ckpt_format and load it back in a "
        "fresh process, recording the load's peak and the first iteration's (docs/resume.md)",
    )
    p.add_argument("--force", action="store_true", help="with --snapshot: replace FILE.pickle if it exists")
    p.add_argument(
        "--timeout",
        default=str(DEFAULT_TIMEOUT_S),
        metavar="S",
        help=f"stop the run after S seconds (default {DEFAULT_TIMEOUT_S}, at most {MAX_TIMEOUT_SECONDS})",
    )
    p.set_defaults(handler=run)


def _check_arguments(args: argparse.Namespace) -> Path | None:
    """The options, before the job is loaded or anything runs: the timeout, the iteration count
    and the snapshot's path (refused if it is the input, exists without --force, or lies in a
    directory that does not exist). Returns that path."""
    args.timeout = seconds("--timeout", args.timeout, MAX_TIMEOUT_SECONDS)
    if args.iters > MAX_MEASURE_ITERATIONS:  # below 2 is plan_measurement's refusal, which says why
        raise InputError(
            f"--iters {args.iters}: at most {MAX_MEASURE_ITERATIONS} (the peak is steady from iteration 2)"
        )
    if args.force and not args.snapshot:
        raise InputError("--force goes with --snapshot FILE.pickle")
    if args.snapshot is None:
        return None
    if args.resume:
        raise InputError(
            "--snapshot records the training run; with --resume there are two runs and no snapshot is "
            "recorded: measure without --resume to record one"
        )
    inputs = tuple(w for w in (args.config, *args.overrides) if w and names_a_file(w))
    return check_output_path("--snapshot", args.snapshot, force=args.force, inputs=inputs)


def run(args: argparse.Namespace) -> int:
    snapshot = _check_arguments(args)
    loaded = load_from_args(args, "memtune measure CONFIG|--recipe NAME --rank R [key=value ...]")
    report_ignored(loaded, args.command)
    checked = gate(loaded.job)
    plan = plan_measurement(checked, args.rank, args.iters, resume=args.resume)
    if args.resume and not checked.derived.resumes:
        raise InputError(
            "--resume: the job does not resume; set checkpoint.load (a job that only saves is measured by"
            " benchmarks/gpu/run_matrix.py --save, docs/save.md)"
        )
    check_interpreter(args.python)
    if args.resume:
        return _run_resume(args, checked, plan, loaded.ignored)
    try:
        result = run_plan(
            plan, python=args.python, timeout_s=args.timeout, snapshot=snapshot, replace_snapshot=args.force
        )
    except MeasurementFailed as exc:
        print(f"memtune measure: {exc}", file=sys.stderr)
        return EXIT_FAILED
    estimate_bytes = estimate(checked).rank(args.rank).peak_bytes
    if args.json:
        print_json({**report_json(plan, result, estimate_bytes), "ignored_keys": loaded.ignored})
    else:
        print_report(Console(), plan, result, estimate_bytes)
    return 0


def _run_resume(args: argparse.Namespace, checked: CheckedJob, plan: MeasurePlan, ignored: list[str]) -> int:
    try:
        result = run_resume(plan, python=args.python, timeout_s=args.timeout)
    except MeasurementFailed as exc:
        print(f"memtune measure: {exc}", file=sys.stderr)
        return EXIT_FAILED
    est = estimate(checked)
    rank = est.rank(args.rank)
    resume = est.resume(rank)
    assert resume is not None  # plan_measurement refuses a job that does not resume
    if args.json:
        print_json({**resume_report_json(plan, result, rank.peak_bytes, resume), "ignored_keys": ignored})
    else:
        console = Console()
        print_report(console, plan, result.training, rank.peak_bytes)
        print_resume_report(console, result, resume)
    return 0
