"""The ``memtune`` command: one subcommand per capability.

Each capability package exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to a function taking the parsed arguments and returning an exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from memtune import __version__
from memtune.errors import InputError
from memtune.limits import MAX_PROBLEM_LINES
from memtune.numbers import cut
from memtune.output import SCHEMA_VERSION

EXIT_BAD_INPUT = 2

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]
Handler = Callable[[argparse.Namespace], int]


def _registrars() -> list[Registrar]:
    from memtune import completion
    from memtune.bench import cli as bench_cli
    from memtune.catalog import cli as catalog_cli
    from memtune.check import cli as check_cli
    from memtune.diagnose import cli as diagnose_cli
    from memtune.estimate import cli as estimate_cli
    from memtune.fix import cli as fix_cli
    from memtune.measure import cli as measure_cli
    from memtune.page import cli as page_cli
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
        page_cli.register,
        bench_cli.register,
        catalog_cli.register,
        regress_cli.register,
        runtime_cli.register,
        completion.register,
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
    parser.set_defaults(root_parser=parser)  # what `memtune completion` writes its script from
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Whatever the input and wherever the output goes, the result is the
    command's exit status and at most one line per problem on stderr, never a traceback."""
    out = _Output.install()
    try:
        status = _run(argv)
    except KeyboardInterrupt:
        status = 130
    except SystemExit as exc:  # argparse's usage errors (status 2) and --help
        raise SystemExit(out.finish(exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT)) from None
    return out.finish(status)


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    # Dotted overrides may follow options (`estimate cfg.yaml --json model.x=1`), which argparse's
    # positional handling does not allow; collect them from what it left over.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = list(args.overrides) + extra
        else:
            parser.error(f"unrecognized arguments: {cut(' '.join(extra))}")
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    handler: Handler = args.handler
    try:
        return handler(args)
    except InputError as exc:
        problems = exc.problems
    except OSError as exc:  # a file or directory that vanished, is unreadable, or has a name too long
        problems = [f"{cut(str(exc.filename or ''))}: {exc.strerror or exc.__class__.__name__}"]
    except RecursionError:
        problems = ["input nested too deeply to process"]
    except MemoryError:
        problems = ["out of memory while reading the input"]
    _report_problems(args, problems)
    return EXIT_BAD_INPUT


def _report_problems(args: argparse.Namespace, problems: list[str]) -> None:
    # A list already cut by its producer ends in its own "... and N more" line.
    shown = problems if len(problems) <= MAX_PROBLEM_LINES + 1 else problems[:MAX_PROBLEM_LINES]
    if len(problems) > len(shown):
        shown = [*shown, f"... and {len(problems) - len(shown)} more problems"]
    for line in shown:
        print(f"memtune {args.command}: {line}", file=sys.stderr)
    if getattr(args, "json", False):
        # A tool reading --json output gets a document on bad input too.
        print(json.dumps({"schema_version": SCHEMA_VERSION, "error": {"problems": shown}}))


class _Output:
    """stdout and stderr that cannot raise: a closed reader (``| head -1``) ends the output quietly
    and the command keeps its exit status; a full disk or a closed descriptor makes the command
    report it on stderr and exit 2; characters the terminal's encoding lacks are escaped."""

    def __init__(self) -> None:
        self.failed: OSError | None = None

    @classmethod
    def install(cls) -> _Output:
        out = cls()
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is None:  # started with the descriptor closed
                setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process
                continue
            with contextlib.suppress(AttributeError, ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")
        sys.stdout = _GuardedStream(sys.stdout, out)
        return out

    def finish(self, status: int) -> int:
        with contextlib.suppress(OSError):
            sys.stdout.flush()
        if self.failed is not None and self.failed.errno != errno.EPIPE:
            print(f"memtune: cannot write the output ({self.failed.strerror})", file=sys.stderr)
            return EXIT_BAD_INPUT
        return status


class _GuardedStream:
    """A text stream whose write and flush errors are recorded once, after which output is dropped."""

    def __init__(self, stream: TextIO, owner: _Output) -> None:
        self._stream, self._owner = stream, owner

    def write(self, text: str) -> int:
        if self._owner.failed is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._fail(exc)
        return len(text)

    def flush(self) -> None:
        if self._owner.failed is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self._owner.failed = exc
        # What is still buffered would fail again when the interpreter flushes at exit.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
