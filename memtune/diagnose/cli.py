"""``memtune diagnose LOG... | DIR | - [--snapshot FILE] [--plot PNG] [--config CONFIG] [--json]``."""

from __future__ import annotations

import argparse
import json
import sys

from memtune.config import report_ignored
from memtune.config.arguments import add_recipe_argument, is_override, load_from_words
from memtune.errors import InputError
from memtune.plotfile import check_plot_path

EXIT_DIAGNOSED = 0
EXIT_NOTHING_FOUND = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "diagnose",
        help="explain an out-of-memory failure from logs and a memory snapshot",
        description="Read logs of a failed run (files, directories, '-' for stdin) and optionally a "
        "torch.cuda.memory._dump_snapshot() pickle; classify the failure (fragmentation, capacity, "
        "outside_pytorch, host_oom, configuration, not_oom) and list fixes, cheapest first. "
        "Exit 0: diagnosed; 1: no failure found; 2: unreadable input.",
    )
    p.add_argument("logs", nargs="*", metavar="LOG", help="log files, directories of logs, or - for stdin")
    p.add_argument(
        "--snapshot", metavar="FILE.pickle", help="memory snapshot (read without executing anything)"
    )
    p.add_argument(
        "--plot", metavar="FILE.png", help="plot memory over the snapshot's trace (needs --snapshot)"
    )
    p.add_argument(
        "--config",
        metavar="CONFIG",
        help="the job config: fixes respect it and quote its keys; dotted overrides "
        "(model.tensor_model_parallel_size=8) among the positional words apply to it",
    )
    add_recipe_argument(p)
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.set_defaults(handler=run)


def _split_overrides(words: list[str]) -> tuple[list[str], list[str]]:
    """Logs and the dotted overrides of --config among the positional words (as estimate takes
    them); a word naming an existing file stays a log."""
    overrides = [w for w in words if is_override(w)]
    return [w for w in words if w not in overrides], overrides


def run(args: argparse.Namespace) -> int:
    from memtune.diagnose import diagnose
    from memtune.diagnose.report import render, to_json

    if not args.logs and not args.snapshot:
        raise InputError("give at least one log (file, directory or -) or --snapshot FILE.pickle")
    if args.plot and not args.snapshot:
        raise InputError("--plot needs --snapshot FILE.pickle")
    if args.plot:
        check_plot_path(args.plot)
    has_job = bool(args.config or args.recipe)
    logs, overrides = _split_overrides(args.logs) if has_job else (args.logs, [])
    words = [args.config, *overrides] if args.config else overrides
    loaded = (
        load_from_words(words, args.recipe, "memtune diagnose LOG... --config C|--recipe NAME")
        if has_job
        else None
    )
    if loaded is not None:
        report_ignored(loaded, args.command)
    result = diagnose(logs, snapshot=args.snapshot, config=loaded, plot_to=args.plot)
    if args.json:
        json.dump(to_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from rich.console import Console

        render(result, Console())
    return EXIT_DIAGNOSED if result.verdict.label is not None else EXIT_NOTHING_FOUND
