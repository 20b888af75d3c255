"""What a check reports: one problem with a configuration."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memtune.config.changes import Change, default_of

ERROR = "error"  # the run would fail
WARNING = "warning"  # it runs, but the setting is wasted or harmful
INFO = "info"  # worth knowing before launch
SEVERITIES = (ERROR, WARNING, INFO)

# What every command says of an error whose rule the user selected out or ignored.
UNIGNORABLE = "select/ignore cannot silence an error Megatron raises at start-up"


@dataclass(frozen=True, kw_only=True)
class Finding:
    code: str  # stable code, e.g. "PAR001"
    severity: str  # "error" | "warning" | "info"
    message: str  # one line naming the keys and values involved
    fix: str  # one line: the change to make
    upstream: str | None = None  # the exact text Megatron-Core / Megatron-Bridge raises or logs
    changes: tuple[Change, ...] = ()  # the fix as dotted config changes, where it is one
    # An error whose rule select/ignore leaves out: reported and refused all the same, since
    # Megatron raises it at start-up whatever memtune is told to skip.
    deselected: bool = False


@dataclass(frozen=True, kw_only=True)
class Hit:
    """What a rule returns when it fires; the registry adds code, severity and the changes."""

    message: str
    fix: str
    upstream: str | None = None
    severity: str | None = None  # overrides the rule's own where the stack forgives the setting


# "set model.x=1 and ddp.y=true, or ..." -> the first alternative's assignments;
# "unset model.x" -> model.x back to its default (null).
_FIRST_ALTERNATIVE = re.compile(r"^(?P<verb>set|use|unset|remove) (?P<body>[^,(]*?)(?:,| \(| or |$)")
_ASSIGNMENT = re.compile(r"^[a-z_]+\.[A-Za-z_0-9]+=[^\s=]+$")
_KEY = re.compile(r"^[a-z_]+\.[A-Za-z_0-9]+$")


def changes_in(fix: str) -> tuple[Change, ...]:
    """The dotted changes a fix line spells out in its first alternative, if it is only that.

    ``"set model.recompute_method=uniform (or block)"`` gives one change; a fix in words
    (``"use a tensor_model_parallel_size that divides 32"``) gives none.
    """
    match = _FIRST_ALTERNATIVE.match(fix)
    if not match:
        return ()
    parts = match.group("body").split(" and ")
    if match.group("verb") in ("unset", "remove"):
        return (
            tuple(Change(part, default_of(part)) for part in parts)
            if all(_KEY.match(p) for p in parts)
            else ()
        )
    if not all(_ASSIGNMENT.match(part) for part in parts):
        return ()
    return tuple(Change.parse(part) for part in parts)
