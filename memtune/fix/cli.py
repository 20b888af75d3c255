"""``memtune fix CONFIG [--oom-log LOG...] [--snapshot S] [--write OUT] [--json]``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from memtune.config import load_job
from memtune.config.changes import job_data
from memtune.errors import InputError
from memtune.fix.search import FixResult, Suggestion, find_fixes
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
    p.add_argument("config", help="memtune YAML/JSON, Megatron-Bridge YAML dump, Megatron-LM launch script")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.tensor_model_parallel_size=8")
    p.add_argument(
        "--oom-log", nargs="+", default=[], metavar="LOG", help="logs of the run that ran out of memory"
    )
    p.add_argument("--snapshot", metavar="FILE.pickle", help="a memory snapshot of that run")
    p.add_argument("--write", metavar="OUT.yaml", help="write the first suggestion as a memtune YAML config")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(handler=run)


def _from_logs(args: argparse.Namespace) -> tuple[bool | None, str | None, int]:
    """diagnose's verdict on the logs: is it fragmentation, its label, and the bytes the failing
    allocation was short by ((None, None, 0) without logs)."""
    if not args.oom_log and not args.snapshot:
        return None, None, 0
    from memtune.diagnose import diagnose
    from memtune.diagnose.evidence import FRAGMENTATION

    result = diagnose(args.oom_log, snapshot=args.snapshot, config=args.config)
    label = result.verdict.label
    n = result.verdict.numbers
    short = max(0, n.requested - n.free) if n and n.requested is not None and n.free is not None else 0
    return label == FRAGMENTATION, label, short


def run(args: argparse.Namespace) -> int:
    loaded = load_job(args.config, args.overrides)
    fragmentation, label, short = _from_logs(args)
    result = find_fixes(loaded.job, fragmentation, min_saving=short)
    if args.write and result.suggestions:
        Path(args.write).write_text(
            "# written by memtune fix: "
            + result.suggestions[0].title
            + "\n"
            + yaml.safe_dump(job_data(result.suggestions[0].job), sort_keys=False)
        )
    if args.json:
        print(json.dumps(to_json(result, label), indent=2))
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
        "throughput_assumptions": [*STEP_MODEL_NOTES, *result.before_prediction.unmeasured],
    }


def render(result: FixResult, label: str | None, console: Console) -> None:
    est = result.before
    worst = est.worst
    console.print(
        f"Failing rank: pipeline rank {result.failing_rank}, peak {worst.peak_bytes / GiB:.2f} GiB, needs "
        f"{est.needed_bytes(worst) / GiB:.2f} of {est.capacity_bytes / GiB:.2f} GiB ({est.verdict()})"
        + (f"; logs: {label}" if label else "")
    )
    if not result.suggestions:
        console.print("[bold red]No single change or pair of changes makes it fit.[/bold red]")
    for i, s in enumerate(result.suggestions, 1):
        after = est.ranks[result.failing_rank].peak_bytes - s.saved_bytes
        console.print(
            f"\n[bold]{i}. {s.title}[/bold]  saves {s.saved_bytes / GiB:.2f} GiB on the failing rank "
            f"({worst.peak_bytes / GiB:.2f} → {after / GiB:.2f}), now {s.estimate.verdict()}; "
            f"predicted throughput {s.throughput_change:+.1%}"
        )
        console.print("   " + " ".join(str(c) for c in s.changes))
        for r in s.remedies:
            console.print(f"   [dim]why: {r.why}; cost: {r.cost}[/dim]")
    if result.not_chosen:
        console.print("\n[bold]Not chosen[/bold]")
        for title, why in result.not_chosen[:12]:
            console.print(f"  {title}: {why}")
        if len(result.not_chosen) > 12:
            console.print(f"  [dim]... {len(result.not_chosen) - 12} more (--json lists all)[/dim]")
    console.print(
        "[dim]throughput predicted by memtune's step model (docs/plan.md): "
        + "; ".join([*STEP_MODEL_NOTES, *result.before_prediction.unmeasured])
        + "[/dim]"
    )
