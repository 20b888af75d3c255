"""The rule catalogue: one function per rule, registered with its stable code.

A rule reads a :class:`Context` and returns a :class:`Hit` when its condition holds, ``None``
otherwise. Its docstring is its documentation (``memtune check --explain CODE``): a one-line
summary, then the sections What it does / Why it matters / Example / Fix.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

from memtune.check.context import Context
from memtune.check.finding import SEVERITIES, Finding, Hit, changes_in
from memtune.config.versions import Version, format_version
from memtune.errors import InputError
from memtune.numbers import echo


@dataclass(frozen=True)
class Family:
    prefix: str
    title: str


FAMILIES = (
    Family("PAR", "Parallel sizes and divisibility"),
    Family("PIP", "Pipeline and virtual-pipeline layout"),
    Family("SEQ", "Sequence, context parallelism and attention"),
    Family("MOE", "Mixture of experts"),
    Family("REC", "Activation recompute"),
    Family("OFF", "CPU offloading"),
    Family("ENV", "CUDA graphs and allocator environment"),
    Family("OPT", "Optimizer, FSDP and precision"),
    Family("PFT", "PEFT (LoRA)"),
    Family("BAT", "Batch sizes"),
)
FAMILY_BY_PREFIX = {f.prefix: f for f in FAMILIES}

# Modules holding the rules, in catalogue order.
_RULE_MODULES = (
    "parallel",
    "pipeline",
    "sequence",
    "moe",
    "recompute",
    "offload",
    "environment",
    "optimizer",
    "peft",
    "batch",
)


@dataclass(frozen=True)
class Applies:
    """The releases of one package a version-dependent rule applies to: ``since`` inclusive,
    ``until`` exclusive (the release that changed the behaviour)."""

    package: str  # "torch" | "megatron-core"
    since: Version | None = None
    until: Version | None = None

    def holds(self, ctx: Context) -> bool:
        version = ctx.torch if self.package == "torch" else ctx.mcore
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)

    def __str__(self) -> str:
        if self.since and self.until:
            return f"{self.package} {format_version(self.since)} up to {format_version(self.until)}"
        if self.since:
            return f"{self.package} {format_version(self.since)} and newer"
        assert self.until is not None
        return f"{self.package} before {format_version(self.until)}"


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: str
    family: Family
    check: Callable[[Context], Hit | None]
    doc: str
    applies: Applies | None = None  # None: every release memtune knows

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0]

    @property
    def explain(self) -> str:
        """The documentation after the summary line."""
        return self.doc.partition("\n")[2].strip()

    def run(self, ctx: Context) -> Finding | None:
        if self.applies is not None and not self.applies.holds(ctx):
            return None
        hit = self.check(ctx)
        if hit is None:
            return None
        return Finding(
            code=self.code,
            severity=hit.severity or self.severity,
            message=hit.message,
            fix=hit.fix,
            upstream=hit.upstream,
            changes=changes_in(hit.fix),
        )


_RULES: dict[str, Rule] = {}


RuleCheck = Callable[[Context], Hit | None]


def rule(
    code: str, name: str, severity: str, *, applies: Applies | None = None
) -> Callable[[RuleCheck], RuleCheck]:
    """Register the decorated function as rule ``code``; its family is the code's prefix."""
    family = FAMILY_BY_PREFIX[code[:3]]
    if severity not in SEVERITIES:
        raise ValueError(f"{code}: unknown severity {severity!r}")

    def register(check: RuleCheck) -> RuleCheck:
        if code in _RULES:
            raise ValueError(f"rule code {code} registered twice")
        if not check.__doc__:
            raise ValueError(f"rule {code} has no documentation")
        _RULES[code] = Rule(code, name, severity, family, check, inspect.cleandoc(check.__doc__), applies)
        return check

    return register


def catalogue() -> list[Rule]:
    """Every rule, grouped by family in catalogue order, by code within a family."""
    for module in _RULE_MODULES:
        importlib.import_module(f"memtune.check.rules.{module}")
    order = {f.prefix: i for i, f in enumerate(FAMILIES)}
    return sorted(_RULES.values(), key=lambda r: (order[r.family.prefix], r.code))


def selected(rules: list[Rule], select: list[str] | None, ignore: list[str]) -> list[Rule]:
    """The rules ``select`` names (all when None) minus those ``ignore`` names, as ruff does:
    each entry is a code, a code prefix (``ENV``, ``ENV00``) or a rule name."""
    known = catalogue()
    problems = [
        f"check: unknown rule or prefix {echo(entry)} (memtune check --list shows them)"
        for entry in [*(select or []), *ignore]
        if not any(_matches(r, entry) for r in known)
    ]
    if problems:
        raise InputError(problems)
    chosen = [r for r in rules if select is None or any(_matches(r, e) for e in select)]
    return [r for r in chosen if not any(_matches(r, e) for e in ignore)]


_CODE_PREFIX = re.compile(r"[A-Za-z]{1,3}\d{0,3}")


def _matches(rule: Rule, entry: str) -> bool:
    entry = entry.strip()
    if _CODE_PREFIX.fullmatch(entry):
        return rule.code.startswith(entry.upper())
    return rule.name == entry


def find_rule(code_or_name: str) -> Rule | None:
    """A rule by code (any case) or by name."""
    wanted = code_or_name.strip()
    return next((r for r in catalogue() if r.code == wanted.upper() or r.name == wanted.lower()), None)
