"""``memtune diagnose LOG... | DIR | - [--snapshot FILE [--snapshot FILE]] [--plot PNG] [--config CONFIG] [--json]``."""

from __future__ import annotations

import argparse

from memtune.config import report_ignored
from memtune.config.arguments import add_recipe_argument, is_override, load_from_words
from memtune.errors import InputError
from memtune.infile import names_a_file
from memtune.output import print_json
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
        "--snapshot",
        action="append",
        default=[],
        metavar="FILE.pickle",
        help="memory snapshot (read without executing anything); twice: A (reference) and B (the "
        "failed run) side by side, the growth by site, category and phase",
    )
    p.add_argument(
        "--plot", metavar="FILE.png", help="plot memory over the snapshot's trace (needs --snapshot)"
    )
    add_category_argument(p)
    p.add_argument(
        "--config",
        metavar="CONFIG",
        help="the job config: fixes respect it and quote its keys; dotted overrides "
        "(model.tensor_model_parallel_size=8) among the positional words apply to it",
    )
    add_recipe_argument(p)
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.set_defaults(handler=run, overrides=[])  # dotted overrides after options (memtune/cli.py)


def _split_overrides(words: list[str]) -> tuple[list[str], list[str]]:
    """Logs and the dotted overrides of --config among the positional words (as estimate takes
    them); a word naming an existing file stays a log."""
    overrides = [w for w in words if is_override(w)]
    return [w for w in words if w not in overrides], overrides


def run(args: argparse.Namespace) -> int:
    from memtune.diagnose import diagnose
    from memtune.diagnose.advice import ranked_fixes
    from memtune.diagnose.report import render, to_json
    from memtune.fix.cli import to_json as fix_json
    from memtune.fix.render import print_suggestions

    if len(args.snapshot) > 2:
        raise InputError(f"--snapshot given {len(args.snapshot)} times; give one, or two to compare")
    if not args.logs and not args.snapshot:
        raise InputError("give at least one log (file, directory or -) or --snapshot FILE.pickle")
    if len(args.snapshot) == 2 and not args.logs:
        return compare_snapshots(args.snapshot, args.category, args.plot, args.json)
    if args.category and len(args.snapshot) != 2:
        raise InputError("--category goes with two snapshots (--snapshot A --snapshot B)")
    if args.plot and not args.snapshot:
        raise InputError("--plot needs --snapshot FILE.pickle")
    if args.plot:
        named = (*args.logs, *args.overrides, *args.snapshot, args.config)
        check_plot_path(args.plot, tuple(w for w in named if w and names_a_file(w)))
    has_job = bool(args.config or args.recipe)
    words = [*args.logs, *args.overrides]
    logs, overrides = _split_overrides(words) if has_job else (words, [])
    words = [args.config, *overrides] if args.config else overrides
    loaded = (
        load_from_words(words, args.recipe, "memtune diagnose LOG... --config C|--recipe NAME")
        if has_job
        else None
    )
    if loaded is not None:
        report_ignored(loaded, args.command)
    ignored = loaded.ignored if loaded is not None else []  # the job's keys diagnose did not use
    if len(args.snapshot) == 2:  # the logs with the failed run's snapshot, then the comparison
        result = diagnose(logs, snapshot=args.snapshot[1], config=loaded)
        if args.json:
            from memtune.diagnose.compare import Category, compare_files
            from memtune.diagnose.compare_render import comparison_json

            c = compare_files(args.snapshot[0], args.snapshot[1], [Category.parse(t) for t in args.category])
            print_json({**to_json(result), "comparison": comparison_json(c), "ignored_keys": ignored})
        else:
            from rich.console import Console

            render(result, Console())
            print()
            compare_snapshots(args.snapshot, args.category, args.plot, False)
        return EXIT_DIAGNOSED if result.verdict.label is not None else EXIT_NOTHING_FOUND
    result = diagnose(
        logs, snapshot=args.snapshot[0] if args.snapshot else None, config=loaded, plot_to=args.plot
    )
    ranked = ranked_fixes(loaded, result.verdict)
    if args.json:
        ranked_json = fix_json(ranked, result.verdict.label) if ranked else None
        print_json({**to_json(result), "ranked_fixes": ranked_json, "ignored_keys": ignored})
    else:
        from rich.console import Console

        console = Console()
        render(result, console, advice=ranked is None)
        if ranked:  # the list memtune fix --oom-log prints for this failure
            print_suggestions(ranked, console)
    return EXIT_DIAGNOSED if result.verdict.label is not None else EXIT_NOTHING_FOUND


def add_category_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--category",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="with two snapshots: a category of your own, for blocks with a stack frame matching REGEX "
        "(tried before the built-in ones; repeatable)",
    )


def compare_snapshots(paths: list[str], categories: list[str], plot_to: str | None, as_json: bool) -> int:
    """Two snapshots, or one folder of per-rank snapshots, side by side (``diagnose`` and ``diff``)."""
    from memtune.diagnose import compare as cmp
    from memtune.diagnose import compare_render as out

    if plot_to:
        check_plot_path(plot_to, tuple(paths))
    user = [cmp.Category.parse(text) for text in categories]
    if len(paths) == 1:
        ranks = cmp.compare_ranks(paths[0], user)
        data, lines = out.ranks_json(ranks), out.ranks_lines(ranks)
        comparison = ranks.comparison
    else:
        comparison = cmp.compare_files(paths[0], paths[1], user)
        data, lines = out.comparison_json(comparison), out.comparison_lines(comparison)
    if plot_to:
        cmp.plot(comparison, plot_to)
    if as_json:
        print_json(data)
    else:
        print("\n".join(lines))
    return 0
