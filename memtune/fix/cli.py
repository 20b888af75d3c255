"""``memtune fix CONFIG|--recipe NAME [key=value ...] [--oom-log LOG...] [--snapshot S] [--write OUT]
[--json]``."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from memtune.config import report_ignored
from memtune.config.arguments import add_job_arguments, is_override, load_from_args, load_written
from memtune.config.writers import WRITE_FORMATS, WRITE_HELP, write_job
from memtune.diagnose.advice import fixes_for_failure
from memtune.errors import InputError
from memtune.fix.render import render
from memtune.fix.search import FixResult, Tried, judged_peak
from memtune.limits import MAX_GPU_MEMORY_GIB
from memtune.numbers import echo, float_or_none
from memtune.outfile import check_output_path
from memtune.output import print_json
from memtune.perf.step import STEP_MODEL_NOTES
from memtune.units import GiB


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
        help="write the first suggestion in the input's own format (never over the input config)",
    )
    p.add_argument("--format", choices=WRITE_FORMATS, help=WRITE_HELP)
    p.add_argument("--force", action="store_true", help="with --write: replace OUT.yaml if it exists")
    p.add_argument(
        "--headroom",
        metavar="GIB",
        help="ask for changes that leave this much device memory free beyond the verdict's margins "
        "(a job that fits is otherwise told so, with no change)",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    loaded = load_from_args(args, "memtune fix CONFIG|--recipe NAME [OVERRIDE.yaml ...] [key=value ...]")
    report_ignored(loaded, args.command)
    if (args.force or args.format) and not args.write:
        raise InputError(f"{'--force' if args.force else '--format'} goes with --write OUT.yaml")
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
    headroom = _gib(args.headroom) if args.headroom is not None else 0
    result = fixes_for_failure(loaded.job, verdict, headroom=headroom)
    proposed = result.proposed
    if target is not None and proposed is not None and proposed.job is not None:
        written = load_written(args, "memtune fix CONFIG|--recipe NAME ... --write OUT")
        write_job(
            target, written, proposed.job, args.format, f"memtune fix: {proposed.title}", replace=args.force
        )
    status = 0 if result.fits_already or _fits_in_the_end(result) else 1
    if args.json:
        print_json({**to_json(result, label), "ignored_keys": loaded.ignored})
        return status
    render(result, label, Console())
    if args.write:
        if proposed is None:
            raise InputError(f"--write {args.write}: no suggestion that makes the job fit to write")
        Console().print(f"[dim]written to {args.write}[/dim]")
    return status


def _gib(text: str) -> int:
    value = float_or_none(text)
    if value is None or not 0 <= value <= MAX_GPU_MEMORY_GIB:
        raise InputError(f"--headroom: a number of GiB between 0 and {MAX_GPU_MEMORY_GIB}, got {echo(text)}")
    return round(value * GiB)


def _fits_in_the_end(result: FixResult) -> bool:
    return result.proposed is not None


def _tried_json(s: Tried, result: FixResult) -> dict[str, Any]:
    peak = judged_peak(result.before, result.failing_rank)
    est = s.estimate
    return {
        "title": s.title,
        "families": list(s.families),
        "overrides": [str(c) for c in s.changes],
        "status": s.status,
        "reason": s.reason or None,
        "why": [r.why for r in s.remedies],
        "cost": [r.cost for r in s.remedies],
        "side_effects": list(s.side_effects),
        "peak_before_bytes": peak,
        "peak_after_bytes": None if s.saved_bytes is None else peak - s.saved_bytes,
        "saved_bytes": s.saved_bytes,
        "verdict_after": est.verdict() if est is not None else None,
        "throughput_change": s.throughput_change,
        "unpriced": s.unpriced,
        "tokens_per_s_per_gpu": s.prediction.tokens_per_s_per_gpu if s.prediction else None,
    }


def to_json(result: FixResult, label: str | None) -> dict[str, Any]:
    est = result.before
    rank = est.ranks[result.failing_rank]
    unmeasured = result.before_prediction.unmeasured if result.before_prediction else ()
    return {
        "schema_version": 1,
        "diagnosis": label,
        "fragmentation": result.fragmentation,
        "failing_pp_rank": result.failing_rank,
        "phase": result.phase,
        "verdict_before": est.verdict(),
        "needed_bytes": est.needed_bytes(rank),
        "capacity_bytes": est.capacity_bytes,
        "headroom_bytes": result.headroom_bytes,
        "fits_already": result.fits_already,
        "lead": _tried_json(result.lead, result) if result.lead else None,
        "suggestions": [_tried_json(s, result) for s in result.suggestions],
        "not_chosen": [_tried_json(s, result) for s in result.not_chosen],
        "not_tried": [{"change": title, "why": why} for title, why in result.notes],
        "warnings": result.warnings,
        "throughput_assumptions": [*STEP_MODEL_NOTES, *unmeasured],
    }
