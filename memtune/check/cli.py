"""``memtune check CONFIG [overrides...]``, ``memtune check --explain CODE``, ``memtune check --list``."""

from __future__ import annotations

import argparse
import difflib

from rich.console import Console

from memtune.catalog.gpus import capacity_bytes
from memtune.check import INFO
from memtune.check.registry import Rule, catalogue, find_rule
from memtune.check.report import (
    catalogue_json,
    exit_status,
    findings_json,
    render_explain,
    render_list,
    render_report,
)
from memtune.config import report_ignored
from memtune.config.arguments import add_job_arguments, load_from_args
from memtune.errors import InputError
from memtune.estimate import check_with_estimate
from memtune.limits import MAX_ECHO
from memtune.numbers import echo
from memtune.output import SCHEMA_VERSION, print_json


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "check",
        help="find configuration problems before launch",
        description=(
            "Check a training config for settings that would fail at start-up (errors), memory settings "
            "that silently do nothing or hurt (warnings), and things worth knowing (info). "
            "Exit status: 0 clean, 1 errors found (or warnings with --strict), 2 bad input."
        ),
    )
    add_job_arguments(parser, "training config (any format `memtune estimate` reads)")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    parser.add_argument(
        "--select",
        metavar="CODES",
        help=(
            "report warnings and infos of these rules only: comma-separated codes, prefixes (ENV, PAR00) "
            "or names; errors Megatron raises are always reported"
        ),
    )
    parser.add_argument(
        "--ignore",
        metavar="CODES",
        help="do not report these rules' warnings and infos (same forms as --select); errors still fail",
    )
    parser.add_argument(
        "--show-info", action="store_true", help="also show informational findings (hidden by default)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--explain", metavar="CODE", help="print a rule's documentation, e.g. --explain OFF001")
    mode.add_argument("--list", action="store_true", help="print the rule catalogue")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    console = Console()
    if args.list:
        if args.json:
            print_json({"schema_version": SCHEMA_VERSION, "rules": catalogue_json()})
        else:
            render_list(console)
        return 0
    if args.explain:
        render_explain(console, _rule_or_error(args.explain))
        return 0
    loaded = load_from_args(
        args, "memtune check CONFIG|--recipe NAME [key=value ...] (or --list / --explain CODE)"
    )
    report_ignored(loaded, args.command)
    capacity_bytes(
        loaded.job.cluster.gpu, loaded.job.cluster.gpu_memory_gib
    )  # an unknown cluster.gpu is refused as estimate refuses it
    findings = check_with_estimate(loaded.job, _codes(args.select), _codes(args.ignore) or ())
    shown = [f for f in findings if args.show_info or f.severity != INFO]
    hidden = len(findings) - len(shown)
    if args.json:
        print_json(findings_json(loaded.source, shown, loaded.ignored, hidden))
    else:
        render_report(console, loaded.source, shown, loaded.ignored, hidden)
    return exit_status(findings, args.strict)


def _codes(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None


def _rule_or_error(code_or_name: str) -> Rule:
    rule = find_rule(code_or_name)
    if rule is not None:
        return rule
    known = [r.code for r in catalogue()] + [r.name for r in catalogue()]
    close = (
        difflib.get_close_matches(code_or_name.upper(), known, n=1)
        or difflib.get_close_matches(code_or_name, known, n=1)
        if len(code_or_name) <= MAX_ECHO  # no rule's name is longer: nothing to misspell
        else []
    )
    hint = f"did you mean {close[0]}?" if close else "memtune check --list shows them all"
    raise InputError(f"--explain: no rule {echo(code_or_name)}; {hint}")
