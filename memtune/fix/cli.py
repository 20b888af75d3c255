"""``memtune fix CONFIG|--recipe NAME [key=value ...] [--oom-log LOG...] [--snapshot S] [--write OUT]
[--json]``."""

from __future__ import annotations

import argparse
from typing import Any

import yaml
from rich.console import Console

from memtune.config import report_ignored
from memtune.config.arguments import add_job_arguments, is_override, load_from_args
from memtune.config.changes import job_data
from memtune.diagnose.advice import fixes_for_failure
from memtune.errors import InputError
from memtune.fix.render import render
from memtune.fix.search import FixResult, Suggestion
from memtune.outfile import check_output_path, write_atomically
from memtune.output import print_json
from memtune.perf.step import STEP_MODEL_NOTES


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "fix",
        help="the cheapest config changes that make a failing job fit",
        description="From a config that does not fit (or that ran out of memory: give its logs), the changes with "
        "the smallest predicted throughput loss that make the failing rank fit, each checked by memtune check. "
        "Sizes are GiB (2^30 bytes).",
    )
    add_job_arguments(p, "training config (any format `memtune estimate` reads)")
    p.add_argument(
        "--oom-log", nargs="+", default=[], metavar="LOG", help="logs of the run that ran out of memory"
    )
    p.add_argument("--snapshot", metavar="FILE.pickle", help="a memory snapshot of that run")
    p.add_argument(
        "--write",
        metavar="OUT.yaml",
        help="write the first suggestion as a memtune YAML config (never over the input config)",
    )
    p.add_argument("--force", action="store_true", help="with --write: replace OUT.yaml if it exists")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    loaded = load_from_args(args, "memtune fix CONFIG|--recipe NAME [OVERRIDE.yaml ...] [key=value ...]")
    report_ignored(loaded, args.command)
    if args.force and not args.write:
        raise InputError("--force goes with --write OUT.yaml")
    # Every file the command reads: the job's files, and the failed run's logs and snapshot.
    inputs = tuple(
        w for w in (args.config, *args.overrides, *args.oom_log, args.snapshot) if w and not is_override(w)
    )
    target = check_output_path("--write", args.write, force=args.force, inputs=inputs) if args.write else None
    verdict = None
    if args.oom_log or args.snapshot:
        from memtune.diagnose import diagnose

        verdict = diagnose(args.oom_log, snapshot=args.snapshot, config=loaded).verdict
    label = verdict.label if verdict else None
    result = fixes_for_failure(loaded.job, verdict)
    if target is not None and result.suggestions:
        first = result.suggestions[0]
        text = f"# written by memtune fix: {first.title}\n" + yaml.safe_dump(
            job_data(first.job), sort_keys=False
        )
        write_atomically(
            target, lambda handle: handle.write(text.encode()), replace=args.force, option="--write"
        )
    if args.json:
        print_json(to_json(result, label))
        return 0 if result.suggestions else 1
    render(result, label, Console())
    if args.write:
        if not result.suggestions:
            raise InputError(f"--write {args.write}: no suggestion to write")
        Console().print(f"[dim]written to {args.write}[/dim]")
    return 0 if result.suggestions else 1


def _suggestion_json(s: Suggestion, result: FixResult) -> dict[str, Any]:
    failing = result.before.ranks[result.failing_rank]
    return {
        "title": s.title,
        "families": [r.family for r in s.remedies],
        "overrides": [str(c) for c in s.changes],
        "why": [r.why for r in s.remedies],
        "peak_before_bytes": failing.peak_bytes,
        "peak_after_bytes": failing.peak_bytes - s.saved_bytes,
        "saved_bytes": s.saved_bytes,
        "verdict_after": s.estimate.verdict(),
        "throughput_change": s.throughput_change,
        "tokens_per_s_per_gpu": s.prediction.tokens_per_s_per_gpu,
    }


def to_json(result: FixResult, label: str | None) -> dict[str, Any]:
    est = result.before
    return {
        "schema_version": 1,
        "diagnosis": label,
        "fragmentation": result.fragmentation,
        "failing_pp_rank": result.failing_rank,
        "verdict_before": est.verdict(),
        "needed_bytes": est.needed_bytes(est.worst),
        "capacity_bytes": est.capacity_bytes,
        "suggestions": [_suggestion_json(s, result) for s in result.suggestions],
        "not_chosen": [{"change": title, "why": why} for title, why in result.not_chosen],
        "warnings": result.warnings,
        "throughput_assumptions": [*STEP_MODEL_NOTES, *result.before_prediction.unmeasured],
    }
