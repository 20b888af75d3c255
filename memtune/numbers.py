"""Numbers from untrusted text: configs, flags, shell scripts, logs, versions, snapshots.

Python's own ``int()`` accepts Unicode digits, underscores and up to 4,300 digits, and
``float()`` accepts ``inf`` and ``nan``; none of that is a size in a training job. These
functions accept plain ASCII numbers of bounded length and say what is wrong otherwise.
"""

from __future__ import annotations

import math
import re

from memtune.limits import MAX_DIGITS, MAX_ECHO

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def echo(value: object, limit: int = MAX_ECHO) -> str:
    """``repr(value)`` cut to ``limit`` characters, for quoting a user's value in an error line."""
    text = _bounded_repr(value, limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cut(text: str, limit: int = MAX_ECHO) -> str:
    """``text`` cut to ``limit`` characters, for naming a user's word in an error line."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bounded_repr(value: object, limit: int) -> str:
    if isinstance(value, str):
        return repr(value[: limit + 1])
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * MAX_DIGITS:
        return f"an integer of about {digits(value)} digits"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"a {type(value).__name__} of {len(value)} entries" if len(value) > 8 else _short(value, limit)
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value[: limit + 1]))
    return _short(value, limit)


def _short(value: object, limit: int) -> str:
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"a {type(value).__name__}"
    return text


def digits(value: int) -> int:
    """Decimal digits of ``value`` without converting it (str() refuses beyond 4,300 digits);
    exact for powers of two and within one otherwise."""
    return int((abs(value).bit_length() - 1) * math.log10(2)) + 1 if value else 1


def limit_text(n: int) -> str:
    """A limit as people write it in a message: ``2^62`` rather than 4611686018427387904."""
    size = abs(n)
    if size >= 1 << 20 and size & (size - 1) == 0:
        return ("-" if n < 0 else "") + f"2^{size.bit_length() - 1}"
    return str(n)


def int_or_none(text: str) -> int | None:
    """An ASCII integer of at most MAX_DIGITS digits, else None (for text that may not be a number)."""
    text = text.strip()
    if len(text.lstrip("+-")) > MAX_DIGITS or not _INT.fullmatch(text):
        return None
    return int(text)


def float_or_none(text: str) -> float | None:
    """A finite ASCII decimal number (no inf, nan, or more than MAX_DIGITS digits), else None."""
    text = text.strip()
    if len(text) > 2 * MAX_DIGITS or not _FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def plain_int(value: object) -> int | None:
    """An int (not a bool) of bounded size from an already-parsed document, else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value.bit_length() <= 3.33 * MAX_DIGITS else None
