"""``memtune diff`` and ``memtune bisect``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console

from memtune.config.arguments import is_override
from memtune.diagnose.cli import add_category_argument, compare_snapshots
from memtune.errors import InputError
from memtune.limits import MAX_TIMEOUT_SECONDS
from memtune.options import seconds
from memtune.output import print_json
from memtune.regress import render
from memtune.tables import print_wrapped

EXIT_NO_ANSWER = 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_diff(sub)
    _register_bisect(sub)


def _register_diff(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memtune diff`` and its options."""
    d = sub.add_parser(
        "diff",
        help="what changed between two configs (per rank, per key) or two runs' memory logs",
        description="Compare two configs (any formats memtune reads): the peak of every pipeline rank before "
        "and after, and each component's change attributed to each differing key alone and to their "
        "interactions. With --logs, compare two runs' memory reports per rank and step instead. "
        "Sizes are GiB (2^30 bytes).",
    )
    d.add_argument(
        "inputs",
        nargs="*",
        metavar="A B [key=value ...]",
        help="two configs (files or recipe:NAME), then dotted overrides applied to both; with --logs "
        "two runs (log files, monitor JSONL or directories of them)",
    )
    d.add_argument("--logs", action="store_true", help="A and B are runs' logs, not configs")
    d.add_argument(
        "--snapshots",
        action="store_true",
        help="A and B are memory snapshots (or give one folder of per-rank snapshots: the highest "
        "rank against the median rank)",
    )
    add_category_argument(d)
    d.add_argument("--plot", metavar="FILE.png", help="with --snapshots: both timelines by category")
    d.add_argument(
        "--all",
        action="store_true",
        help="configs: every component of every rank, each change alone and the interactions; "
        "with --logs: also every rank and step",
    )
    d.add_argument("--json", action="store_true", help="print machine-readable JSON")
    d.set_defaults(handler=run_diff, overrides=[])


