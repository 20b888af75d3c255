"""``memtune bench accuracy [FILES...]``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from memtune.bench import render
from memtune.bench.accuracy import accuracy_report, evaluate, read_runs
from memtune.bench.published import evaluate_published, published_report, read_published
from memtune.config.arguments import add_job_arguments
from memtune.errors import InputError
from memtune.infile import names_a_file
from memtune.options import at_least
from memtune.outfile import write_atomically
from memtune.output import print_json
from memtune.plotfile import check_plot_path

DEFAULT_SET = Path("benchmarks/measured")
DEFAULT_PUBLISHED = Path("benchmarks/published/memory")
DEFAULT_RESUME_SET = Path("benchmarks/measured/resume")
DEFAULT_LAYOUTS_TEXT = "benchmarks/published/layouts"
CALIBRATION_TEXT = "memtune/estimate/calibration.json"
# `bench plan`'s default search: Llama 3.1 405B on 1,024 H100s.
SPEED_DEFAULTS: dict[str, str | int] = {
    "model": "llama3.1-405b",
    "gpus": 1024,
    "gpu": "H100-80GB",
    "seq": 8192,
    "gbs": 1536,
}


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
    for add in (
        _add_accuracy,
        _add_published,
        _add_resume,
        _add_calibrate,
        _add_plan,
        _add_step,
        _add_figures,
    ):
        add(bench)


def _add_accuracy(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memtune bench accuracy`: the estimator against the measured runs."""
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


