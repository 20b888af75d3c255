"""Conventions every command's machine-readable output shares."""

from __future__ import annotations

import json
import math

from memtune.errors import InputError

# Every ``--json`` document carries this at its top level; it changes only when a field is
# removed or changes meaning (adding fields keeps it).
SCHEMA_VERSION = 1


def json_text(data: object) -> str:
    """``data`` as the JSON document a ``--json`` option prints. JSON has no NaN or infinity
    (Python would print ``NaN``/``Infinity``, which JSON readers refuse): a result holding one is
    refused by name, one line, rather than printed as something that is not JSON."""
    try:
        return json.dumps(data, indent=2, allow_nan=False)
    except ValueError:
        where = _non_finite(data, "")
        raise InputError(
            f"--json: {where or 'a value'} is not a finite number, which JSON cannot hold; the input is "
            "beyond what memtune can compute (please report it)"
        ) from None


def print_json(data: object) -> None:
    print(json_text(data))


def _non_finite(data: object, path: str) -> str | None:
    """The dotted path of the first NaN or infinity in ``data``."""
    stack: list[tuple[object, str]] = [(data, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where or "the result"
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in reversed(value.items()))
        elif isinstance(value, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(value))))
    return None
