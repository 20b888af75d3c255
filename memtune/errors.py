"""The one exception type for bad user input.

The CLI prints each problem on its own line and exits with status 2; nothing else in memtune
catches it, so library users get the same messages.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad user input: a config, a file, an option. Each problem is one self-contained line."""

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class MissingDependencyError(InputError):
    """A feature needs a package (torch, megatron-core) or a GPU that this machine lacks."""


class ArgumentError(InputError, ValueError):
    """A bad argument value to memtune's Python API (``memtune.runtime``, ``memtune.peft``): a
    ValueError to a library caller, bad input (exit 2) to a command that passes it on."""


class ArgumentTypeError(InputError, TypeError):
    """An argument of the wrong type to memtune's Python API; a TypeError to a library caller."""
