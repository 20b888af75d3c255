"""The rule catalogue: one function per rule, registered with its stable code.

A rule reads a :class:`Context` and returns a :class:`Hit` when its condition holds, ``None``
otherwise. Its docstring is its documentation (``memtune check --explain CODE``): a one-line
summary, then the sections What it does / Why it matters / Example / Fix.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from memtune.check.context import Context
from memtune.check.finding import SEVERITIES, Finding, Hit


@dataclass(frozen=True)
class Family:
    prefix: str
    title: str


FAMILIES = (
    Family("PAR", "Parallel sizes and divisibility"),
    Family("PIP", "Pipeline and virtual-pipeline layout"),
    Family("SEQ", "Sequence and context parallelism"),
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
class Rule:
    code: str
    name: str
    severity: str
    family: Family
    check: Callable[[Context], Hit | None]
    doc: str

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0]

    @property
    def explain(self) -> str:
        """The documentation after the summary line."""
        return self.doc.partition("\n")[2].strip()

    def run(self, ctx: Context) -> Finding | None:
        hit = self.check(ctx)
        if hit is None:
            return None
        return Finding(self.code, hit.severity or self.severity, hit.message, hit.fix, hit.upstream)


_RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: str):
    """Register the decorated function as rule ``code``; its family is the code's prefix."""
    family = FAMILY_BY_PREFIX[code[:3]]
    if severity not in SEVERITIES:
        raise ValueError(f"{code}: unknown severity {severity!r}")

    def register(check: Callable[[Context], Hit | None]):
        if code in _RULES:
            raise ValueError(f"rule code {code} registered twice")
        if not check.__doc__:
            raise ValueError(f"rule {code} has no documentation")
        _RULES[code] = Rule(code, name, severity, family, check, inspect.cleandoc(check.__doc__))
        return check

    return register


def catalogue() -> list[Rule]:
    """Every rule, grouped by family in catalogue order, by code within a family."""
    for module in _RULE_MODULES:
        importlib.import_module(f"memtune.check.rules.{module}")
    order = {f.prefix: i for i, f in enumerate(FAMILIES)}
    return sorted(_RULES.values(), key=lambda r: (order[r.family.prefix], r.code))


def find_rule(code_or_name: str) -> Rule | None:
    """A rule by code (any case) or by name."""
    wanted = code_or_name.strip()
    return next((r for r in catalogue() if r.code == wanted.upper() or r.name == wanted.lower()), None)
