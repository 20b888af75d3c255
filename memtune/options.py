"""Checks of commands' own numeric options, where argparse lets too much through.

argparse's ``type=int`` takes 0 and 10^20, and ``type=float`` takes ``nan``, ``inf`` and ``1e999``;
a count of 0 would read as "not given" and silently take the default, a huge worker count forks
until the kernel's out-of-memory killer fires. Each check is one line naming the option, what it
got and what it allows (docs/limits.md, "Commands' own arguments").
"""

from __future__ import annotations

from memtune.errors import InputError
from memtune.numbers import echo, float_or_none, limit_text


def at_least(option: str, value: int | None, low: int = 1) -> None:
    """``value`` (None: not given) is at least ``low``."""
    if value is not None and value < low:
        raise InputError(f"{option}: must be at least {low}, got {value}")


def within(option: str, value: int | None, low: int, high: int) -> None:
    """``value`` (None: not given) is from ``low`` to ``high``."""
    if value is not None and not low <= value <= high:
        raise InputError(f"{option}: must be from {low} to {limit_text(high)}, got {echo(value)}")


def seconds(option: str, text: str, high: float) -> float:
    """A duration typed by the user: a finite number of seconds above 0 and at most ``high``."""
    value = float_or_none(text)
    if value is None or not 0 < value <= high:
        raise InputError(
            f"{option} {echo(text)}: must be a number of seconds, more than 0 and at most {high:g}"
        )
    return value
