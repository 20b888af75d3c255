"""``memtune plan --write N OUT``: layout N written as a change of the user's input, in its
own format (memtune/config/writers.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memtune.config import LoadedJob
from memtune.config.arguments import is_override, load_written
from memtune.config.writers import write_job
from memtune.errors import InputError
from memtune.numbers import int_or_none
from memtune.outfile import check_output_path
from memtune.plan.search import PlanResult


def write_layout(args: argparse.Namespace, result: PlanResult) -> None:
    """``plan --write N OUT``: layout N as a change of the input (a config, a recipe or a preset)."""
    number, out = args.write
    n = int_or_none(number)
    if n is None or not 1 <= n <= len(result.layouts):
        raise InputError(f"--write {number}: must be a layout shown, from 1 to {len(result.layouts)}")
    inputs = tuple(w for w in (args.config, *args.overrides) if w and not is_override(w))
    target = check_output_path("--write", out, force=args.force, inputs=inputs)
    written = args.recipe is not None or (args.config is not None and Path(args.config).exists())
    usage = "memtune plan CONFIG|--recipe NAME ... --write N OUT"
    loaded = (
        load_written(args, usage) if written else LoadedJob(result.base, f"preset {args.config}", "memtune")
    )
    chosen = write_job(
        target,
        loaded,
        result.layouts[n - 1].checked.job,
        args.format,
        f"memtune plan: layout {n}",
        replace=args.force,
    )
    print(f"layout {n} written to {out} ({chosen})", file=sys.stderr)
