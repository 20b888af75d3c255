"""Argument checks at the boundary of memtune's Python API (``memtune.runtime``, ``memtune.peft``).

Each check raises one line naming the argument, what it got and what it allows: ArgumentTypeError
(a TypeError) for the wrong type, ArgumentError (a ValueError) for a value out of range. Without
them a string count fails deep inside as "'<' not supported", ``10**100`` as an OverflowError in
torch, NaN passes every comparison, and a rank of ``"../x"`` writes outside its directory.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from memtune.errors import ArgumentError, ArgumentTypeError
from memtune.numbers import echo, limit_text


def integer(name: str, value: object, low: int, high: int) -> int:
    """An int (not a bool) from ``low`` to ``high``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArgumentTypeError(f"{name}: must be an integer, got {echo(value)}")
    if not low <= value <= high:
        raise ArgumentError(
            f"{name}: must be from {limit_text(low)} to {limit_text(high)}, got {echo(value)}"
        )
    return value


def number(name: str, value: object, low: float, high: float, *, above_low: bool = False) -> float:
    """A finite int or float (not a bool) from ``low`` (exclusive with ``above_low``) to ``high``."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ArgumentTypeError(f"{name}: must be a number, got {echo(value)}")
    if not math.isfinite(value) or value > high or value < low or (above_low and value == low):
        start = f"above {low}" if above_low else f"from {low}"
        raise ArgumentError(f"{name}: must be a finite number {start} to {high}, got {echo(value)}")
    return float(value)


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name}: must be True or False, got {echo(value)}")
    return value


def has_methods(name: str, value: object, what: str, *methods: str) -> None:
    """``value`` offers ``methods`` (a duck-typed argument: a model, a stats source)."""
    missing = [m for m in methods if not callable(getattr(value, m, None))]
    if missing:
        shown = ", ".join(f"{m}()" for m in missing)
        raise ArgumentTypeError(f"{name}: must be {what} (no {shown}), got {echo(value)}")


def source(name: str, value: object, what: str, *methods: str) -> None:
    """A duck-typed source of numbers (the monitor's ``stats`` and ``device``): ``methods`` and the
    protocol's ``notes``, a list of texts the monitor writes into its start record."""
    has_methods(name, value, what, *methods)
    notes = getattr(value, "notes", None)
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise ArgumentTypeError(
            f"{name}: must be {what} whose notes is a list of str, got notes={echo(notes)}"
        )


def process_group(name: str, value: object) -> None:
    """None (the default group) or a ``torch.distributed.ProcessGroup``."""
    if value is None:
        return
    try:
        from torch.distributed import ProcessGroup
    except ImportError:  # without torch.distributed there is no group to pass
        ProcessGroup = ()  # type: ignore[assignment,misc]
    if not isinstance(value, ProcessGroup):
        raise ArgumentTypeError(
            f"{name}: must be None or a torch.distributed.ProcessGroup, got {echo(value)}"
        )


def path(name: str, value: object) -> Path:
    """A file system path given as ``str`` or ``os.PathLike``: not empty, no NUL byte."""
    if not isinstance(value, str | os.PathLike):
        raise ArgumentTypeError(f"{name}: must be a path (str or os.PathLike), got {echo(value)}")
    try:
        text = os.fspath(value)
    except Exception as exc:  # a PathLike whose __fspath__ fails or returns something else
        raise ArgumentTypeError(
            f"{name}: its __fspath__() failed ({exc.__class__.__name__}: {echo(str(exc))})"
        ) from None
    if not isinstance(text, str):
        raise ArgumentTypeError(f"{name}: must be a text path, got {echo(text)}")
    if not text or "\x00" in text:
        raise ArgumentError(f"{name}: must be a non-empty path without NUL bytes, got {echo(text)}")
    return Path(text)


def directory(name: str, value: object) -> Path:
    """:func:`path`, naming a directory or nothing yet (it is created), not a file."""
    where = path(name, value)
    if os.path.lexists(where) and not where.is_dir():
        raise ArgumentError(
            f"{name}: must be a directory (or a path to create one), got the file {echo(str(where))}"
        )
    return where
