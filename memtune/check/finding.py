"""What a check reports: one problem with a configuration."""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"  # the run would fail
WARNING = "warning"  # it runs, but the setting is wasted or harmful
INFO = "info"  # worth knowing before launch
SEVERITIES = (ERROR, WARNING, INFO)


@dataclass(frozen=True)
class Finding:
    code: str  # stable code, e.g. "PAR001"
    severity: str  # "error" | "warning" | "info"
    message: str  # one line naming the keys and values involved
    fix: str  # one line: the change to make
    upstream: str | None = (
        None  # the exact text Megatron-Core / Megatron-Bridge raises (or logs), where it does
    )


@dataclass(frozen=True)
class Hit:
    """What a rule returns when it fires; the registry adds code and severity."""

    message: str
    fix: str
    upstream: str | None = None
    severity: str | None = None  # overrides the rule's own where the stack forgives the setting
