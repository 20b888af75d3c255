"""``memtune bench accuracy [FILES...]``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from memtune.bench import render
from memtune.bench.accuracy import accuracy_report, evaluate, read_runs
from memtune.bench.published import evaluate_published, published_report, read_published

DEFAULT_SET = Path("benchmarks/measured")
DEFAULT_PUBLISHED = Path("benchmarks/published/memory")
DEFAULT_RESUME_SET = Path("benchmarks/measured/resume")
DEFAULT_LAYOUTS_TEXT = "benchmarks/published/layouts"
CALIBRATION_TEXT = "memtune/estimate/calibration.json"


def _set_arguments(parser: argparse.ArgumentParser, pattern: str, default: Path) -> None:
    """The files of runs a benchmark reads, and ``--json``."""
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[default],
        help=f"{pattern} files or folders (default {default})",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="benchmarks: estimator accuracy against measured runs")
    bench = p.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    acc = bench.add_parser(
        "accuracy",
        help="estimate every measured run and report the error",
        description="Compare memtune's estimate (and Megatron-LM's theoretical formula) with measured "
        "steady-state peaks (max_memory_allocated, iteration 2 onward).",
    )
    _set_arguments(acc, "*.jsonl", DEFAULT_SET)
    acc.add_argument(
        "--split",
        default="all",
        metavar="NAME",
        help="report only runs of this split (tune, holdout, fresh, ...; default all)",
    )
    acc.set_defaults(handler=run)
    pub = bench.add_parser(
        "published",
        help="estimate every published real run and report the error",
        description="Compare memtune's estimate with peaks (max_memory_allocated) published for real "
        "multi-GPU runs (benchmarks/published/README.md). Under-estimates are flagged: they say 'fits' "
        "before an out-of-memory.",
    )
    _set_arguments(pub, "*.yaml", DEFAULT_PUBLISHED)
    pub.add_argument("--split", default="all", metavar="NAME", help="tune or holdout (default all)")
    pub.set_defaults(handler=run_published)
    res = bench.add_parser(
        "resume",
        help="estimate every measured checkpoint round trip and report the error",
        description="Compare the estimate's resume phase (the checkpoint load and the first iteration "
        "after it) with `memtune measure --resume` round trips (docs/resume.md).",
    )
    _set_arguments(res, "*.jsonl", DEFAULT_RESUME_SET)
    res.set_defaults(handler=run_resume)
    cal = bench.add_parser(
        "calibrate",
        help="the verdict's margin per feature family, from the tune runs of both sets",
        description="Evaluate the measured and the published set, keep their tune runs and write the worst "
        f"under-estimate per feature family to {CALIBRATION_TEXT}, which the verdict reads (docs/verdict.md).",
    )
    cal.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the committed table differs from what the sets give",
    )
    cal.set_defaults(handler=run_calibrate)
    plan = bench.add_parser(
        "plan",
        help="the planner's search speed; with --accuracy, the throughput model against published layouts",
        description="Time a `memtune plan` search of every layout (default: Llama 3.1 405B on 1,024 H100s; it "
        "runs in one process), or with --accuracy compare predicted and measured throughput of published "
        "layout comparisons.",
    )
    plan.add_argument("--model", default="llama3.1-405b", help="model preset (default llama3.1-405b)")
    plan.add_argument("--gpus", type=int, default=1024, help="GPU count (default 1024)")
    plan.add_argument("--gpu", default="H100-80GB", help="GPU type (default H100-80GB)")
    plan.add_argument("--seq", type=int, default=8192, help="sequence length (default 8192)")
    plan.add_argument("--gbs", type=int, default=1536, help="global batch size (default 1536)")
    plan.add_argument(
        "--accuracy",
        nargs="*",
        type=Path,
        metavar="PATH",
        help=f"published comparisons to score (default {DEFAULT_LAYOUTS_TEXT})",
    )
    plan.add_argument("--json", action="store_true", help="with --accuracy: print machine-readable JSON")
    plan.add_argument(
        "--split",
        default="all",
        choices=("all", "tune", "holdout"),
        help="with --accuracy: score only this split",
    )
    plan.set_defaults(handler=run_plan)
    step = bench.add_parser(
        "step",
        help="the step model's price of one job exactly as configured (simulated per stage)",
        description="Predict the step time, tokens/s and model TFLOP/s per GPU of CONFIG as written, from "
        "the step model (measured kernels, declared fabric, simulated schedule), per pipeline stage.",
    )
    step.add_argument("config", help="a config memtune reads")
    step.add_argument("overrides", nargs="*", help="dotted overrides, key=value")
    step.add_argument("--json", action="store_true", help="print machine-readable JSON")
    step.add_argument("--plot", metavar="FILE.png", help="draw the simulated step per stage (a Gantt chart)")
    step.set_defaults(handler=run_step)


def run(args: argparse.Namespace) -> int:
    report = accuracy_report([evaluate(r) for r in read_runs(args.paths)], args.split)
    if args.json:
        print(json.dumps(render.accuracy_json(report), indent=2))
    else:
        render.print_accuracy(Console(), report)
    return 0


def run_published(args: argparse.Namespace) -> int:
    report = published_report([evaluate_published(r) for r in read_published(args.paths)], args.split)
    if args.json:
        print(json.dumps(render.published_json(report), indent=2))
    else:
        render.print_published(Console(), report)
    return 0


def run_resume(args: argparse.Namespace) -> int:
    from memtune.bench.resume import evaluate_resume, resume_splits

    results = [evaluate_resume(r) for r in read_runs(args.paths)]
    if args.json:
        print(json.dumps(render.resume_json(results, resume_splits(results)), indent=2))
    else:
        render.print_resume(Console(), results, resume_splits(results))
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    from memtune.bench.calibrate import calibrate
    from memtune.estimate.verdict import CALIBRATION, calibration_json

    table = calibrate(
        [evaluate(r) for r in read_runs([DEFAULT_SET])],
        [evaluate_published(r) for r in read_published([DEFAULT_PUBLISHED])],
    )
    text = json.dumps(calibration_json(table), indent=2) + "\n"
    if args.check:
        same = CALIBRATION.read_text(encoding="utf-8") == text
        print(f"{CALIBRATION_TEXT}: {'up to date' if same else 'differs from what the sets give'}")
        return 0 if same else 1
    CALIBRATION.write_text(text, encoding="utf-8")
    render.print_calibration(Console(), table)
    return 0


def run_plan(args: argparse.Namespace) -> int:
    from memtune.bench import plan as bench_plan

    console = Console()
    if args.accuracy is not None:
        groups = bench_plan.accuracy(args.accuracy or [bench_plan.DEFAULT_LAYOUTS], args.split)
        if args.json:
            print(json.dumps(render.plan_accuracy_json(groups), indent=2))
        else:
            render.print_plan_accuracy(console, groups)
        return 0
    result = bench_plan.speed(args.model, args.gpus, args.seq, args.gbs, args.gpu)
    render.print_plan_speed(console, args, result)
    return 0


def run_step(args: argparse.Namespace) -> int:
    from memtune.check import gate
    from memtune.config import load_job, report_ignored
    from memtune.perf import render as perf_render
    from memtune.perf.step import predict_step

    loaded = load_job(args.config, args.overrides)
    report_ignored(loaded, args.command)
    prediction = predict_step(gate(loaded.job).derived, record_events=bool(args.plot))
    if args.json:
        print(json.dumps(perf_render.step_json(prediction), indent=2))
    else:
        perf_render.print_step(Console(), prediction)
    if args.plot:
        perf_render.plot_step(prediction, args.plot)
    return 0
