"""``memtune estimate CONFIG|--recipe NAME [overrides...]``."""

from __future__ import annotations

import argparse
import shlex

from rich.console import Console

from memtune.check import gate
from memtune.config import report_ignored
from memtune.config.arguments import add_job_arguments, load_from_args
from memtune.errors import InputError
from memtune.estimate import Estimate, EstimateOptions, estimate, render
from memtune.infile import names_a_file
from memtune.limits import MAX_MOE_IMBALANCE
from memtune.output import print_json
from memtune.perf.step import throughput_of
from memtune.perf.uncertainty import step_uncertainty
from memtune.plotfile import check_plot_path
from memtune.tables import print_text


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "estimate",
        help="peak memory of every pipeline rank, per component, with a fits / does-not-fit verdict",
        description="Estimate the peak GPU memory (PyTorch's max_memory_allocated) of every distinct rank of a "
        "Megatron-Core training job, and whether it fits. Sizes are GiB (2^30 bytes).",
    )
    add_job_arguments(
        p, "memtune YAML/JSON, Megatron-Bridge YAML dump, Megatron-LM launch script, or HF config.json"
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument(
        "--rank", type=int, metavar="R", help="only global rank R (Megatron-Core order tp-cp-ep-dp-pp)"
    )
    p.add_argument(
        "--explain", action="store_true", help="per-tensor breakdown of the most-loaded rank's activations"
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 unless every rank fits with the fragmentation margin and the margins for Transformer Engine paths not pinned down (verdict 'fits')",
    )
    p.add_argument("--plot", metavar="FILE.png", help="stacked bars per rank against the GPU capacity")
    p.add_argument(
        "--moe-imbalance",
        type=float,
        default=1.0,
        metavar="X",
        help="tokens the hottest expert rank receives relative to balanced routing (default 1.0)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not 1.0 <= args.moe_imbalance <= MAX_MOE_IMBALANCE:  # also refuses nan
        raise InputError(
            f"--moe-imbalance: must be from 1.0 (balanced routing) to {MAX_MOE_IMBALANCE:g}, got {args.moe_imbalance}"
        )
    if args.plot:
        named = (args.config, *args.overrides)
        check_plot_path(args.plot, tuple(w for w in named if w and names_a_file(w)))
    loaded = load_from_args(args, "memtune estimate CONFIG|--recipe NAME [OVERRIDE.yaml ...] [key=value ...]")
    report_ignored(loaded, args.command)
    est = estimate(gate(loaded.job), EstimateOptions(moe_routing_imbalance=args.moe_imbalance))
    rank = est.rank(args.rank) if args.rank is not None else None
    throughput = throughput_of(est.derived)
    uncertainty = step_uncertainty(est.derived)
    if args.plot:
        render.plot(est, args.plot)
    if args.json:
        print_json(render.estimate_json(est, throughput, args.rank, uncertainty, loaded.ignored))
        return _status(est, args.strict)
    console = Console()
    render.print_table(est, console, throughput, only=rank, uncertainty=uncertainty)
    if args.explain:
        render.print_explain(est, console, rank, loaded.defaults, uncertainty)
    if args.plot:
        print_text(console, f"[dim]plot written to {args.plot}[/dim]")
    if any(est.verdict(r) in ("tight", "does not fit") for r in est.ranks):
        job = " ".join(shlex.quote(w) for w in (args.config, *args.overrides) if w is not None)
        job = f"--recipe {shlex.quote(args.recipe)} {job}".rstrip() if args.recipe else job
        print_text(console, "[dim]the changes that make it fit, cheapest first:[/dim]")
        print_text(console, f"  memtune fix {job}")
    return _status(est, args.strict)


def _status(est: Estimate, strict: bool) -> int:
    """0, or with ``strict`` 1 when any rank is 'tight' or 'does not fit' (as check --strict)."""
    return int(strict and any(est.verdict(rank) != "fits" for rank in est.ranks))
