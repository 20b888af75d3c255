"""The ``memtune`` command: one subcommand per capability.

Each capability package exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to a function taking the parsed arguments and returning an exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from memtune import __version__
from memtune.errors import InputError
from memtune.output import SCHEMA_VERSION

EXIT_BAD_INPUT = 2

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]
Handler = Callable[[argparse.Namespace], int]


def _registrars() -> list[Registrar]:
    from memtune.bench import cli as bench_cli
    from memtune.catalog import cli as catalog_cli
    from memtune.check import cli as check_cli
    from memtune.diagnose import cli as diagnose_cli
    from memtune.estimate import cli as estimate_cli
    from memtune.fix import cli as fix_cli
    from memtune.measure import cli as measure_cli
    from memtune.plan import cli as plan_cli
    from memtune.regress import cli as regress_cli
    from memtune.runtime import cli as runtime_cli

    return [
        estimate_cli.register,
        check_cli.register,
        measure_cli.register,
        diagnose_cli.register,
        plan_cli.register,
        fix_cli.register,
        bench_cli.register,
        catalog_cli.register,
        regress_cli.register,
        runtime_cli.register,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memtune",
        description="Plan, check, measure and repair GPU memory use in Megatron-style LLM training.",
    )
    parser.add_argument("--version", action="version", version=f"memtune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Dotted overrides may follow options (`estimate cfg.yaml --json model.x=1`), which argparse's
    # positional handling does not allow; collect them from what it left over.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = list(args.overrides) + extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    handler: Handler = args.handler
    try:
        return handler(args)
    except InputError as exc:
        for line in exc.problems:
            print(f"memtune {args.command}: {line}", file=sys.stderr)
        if getattr(args, "json", False):
            # A tool reading --json output gets a document on bad input too.
            print(json.dumps({"schema_version": SCHEMA_VERSION, "error": {"problems": exc.problems}}))
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
