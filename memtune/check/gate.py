"""The typed gate between loading a job and doing anything with it.

``gate(job)`` runs every check and returns a :class:`CheckedJob`, or raises :class:`InputError`
listing Megatron's own error messages. ``estimate``, ``measure``, ``plan`` and ``fix`` take a
``CheckedJob``, never a bare ``JobConfig``, so a configuration Megatron would refuse cannot reach
them by any path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memtune.check.context import Context, MemoryFacts
from memtune.check.finding import ERROR, UNIGNORABLE, WARNING, Finding
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
    findings: tuple[Finding, ...]  # the selected warnings and infos; errors never get this far
    _token: object

    def __post_init__(self) -> None:
        if self._token is not _GATE:
            raise TypeError("a CheckedJob comes only from memtune.check.gate(job)")


def run_checks(
    job: JobConfig,
    select: list[str] | None = None,
    ignore: list[str] | tuple[str, ...] = (),
    memory: MemoryFacts | None = None,
) -> list[Finding]:
    """The findings for ``job``, in catalogue order. Every rule runs: an error Megatron raises at
    start-up is always returned, marked ``deselected`` when the selection leaves its rule out (as
    ruff never lets a syntax error be ignored); warnings and infos only from the selected rules.
    The job's own ``check.select``/``check.ignore`` apply first; ``select`` narrows and ``ignore``
    widens them. The rules that judge memory need ``memory``, the estimate's facts; without it
    they stay silent (the gate runs before anything is estimated)."""
    ctx = Context.of(job, memory)
    rules = catalogue()
    chosen = selected(rules, job.check.select, job.check.ignore)
    chosen = selected(chosen, select, list(ignore)) if select or ignore else chosen
    reported = {rule.code for rule in chosen}
    findings = []
    for rule in rules:
        finding = rule.run(ctx)
        if finding is None:
            continue
        if rule.code in reported:
            findings.append(finding)
        elif finding.severity == ERROR:
            findings.append(replace(finding, deselected=True))
    return findings


def gate(job: JobConfig) -> CheckedJob:
    """Check ``job``; raise :class:`InputError` with every error finding, selected or not, else
    return it checked."""
    findings = run_checks(job)
    errors = [
        f"{f.code} {f.message}" + (f" ({UNIGNORABLE})" if f.deselected else "")
        for f in findings
        if f.severity == ERROR
    ]
    if errors:
        raise InputError(errors)
    return CheckedJob(job=job, derived=derive(job), findings=tuple(findings), _token=_GATE)


@dataclass(frozen=True)
class Admission:
    """What the gate says of a change memtune proposes: the changed job checked, or why it is
    not offered (``refusal``: "CODE message"; ``refused``: Megatron raises it at start-up rather
    than memtune check warning that it is wasted)."""

    checked: CheckedJob | None
    refusal: str | None = None
    refused: bool = False


def admit(changed: JobConfig, original: JobConfig) -> Admission:
    """The gate for advice: ``changed``, a change ``fix``, ``plan`` or ``diagnose`` would propose
    to ``original``, passes only where a job the user wrote would (no error) and where it brings
    no warning the original job did not have (memtune check calls the change useless or harmful)."""
    try:
        checked = gate(changed)
    except InputError as exc:
        return Admission(None, exc.problems[0], refused=True)
    before = {f.code for f in run_checks(original) if f.severity == WARNING}
    brought = [f for f in checked.findings if f.severity == WARNING and f.code not in before]
    if brought:
        return Admission(None, f"{brought[0].code} {brought[0].message}")
    return Admission(checked)
