"""``memtune check``: find configurations that would fail at start-up, and memory-tuning
settings that silently do nothing, before a job waits in a queue.

Every other command calls :func:`require_valid` first, so a config is refused with the same
messages everywhere.
"""

from __future__ import annotations

from memtune.check.context import Context
from memtune.check.finding import ERROR, INFO, WARNING, Finding
from memtune.check.registry import catalogue
from memtune.config.schema import JobConfig
from memtune.errors import InputError

__all__ = ["ERROR", "INFO", "WARNING", "Finding", "require_valid", "run_checks"]


def run_checks(job: JobConfig) -> list[Finding]:
    """All findings for ``job``, in catalogue order."""
    ctx = Context.of(job)
    return [finding for rule in catalogue() if (finding := rule.run(ctx)) is not None]


def require_valid(job: JobConfig) -> list[Finding]:
    """Raise :class:`InputError` listing every error finding; return the warnings and infos."""
    findings = run_checks(job)
    errors = [f"{f.code} {f.message}" for f in findings if f.severity == ERROR]
    if errors:
        raise InputError(errors)
    return [f for f in findings if f.severity != ERROR]