def _add_published(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memtune bench published`: the estimator against published real runs."""
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


def _add_resume(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memtune bench resume`: the resume and save phases against measured checkpoint round trips."""
    res = bench.add_parser(
        "resume",
        help="estimate every measured checkpoint round trip and report the error",
        description="Compare the estimate's resume phase (the checkpoint load and the first iteration "
        "after it) with `memtune measure --resume` round trips (docs/resume.md), and its save phase "
        "with the measured saves (docs/save.md).",
    )
    _set_arguments(res, "*.jsonl", DEFAULT_RESUME_SET)
    res.set_defaults(handler=run_resume)


def _add_calibrate(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memtune bench calibrate`: the verdict's margins from the tune runs."""
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


def _add_plan(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memtune bench plan`: the planner's speed, or the step model against published layouts."""
    plan = bench.add_parser(
        "plan",
        help="the planner's search speed; with --accuracy, the throughput model against published layouts",
        description="Time a `memtune plan` search of every layout (default: Llama 3.1 405B on 1,024 H100s; it "
        "runs in one process), or with --accuracy compare predicted and measured throughput of published "
        "layout comparisons.",
    )
    for option, kind, help_text in (
        ("--model", str, "model preset"),
        ("--gpus", int, "GPU count"),
        ("--gpu", str, "GPU type"),
        ("--seq", int, "sequence length"),
        ("--gbs", int, "global batch size"),
    ):
        default = SPEED_DEFAULTS[option.lstrip("-")]
        plan.add_argument(option, type=kind, help=f"{help_text} (default {default})")
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


def _add_step(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memtune bench step`: the step model of one job."""
    step = bench.add_parser(
        "step",
        help="the step model's price of one job exactly as configured (simulated per stage)",
        description="Predict the step time, tokens/s and model TFLOP/s per GPU of CONFIG as written, from "
        "the step model (measured kernels, declared fabric, simulated schedule), per pipeline stage.",
    )
    add_job_arguments(step, "a config memtune reads, or recipe:NAME")
    step.add_argument("--json", action="store_true", help="print machine-readable JSON")
    step.add_argument("--plot", metavar="FILE.png", help="draw the simulated step per stage (a Gantt chart)")
    step.set_defaults(handler=run_step)


def _add_figures(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memtune bench figures`: the figures the documents quote."""
    fig = bench.add_parser(
        "figures",
        help="the figures README.md and docs/ quote (rule count, accuracy and false-fit tables, step error)",
        description="Print every figure the documents quote, computed from the benchmarks; with --write put "
        "them between their markers (<!-- figure: NAME --> ... <!-- /figure -->) in README.md, "
        "docs/verdict.md and docs/plan.md; with --check exit 1 when a document differs. Run from the "
        "repository's root.",
    )
    how = fig.add_mutually_exclusive_group()
    how.add_argument("--write", action="store_true", help="rewrite the marked figures in the documents")
    how.add_argument("--check", action="store_true", help="exit 1 when a document's figure differs")
    fig.set_defaults(handler=run_figures)


def run(args: argparse.Namespace) -> int:
    report = accuracy_report([evaluate(r) for r in read_runs(args.paths)], args.split)
    if args.json:
        print_json(render.accuracy_json(report))
    else:
        render.print_accuracy(Console(), report)
    return 0


def run_published(args: argparse.Namespace) -> int:
    report = published_report([evaluate_published(r) for r in read_published(args.paths)], args.split)
    if args.json:
        print_json(render.published_json(report))
    else:
        render.print_published(Console(), report)
    return 0


def run_resume(args: argparse.Namespace) -> int:
    from memtune.bench.resume import evaluate_resume, resume_splits, save_splits
    from memtune.bench.sets import read_measured

    results = [evaluate_resume(r) for r in read_measured(args.paths, resume=True)]
    if args.json:
        print_json(render.resume_json(results, resume_splits(results), save_splits(results)))
    else:
        render.print_resume(Console(), results, resume_splits(results), save_splits(results))
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
    write_atomically(
        CALIBRATION, lambda handle: handle.write(text.encode()), replace=True, option="calibrate"
    )
    render.print_calibration(Console(), table)
    return 0


def run_plan(args: argparse.Namespace) -> int:
    from memtune.bench import plan as bench_plan

    console = Console()
    _check_plan_arguments(args)
    if args.accuracy is not None:
        groups = bench_plan.accuracy(args.accuracy or [bench_plan.DEFAULT_LAYOUTS], args.split, gb200=True)
        if args.json:
            print_json(render.plan_accuracy_json(groups))
        else:
            render.print_plan_accuracy(console, groups)
        return 0
    result = bench_plan.speed(args.model, args.gpus, args.seq, args.gbs, args.gpu)
    render.print_plan_speed(console, args, result)
    return 0


def _check_plan_arguments(args: argparse.Namespace) -> None:
    """What argparse lets through: counts of 0, an empty --gpu, and the options of one mode given
    to the other. Fills in the speed run's defaults."""
    from memtune.plan.cli import check_search_options

    speed = [f"--{name}" for name in SPEED_DEFAULTS if getattr(args, name) is not None]
    if args.accuracy is not None:
        if speed:
            raise InputError(f"{', '.join(speed)} time a search; --accuracy takes none of them")
        return
    if args.json or args.split != "all":
        raise InputError("--json and --split go with --accuracy (the speed run prints a table)")
    for name, default in SPEED_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    for option, value in (("--gpus", args.gpus), ("--seq", args.seq), ("--gbs", args.gbs)):
        at_least(option, value)
    check_search_options(0, args.gpu)


def run_step(args: argparse.Namespace) -> int:
    from memtune.check import gate
    from memtune.config import report_ignored
    from memtune.config.arguments import load_from_args
    from memtune.perf import render as perf_render
    from memtune.perf.step import predict_step
    from memtune.perf.uncertainty import step_uncertainty

    if args.plot:
        words = (args.config, *args.overrides)
        check_plot_path(args.plot, tuple(w for w in words if w is not None and names_a_file(w)))
    loaded = load_from_args(
        args, "memtune bench step CONFIG|--recipe NAME [OVERRIDE.yaml ...] [key=value ...]"
    )
    report_ignored(loaded, args.command)
    derived = gate(loaded.job).derived
    prediction = predict_step(derived, record_events=bool(args.plot))
    uncertainty = step_uncertainty(derived)
    if args.json:
        print_json({**perf_render.step_json(prediction, uncertainty), "ignored_keys": loaded.ignored})
    else:
        perf_render.print_step(Console(), prediction, uncertainty)
    if args.plot:
        perf_render.plot_step(prediction, args.plot)
    return 0


def run_figures(args: argparse.Namespace) -> int:
    from memtune.bench import figures

    if args.check:
        drifted = figures.drift()
        for d in drifted:
            print(
                f"{d.document}: figure {d.figure} differs from `memtune bench figures` (--write updates it)"
            )
        if not drifted:
            print(f"{sum(len(p) for p in figures.marked().values())} marked figures are up to date")
        return 1 if drifted else 0
    if args.write:
        for path in figures.DOCUMENTS:
            text = path.read_text(encoding="utf-8")
            if (new := figures.rewritten(text)) != text:
                path.write_text(new, encoding="utf-8")
                print(f"{path}: updated")
        return 0
    where = figures.marked()
    for name, make in figures.FIGURES.items():
        shown = ", ".join(str(p) for p in where.get(name, [])) or "no document"
        print(f"## {name} ({shown})\n{make().strip()}\n")
    return 0
