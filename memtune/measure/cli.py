"""``memtune measure CONFIG --rank R [--iters N] [--json]``."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from memtune.config import load_job
from memtune.errors import InputError
from memtune.measure.plan import DEFAULT_ITERATIONS, plan_measurement
from memtune.measure.run import DEFAULT_TIMEOUT_S, MeasurementFailed, check_interpreter, run_plan

GiB = 2**30
EXIT_FAILED = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "measure",
        help="train one rank of the job on this GPU (fake process group) and report its true peak",
        description="Build the model shard that global rank R of the job holds, wrap it as Megatron training "
        "does, run full training iterations through Megatron-Core's pipeline schedule with a fake process "
        "group, and report the allocator's peaks beside memtune's estimate. Needs a CUDA GPU and "
        "megatron-core. Sizes are GiB (2^30 bytes); steady state starts at iteration 2.",
    )
    p.add_argument("config", help="memtune YAML/JSON config (the same files `memtune estimate` reads)")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.tensor_model_parallel_size=8")
    p.add_argument(
        "--rank", type=int, required=True, metavar="R", help="global rank to measure (order tp-cp-ep-dp-pp)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=DEFAULT_ITERATIONS,
        metavar="N",
        help=f"training iterations (default {DEFAULT_ITERATIONS}, at least 2)",
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
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"stop the run after S seconds (default {DEFAULT_TIMEOUT_S})",
    )
    p.set_defaults(handler=run)


def estimated_peak(job, rank: int) -> tuple[int | None, str]:
    """memtune's estimate of the rank's allocator peak, or None and the estimator's reason."""
    from memtune.estimate import estimate

    try:
        return estimate(job).rank(rank).peak_bytes, ""
    except InputError as exc:
        return None, "; ".join(exc.problems)


def run(args: argparse.Namespace) -> int:
    loaded = load_job(args.config, args.overrides)
    plan = plan_measurement(loaded.job, args.rank, args.iters)
    check_interpreter(args.python)
    try:
        result = run_plan(plan, python=args.python, timeout_s=args.timeout, snapshot=args.snapshot)
    except MeasurementFailed as exc:
        print(f"memtune measure: {exc}", file=sys.stderr)
        return EXIT_FAILED
    estimate, why_not = estimated_peak(loaded.job, args.rank)
    if args.json:
        print(json.dumps(report_json(plan, result, estimate, why_not), indent=2))
    else:
        print_report(Console(), plan, result, estimate, why_not)
    return 0


def report_json(plan, result, estimate: int | None, why_not: str = "") -> dict:
    measured = result.measured["peak_allocated_bytes"]
    return {
        "config": plan.config,
        "rank": plan.rank,
        "pp_rank": result.pp_rank,
        "measured": result.measured,
        "environment": result.environment,
        "wall_seconds": result.wall_seconds,
        "estimate": (
            {"peak_bytes": None, "refused": why_not}
            if estimate is None
            else {"peak_bytes": estimate, "difference_bytes": estimate - measured}
        ),
    }


def print_report(console: Console, plan, result, estimate: int | None, why_not: str = "") -> None:
    m = result.measured
    env = result.environment
    table = Table(
        title=f"rank {plan.rank} of {plan.world_size} (pipeline stage {result.pp_rank}), GiB = 2^30 bytes",
        title_justify="left",
    )
    for column in (
        "iteration",
        "peak allocated",
        "fwd/bwd peak",
        "peak reserved",
        "after step",
        "alloc retries",
        "s",
    ):
        table.add_column(column, justify="right")
    for it in m["iterations"]:
        table.add_row(
            str(it["iteration"]) + ("" if it["iteration"] >= 2 else " (warm-up)"),
            f"{it['peak_allocated_bytes'] / GiB:.2f}",
            f"{it['fwd_bwd_peak_bytes'] / GiB:.2f}",
            f"{it['peak_reserved_bytes'] / GiB:.2f}",
            f"{it['allocated_after_step'] / GiB:.2f}",
            str(it["num_alloc_retries"]),
            f"{it['seconds']:.1f}",
        )
    console.print(table)
    console.print(
        f"allocated after build {m['allocated_after_build'] / GiB:.2f}, after DDP {m['allocated_after_ddp'] / GiB:.2f}, "
        f"after optimizer {m['allocated_after_optimizer'] / GiB:.2f}; state after the last step {m['state_bytes'] / GiB:.2f}"
    )
    peak = m["peak_allocated_bytes"]
    line = f"[bold]steady-state peak allocated {peak / GiB:.2f}[/bold]"
    if estimate is None:
        line += f"   no estimate: {why_not}"
    else:
        diff = estimate - peak
        line += f"   estimate {estimate / GiB:.2f}   difference {diff / GiB:+.2f} ({diff / peak:+.1%})"
    console.print(line)
    notes = [
        f"{env['gpu']}, torch {env['torch']}, megatron-core {env['megatron_core']}",
        f"attention {env['core_attention']}",
    ]
    if env.get("expert_mlp"):
        notes.append(f"experts {env['expert_mlp']}, routing forced balanced")
    console.print(f"[dim]{'; '.join(notes)}[/dim]")
