"""The ``memtune`` command: one subcommand per capability.

Each capability package exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to a function taking the parsed arguments and returning an exit status.
"""

from __future__ import annotations

import argparse
import sys

from memtune import __version__
from memtune.errors import InputError

EXIT_BAD_INPUT = 2


def _registrars():
    from memtune.catalog import cli as catalog_cli
    from memtune.estimate import cli as estimate_cli

    return [estimate_cli.register, catalog_cli.register]


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
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return args.handler(args)
    except InputError as exc:
        for line in exc.problems:
            print(f"memtune {args.command}: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
