"""``memtune run [--config C] [--out DIR] -- COMMAND...`` and
``memtune report DIR [--config C] [--plot PNG] [--json] [--export-measured FILE]``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from memtune.config import LoadedJob
from memtune.config.arguments import add_recipe_argument, is_override, load_from_words
from memtune.errors import InputError
from memtune.output import print_json


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run_parser = subparsers.add_parser(
        "run",
        help="run a training command with the job's memory environment; diagnose it if it fails",
        description="Run COMMAND with the config's allocator settings, NCCL_GRAPH_REGISTER and "
        "CUDA_DEVICE_MAX_CONNECTIONS (where Megatron needs it); stream its output and save it in "
        "DIR/output.log; pass SIGINT/SIGTERM/SIGHUP to it (a second one kills it); if it fails, diagnose the log and any OOM "
        "snapshots in DIR. MemoryMonitor and capture_oom in the command write into DIR by default. "
        "Exits with the command's exit status.",
    )
    run_parser.add_argument(
        "--config", metavar="CONFIG", help="the job config (its env section sets the environment)"
    )
    add_recipe_argument(run_parser)
    run_parser.add_argument(
        "--out",
        metavar="DIR",
        help="where to keep the output, records and snapshots (default: a new memtune-run-TIME)",
    )
    run_parser.add_argument(
        "--force", action="store_true", help="replace the earlier run's output.log and run.json in --out DIR"
    )
    # Not dest="command": the subcommand's own name lives there and prefixes every error line.
    run_parser.add_argument(
        "to_run",
        nargs=argparse.REMAINDER,
        metavar="[key=value ...] -- COMMAND...",
        help="dotted overrides of the job config, then after -- the command",
    )
    run_parser.set_defaults(handler=run)

    report_parser = subparsers.add_parser(
        "report",
        help="summarise a monitored run: measured peak vs estimate per rank, leaks, resume jumps",
        description="Read the MemoryMonitor's JSONL files in DIR; print measured peak vs estimate "
        "per rank and flag memory that keeps growing, a jump after a checkpoint resume, rising "
        "allocation retries and ranks far above their pipeline peers.",
    )
    report_parser.add_argument("dir", metavar="DIR", help="the monitor's output directory")
    report_parser.add_argument(
        "--config", metavar="CONFIG", help="estimate from this config (default: the one the monitor recorded)"
    )
    report_parser.add_argument("--plot", metavar="FILE.png", help="plot memory per rank over the steps")
    report_parser.add_argument("--json", action="store_true", help="print the report as JSON")
    report_parser.add_argument(
        "--export-measured",
        metavar="FILE.jsonl",
        help="write per-rank records that `memtune bench accuracy` reads",
    )
    report_parser.add_argument(
        "--force", action="store_true", help="with --export-measured: replace FILE.jsonl if it exists"
    )
    report_parser.set_defaults(handler=report)


def run(args: argparse.Namespace) -> int:
    from memtune.config import derive, report_ignored
    from memtune.runtime.launch import (
        claim_out_dir,
        default_out_dir,
        launch_environment,
        run_command,
        snapshots_in,
    )

    overrides, command = _overrides_and_command(args.to_run)
    if not command:
        raise InputError("give the command to run after --, e.g. memtune run -- torchrun train.py")
    loaded = None
    if args.config or args.recipe:
        words = [args.config, *overrides] if args.config else overrides
        loaded = load_from_words(
            words, args.recipe, "memtune run --config C|--recipe NAME [key=value ...] -- COMMAND"
        )
        report_ignored(loaded, args.command)
    elif overrides:
        raise InputError(f"{overrides[0]}: overrides need a job: give --config CONFIG or --recipe NAME")
    derived = derive(loaded.job) if loaded else None
    if args.force and args.out is None:
        raise InputError("--force replaces an earlier run in --out DIR; without --out the directory is new")
    out_dir = default_out_dir() if args.out is None else claim_out_dir(args.out, args.force)
    launch = launch_environment(derived, os.environ, out_dir)
    shown = " ".join(f"{k}={v}" for k, v in launch.variables.items())
    print(f"memtune run: {shown}", file=sys.stderr)
    for note in launch.notes:
        print(f"memtune run: {note}", file=sys.stderr)
    result = run_command(command, launch.apply(os.environ), out_dir, args.force)
    for note in result.notes:
        print(f"memtune run: {note}", file=sys.stderr)
    status = result.status
    print(f"memtune run: exit status {status}; output in {out_dir}", file=sys.stderr)
    if status != 0:
        try:
            _diagnose(out_dir, loaded, snapshots_in(out_dir, since=result.started))
        except InputError as exc:  # output diagnose cannot read (binary) must not replace the status
            print(f"memtune run: no diagnosis: {exc.problems[0]}", file=sys.stderr)
    return status


def _overrides_and_command(words: list[str]) -> tuple[list[str], list[str]]:
    """The job's dotted overrides before ``--`` and the command after it; without ``--`` after
    overrides, all the words are the command (which may hold a ``--`` of its own)."""
    split = words.index("--") if "--" in words else None
    if split is None or not all(is_override(w) for w in words[:split]):
        return [], words
    return words[:split], words[split + 1 :]


def _diagnose(out_dir: Path, config: LoadedJob | None, snapshots: list[Path]) -> None:
    from rich.console import Console

    from memtune.diagnose import diagnose
    from memtune.diagnose.advice import ranked_fixes
    from memtune.diagnose.report import render
    from memtune.fix.render import print_suggestions
    from memtune.runtime.launch import LOG_NAME

    snapshot = str(snapshots[0]) if snapshots else None
    if len(snapshots) > 1:
        others = ", ".join(str(p) for p in snapshots[1:])
        print(f"memtune run: diagnosing with the newest snapshot; others: {others}", file=sys.stderr)
    result = diagnose([str(out_dir / LOG_NAME)], snapshot=snapshot, config=config)
    console = Console(stderr=True)
    ranked = ranked_fixes(config, result.verdict)
    render(result, console, advice=ranked is None)
    if ranked:  # the list memtune fix --oom-log prints for this failure (fix/search.py)
        print_suggestions(ranked, console)


def report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from memtune.outfile import check_output_path, write_atomically
    from memtune.plotfile import check_plot_path
    from memtune.runtime.records import FILE_PATTERN, read_directory
    from memtune.runtime.render import plot, render, to_json
    from memtune.runtime.report import build_report, measured_records, rank_estimates

    # The files report reads: the monitor's records in DIR (not DIR itself, where an export may go) and the config.
    records = sorted(str(p) for p in Path(args.dir).glob(FILE_PATTERN)) if os.path.isdir(args.dir) else []
    inputs = (*records, *([args.config] if args.config else []))
    if args.plot:
        check_plot_path(args.plot, inputs)
    if args.force and not args.export_measured:
        raise InputError("--force goes with --export-measured FILE.jsonl")
    export = (
        check_output_path("--export-measured", args.export_measured, force=args.force, inputs=inputs)
        if args.export_measured
        else None
    )
    monitor_run = read_directory(args.dir)
    estimates, source, config_dump = None, None, None
    if args.config:
        from memtune.check import gate
        from memtune.config import load_job
        from memtune.estimate import estimate

        job = load_job(args.config, []).job
        estimates = rank_estimates(monitor_run, estimate(gate(job)), args.config)
        source, config_dump = f"config {args.config}", job.model_dump(mode="json", exclude_defaults=True)
    else:
        config_dump = next((r.config for r in monitor_run.ranks.values() if r.config is not None), None)
    result = build_report(monitor_run, estimates, source)
    if args.plot:
        plot(monitor_run, result, args.plot)
    if export is not None:
        if config_dump is None:
            raise InputError(
                "--export-measured needs the job config: give --config (the monitor recorded none)"
            )
        name = Path(args.dir).resolve().name
        lines = [json.dumps(r) for r in measured_records(monitor_run, config_dump, name, result.rows)]
        text = "".join(line + "\n" for line in lines).encode()
        write_atomically(
            export, lambda handle: handle.write(text), replace=args.force, option="--export-measured"
        )
    if args.json:
        print_json(to_json(result))
    else:
        render(result, Console())
    return 0
