"""JSON Lines that memtune reads back (monitor records, measured runs, runs' logs), with the
guards of docs/limits.md: bounded lines, bounded numbers, and one line naming file:line on error.

Numbers are parsed with limits rather than checked afterwards: an integer of more than
``MAX_DIGITS`` digits is refused before Python converts it (5,000 digits would otherwise cost a
conversion or raise a ValueError of its own), and ``NaN``, ``Infinity`` and floats that overflow
to infinity (``1e400``) are refused, as no record memtune writes holds one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.errors import InputError
from memtune.limits import MAX_DIGITS, MAX_JSONL_LINE_BYTES, MAX_JSONL_RECORDS
from memtune.numbers import echo, limit_text


class RefusedJson(ValueError):
    """A JSON text memtune does not read: a number out of bounds, or nesting too deep for the
    parser (what is wrong is the message)."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise RefusedJson(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise RefusedJson(f"{text[:20]} is out of range for a number")
    return value


def _constant(text: str) -> float:
    raise RefusedJson(f"{text} is not a number memtune reads")


def loads(text: str) -> Any:
    """``json.loads`` with bounded numbers; RefusedJson names a refused number or deep nesting."""
    try:
        return json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise RefusedJson("lists and objects nested too deeply to read") from None


@dataclass(frozen=True)
class Between:
    """A finite number (int or float) from ``low`` to ``high``: a measured rate or time, whose
    bounds keep every quotient of two of them finite (a denormal divides to infinity)."""

    low: float
    high: float


# An integer range, a Between, or "number" (finite, at least 0), "mapping", "string", "name"
# (1 to MAX_NAME_CHARS printable characters), "words" (a list of strings) or "list".
Holds = tuple[int, int] | Between | str
MAX_NAME_CHARS = 200  # a run id, a label, a split, a GPU or model name read from a record


def check_field(where: str, record: dict[str, Any], name: str, holds: Holds, nullable: bool = False) -> None:
    """Refuse, in one line naming ``where`` and the field, a value of ``record[name]`` outside
    ``holds`` (null only where ``nullable``)."""
    value = record.get(name)
    if (value is None and nullable) or _holds(holds, value):
        return
    got = echo(value) if name in record else "nothing"
    null = " or null" if nullable else ""
    raise InputError(f"{where}: {name} must be {_describe(holds)}{null}, got {got}")


def _holds(holds: Holds, value: object) -> bool:
    if isinstance(holds, tuple):
        return isinstance(value, int) and not isinstance(value, bool) and holds[0] <= value <= holds[1]
    if isinstance(holds, Between):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and holds.low <= value <= holds.high  # type: ignore[operator]
    if holds == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf
    if holds == "name":
        return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS and value.isprintable()
    if holds == "words":
        return isinstance(value, list) and all(isinstance(word, str) for word in value)
    if holds == "list":
        return isinstance(value, list)
    return isinstance(value, dict if holds == "mapping" else str)


def _describe(holds: Holds) -> str:
    if isinstance(holds, tuple):
        return f"an integer from {limit_text(holds[0])} to {limit_text(holds[1])}"
    if isinstance(holds, Between):
        return f"a number from {holds.low:g} to {holds.high:g}"
    return {
        "number": "a finite number of at least 0",
        "mapping": "a mapping",
        "string": "a string",
        "name": f"a text of 1 to {MAX_NAME_CHARS} printable characters",
        "words": "a list of strings",
        "list": "a list",
    }[holds]


def read_jsonl(file: Path, *, torn_last_line: bool = False) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of ``file``.

    With ``torn_last_line`` an invalid last line is skipped: a process killed mid-write leaves
    one. A line over MAX_JSONL_LINE_BYTES, more than MAX_JSONL_RECORDS lines, invalid JSON and a
    refused number are each one InputError naming ``file:line``."""
    try:
        if not file.is_file():  # a pipe or a device would block or never end
            raise InputError(f"{file}: not a regular file")
        with open(file, "rb") as fh:
            number = 0
            pending: tuple[int, str] | None = None  # an invalid line, an error unless it is the last
            while raw := fh.readline(MAX_JSONL_LINE_BYTES + 1):
                number += 1
                if pending is not None:
                    raise InputError(f"{file}:{pending[0]}: {pending[1]}")
                if len(raw) > MAX_JSONL_LINE_BYTES:
                    raise InputError(f"{file}:{number}: line longer than {MAX_JSONL_LINE_BYTES >> 20} MiB")
                if number > MAX_JSONL_RECORDS:
                    raise InputError(f"{file}: more than {MAX_JSONL_RECORDS:,} lines")
                text = raw.decode("utf-8", "replace").strip()
                if not text:
                    continue
                try:
                    value = loads(text)
                except RefusedJson as exc:
                    raise InputError(f"{file}:{number}: {exc}") from None
                except json.JSONDecodeError as exc:
                    problem = f"invalid JSON ({exc.msg})"
                    if not torn_last_line:
                        raise InputError(f"{file}:{number}: {problem}") from None
                    pending = (number, problem)
                    continue
                yield number, value
    except OSError as exc:
        raise InputError(f"{file}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