def _register_bisect(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memtune bisect`` and its options."""
    b = sub.add_parser(
        "bisect",
        help="find the commit or the config change that made a job run out of memory",
        description="With --good/--bad: bisect the git history, running the command at each commit in a "
        "temporary worktree and judging it with `memtune diagnose` (the command exits 0: good; it fails with an out-of-memory of --kind: bad; "
        "any other failure: skipped) and print the first bad commit with its diagnosis; your work tree and "
        "branch are not touched. Both ends are run first: --bad must fail with that out-of-memory and "
        "--good must pass. "
        "With --configs A B: walk from config A to config B one key at a time and name the first change "
        "after which the most-loaded rank no longer fits. Exit 0: found; 1: no culprit (A does not fit, "
        "B fits, or only skipped commits were left); 2: bad input, an end that is not what it is said to be, "
        "or memtune's limit on the commands one bisect runs; 128+N: stopped by signal N.",
    )
    b.add_argument("--good", metavar="REV", help="a revision where the command works")
    b.add_argument("--bad", metavar="REV", help="a revision where it runs out of memory")
    b.add_argument("--repo", default=".", metavar="DIR", help="the git work tree (default: here)")
    b.add_argument(
        "--kind",
        choices=("fragmentation", "capacity", "any"),
        default="any",
        help="which out-of-memory counts as bad (any: also outside PyTorch and host memory)",
    )
    b.add_argument(
        "--timeout",
        metavar="SECONDS",
        help="with --good/--bad: stop the command after this long at a commit (SIGTERM, then SIGKILL); "
        "it then counts as failed",
    )
    b.add_argument(
        "--configs",
        nargs=2,
        metavar=("A", "B"),
        help="walk from config A to config B (each a file or recipe:NAME; key=value words after them "
        "apply to both)",
    )
    b.add_argument(
        "--measure", action="store_true", help="with --configs: measure each step on this GPU (needs --rank)"
    )
    b.add_argument(
        "--rank", type=int, metavar="R", help="global rank to watch (default: the most-loaded pipeline rank)"
    )
    b.add_argument(
        "--python", default=sys.executable, metavar="PATH", help="with --measure: interpreter with torch"
    )
    b.add_argument("--json", action="store_true", help="print machine-readable JSON")
    b.add_argument("to_run", nargs="*", metavar="COMMAND", help="after --: the command to run at each commit")
    b.set_defaults(handler=run_bisect, overrides=[])  # dotted overrides after options (memtune/cli.py)


def _emit(args: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    if args.json:
        print_json(data)
    else:
        console = Console(highlight=False)
        for line in lines:
            print_wrapped(console, line)


def run_diff(args: argparse.Namespace) -> int:
    overrides = [*args.overrides, *(i for i in args.inputs if is_override(i))]
    paths = [i for i in args.inputs if not is_override(i)]
    if args.snapshots:
        if overrides or args.logs or len(paths) not in (1, 2):
            raise InputError("--snapshots compares two snapshots A B, or the snapshots of one folder")
        if args.all:
            raise InputError("--all goes with --logs (it lists every rank and step of two runs)")
        return compare_snapshots(paths, args.category, args.plot, args.json)
    if args.category or args.plot:
        raise InputError("--category and --plot go with --snapshots")
    if len(paths) != 2:
        what = "runs" if args.logs else "configs"
        raise InputError(f"expected two {what} A B, got {len(paths)}: {' '.join(paths) or 'none'}")
    if args.logs:
        if overrides:
            raise InputError(f"--logs compares runs; overrides apply to configs only: {' '.join(overrides)}")
        from memtune.regress.logs import diff_runs

        logs = diff_runs(*paths)
        _emit(args, render.logs_json(logs), render.logs_lines(logs, every_step=args.all))
        return 0
    from memtune.config import report_ignored
    from memtune.regress.attribution import diff_configs
    from memtune.regress.jobs import load_pair

    pair = load_pair(paths[0], paths[1], overrides)
    for loaded in pair:
        report_ignored(loaded, args.command)
    diff = diff_configs(*pair)
    ignored = {"a": pair[0].ignored, "b": pair[1].ignored}
    _emit(
        args,
        {**render.diff_json(diff), "ignored_keys": ignored},
        render.diff_lines(diff, everything=args.all),
    )
    return 0


def run_bisect(args: argparse.Namespace) -> int:
    if args.configs:
        args.to_run = [*args.to_run, *args.overrides]
        if args.good or args.bad or args.timeout is not None or not all(is_override(w) for w in args.to_run):
            raise InputError(
                "--configs walks between two configs; it takes dotted overrides for both, "
                "no --good/--bad, --timeout or command"
            )
        return _bisect_configs(args)
    if args.measure:
        raise InputError("--measure goes with --configs A B")
    if not (args.good and args.bad):
        raise InputError("give --good REV and --bad REV (and the command after --), or --configs A B")
    if not args.to_run:
        raise InputError("give the command to run at each commit after --, e.g. -- python train.py")
    from memtune.regress.gitbisect import bisect
    from memtune.runtime.launch import Interrupted

    timeout = None if args.timeout is None else _seconds(args.timeout)
    try:
        result = bisect(args.repo, args.good, args.bad, args.to_run, args.kind, timeout)
    except Interrupted as stop:
        print(f"memtune bisect: stopped by {stop}; the repository is as it was", file=sys.stderr)
        return 128 + stop.signum
    _emit(args, render.bisect_json(result, args.kind), render.bisect_lines(result, args.kind))
    return 0 if result.first_bad else EXIT_NO_ANSWER


def _seconds(text: str) -> float:
    return seconds("--timeout", text, MAX_TIMEOUT_SECONDS)


def _bisect_configs(args: argparse.Namespace) -> int:
    from memtune.regress.jobs import load_pair
    from memtune.regress.walk import estimator, measurer, walk

    a, b = load_pair(args.configs[0], args.configs[1], args.to_run)
    if args.measure:
        if args.rank is None:
            raise InputError("--measure needs --rank R: the global rank to measure at each step")
        evaluate = measurer(args.rank, args.python)
    else:
        evaluate = estimator(args.rank)
    result = walk(a, b, args.rank, evaluate)
    result.measured = args.measure
    _emit(args, render.walk_json(result, a.source, b.source), render.walk_lines(result, a.source, b.source))
    return 0 if result.culprits else EXIT_NO_ANSWER
