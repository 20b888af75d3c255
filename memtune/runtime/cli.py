"""``memtune run [--config C] [--out DIR] -- COMMAND...`` and
``memtune report DIR [--config C] [--plot PNG] [--json] [--export-measured FILE]``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from memtune.errors import InputError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run_parser = subparsers.add_parser(
        "run",
        help="run a training command with the job's memory environment; diagnose it if it fails",
        description="Run COMMAND with the config's allocator settings, NCCL_GRAPH_REGISTER and "
        "CUDA_DEVICE_MAX_CONNECTIONS (where Megatron needs it); stream its output and save it in "
        "DIR/output.log; pass SIGINT/SIGTERM to it; if it fails, diagnose the log and any OOM "
        "snapshots in DIR. MemoryMonitor and capture_oom in the command write into DIR by default. "
        "Exits with the command's exit status.",
    )
    run_parser.add_argument(
        "--config", metavar="CONFIG", help="the job config (its env section sets the environment)"
    )
    run_parser.add_argument(
        "--out",
        metavar="DIR",
        help="where to keep the output, records and snapshots (default memtune-run-TIME)",
    )
    run_parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
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
    from memtune.config import derive, load_job
    from memtune.runtime.launch import launch_environment, run_command, snapshots_in

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise InputError("give the command to run after --, e.g. memtune run -- torchrun train.py")
    derived = derive(load_job(args.config, []).job) if args.config else None
    out_dir = Path(args.out or time.strftime("memtune-run-%Y%m%d-%H%M%S"))
    launch = launch_environment(derived, os.environ, out_dir)
    shown = " ".join(f"{k}={v}" for k, v in launch.variables.items())
    print(f"memtune run: {shown}", file=sys.stderr)
    for note in launch.notes:
        print(f"memtune run: {note}", file=sys.stderr)
    status = run_command(command, launch.apply(os.environ), out_dir)
    print(f"memtune run: exit status {status}; output in {out_dir}", file=sys.stderr)
    if status != 0:
        _diagnose(out_dir, args.config, snapshots_in(out_dir))
    return status


def _diagnose(out_dir: Path, config: str | None, snapshots: list[Path]) -> None:
    from rich.console import Console

    from memtune.diagnose import diagnose
    from memtune.diagnose.report import render
    from memtune.runtime.launch import LOG_NAME

    snapshot = str(snapshots[0]) if snapshots else None
    if len(snapshots) > 1:
        others = ", ".join(str(p) for p in snapshots[1:])
        print(f"memtune run: diagnosing with the newest snapshot; others: {others}", file=sys.stderr)
    result = diagnose([str(out_dir / LOG_NAME)], snapshot=snapshot, config=config)
    render(result, Console(stderr=True))


def report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from memtune.outfile import check_output_path, write_atomically
    from memtune.plotfile import check_plot_path
    from memtune.runtime.records import read_directory
    from memtune.runtime.render import plot, render, to_json
    from memtune.runtime.report import build_report, measured_records, rank_estimates

    if args.plot:
        check_plot_path(args.plot)
    if args.force and not args.export_measured:
        raise InputError("--force goes with --export-measured FILE.jsonl")
    export = (
        check_output_path("--export-measured", args.export_measured, force=args.force)
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
        json.dump(to_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(result, Console())
    return 0
