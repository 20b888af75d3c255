"""The typed gate between loading a job and doing anything with it.

``gate(job)`` runs every check and returns a :class:`CheckedJob`, or raises :class:`InputError`
listing Megatron's own error messages. ``estimate``, ``measure``, ``plan`` and ``fix`` take a
``CheckedJob``, never a bare ``JobConfig``, so a configuration Megatron would refuse cannot reach
them by any path.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.check.context import Context
from memtune.check.finding import ERROR, Finding
from memtune.check.registry import catalogue, selected
from memtune.config.derived import Derived, derive
from memtune.config.schema import JobConfig
from memtune.errors import InputError

_GATE = object()  # only gate() holds it: a CheckedJob cannot be built around the checks


@dataclass(frozen=True)
class CheckedJob:
    """A job that passed every error-level check, with its derived facts and remaining findings."""

    job: JobConfig
    derived: Derived
    findings: tuple[Finding, ...]  # warnings and infos; errors never get this far
    _token: object

    def __post_init__(self) -> None:
        if self._token is not _GATE:
            raise TypeError("a CheckedJob comes only from memtune.check.gate(job)")


def run_checks(
    job: JobConfig, select: list[str] | None = None, ignore: list[str] | tuple[str, ...] = ()
) -> list[Finding]:
    """The findings of the selected rules for ``job``, in catalogue order. The job's own
    ``check.select``/``check.ignore`` apply first; ``select`` narrows and ``ignore`` widens them."""
    ctx = Context.of(job)
    rules = selected(catalogue(), job.check.select, job.check.ignore)
    rules = selected(rules, select, list(ignore)) if select or ignore else rules
    return [finding for rule in rules if (finding := rule.run(ctx)) is not None]


def gate(job: JobConfig) -> CheckedJob:
    """Check ``job``; raise :class:`InputError` with every error finding, else return it checked."""
    findings = run_checks(job)
    errors = [f"{f.code} {f.message}" for f in findings if f.severity == ERROR]
    if errors:
        raise InputError(errors)
    return CheckedJob(job=job, derived=derive(job), findings=tuple(findings), _token=_GATE)
