"""Two loaded jobs compared key by key, and jobs between them built by applying some of the changes.

Keys are compared on the validated jobs with every default filled in, so a key one file sets to
Megatron's default and the other leaves out is no difference, and a Megatron-LM script compares
with the Bridge recipe it was ported to. Keys the loaders did not read (``LoadedJob.ignored``) are
compared separately: they cannot change an estimate, but a user chasing a regression wants them
listed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.check import gate
from memtune.config import LoadedJob, validate
from memtune.config.arguments import load_word
from memtune.config.changes import Change, job_data, with_changes
from memtune.config.loaders import native
from memtune.config.loaders._guards import read_config_text
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, estimate


@dataclass(frozen=True)
class KeyChange:
    """One differing key: its value in A and the change that gives it B's value."""

    change: Change
    before: Any

    @property
    def key(self) -> str:
        return self.change.key

    def __str__(self) -> str:
        return f"{self.key} {value_text(self.before)} -> {value_text(self.change.value)}"


@dataclass(frozen=True)
class UnreadDifference:
    """A key or flag that memtune does not read and that differs between the two files."""

    name: str
    before: str | None  # None: absent from A
    after: str | None  # None: absent from B


def value_text(value: Any) -> str:
    """A value as the dotted override would spell it (``true``, ``[a,b]``, ``null``)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in value.items()) + "}"
    return str(Change("x.y", value)).partition("=")[2]


def load_pair(a: str, b: str, overrides: list[str] | tuple[str, ...] = ()) -> tuple[LoadedJob, LoadedJob]:
    """Configs A and B (each a file or ``recipe:NAME``), with the same dotted overrides."""
    usage = "A B: two config files or recipe:NAME, then key=value overrides for both"
    return load_word(a, overrides, usage), load_word(b, overrides, usage)


def flat(job: JobConfig) -> dict[str, Any]:
    """Every key of the job with its value (defaults included), dotted; a missing optional section
    (``peft``) is one key whose value is null."""
    out: dict[str, Any] = {}
    for section, values in job.model_dump(mode="json").items():
        if isinstance(values, dict):
            for key, value in values.items():
                out[f"{section}.{key}"] = value
        else:
            out[section] = values
    return out


def differing_keys(a: JobConfig, b: JobConfig) -> list[KeyChange]:
    """The keys whose values differ, in schema order. Adding or removing a whole optional section
    (``peft``) is one change of the section: its keys mean nothing without it."""
    fa, fb = flat(a), flat(b)
    whole = {
        name for name in type(a).model_fields if (getattr(a, name) is None) != (getattr(b, name) is None)
    }
    changes, seen = [], set()
    for key in [*fa, *(k for k in fb if k not in fa)]:
        section = key.split(".")[0]
        if section in whole:
            if section not in seen:
                seen.add(section)
                changes.append(KeyChange(Change(section, job_data(b).get(section)), job_data(a).get(section)))
        elif fa.get(key) != fb.get(key):
            changes.append(KeyChange(Change(key, fb.get(key)), fa.get(key)))
    return changes


def apply(job: JobConfig, changes: Sequence[Change]) -> JobConfig:
    """``job`` with ``changes`` applied and validated again; a change of a whole optional section
    (``peft``) adds or, with a null value, removes it."""
    sections = [c for c in changes if "." not in c.key]
    if sections:
        data = job_data(job)
        for change in sections:
            if change.value is None:
                data.pop(change.key, None)
            else:
                data[change.key] = change.value
        job = validate(data)
    return with_changes(job, [c for c in changes if "." in c.key])


def checked_estimate(job: JobConfig) -> Estimate:
    return estimate(gate(job))


def estimate_or_refusal(job: JobConfig) -> Estimate | str:
    """The estimate, or the first reason ``memtune check`` refuses the job."""
    try:
        return checked_estimate(job)
    except InputError as exc:
        return exc.problems[0]


def estimate_named(loaded: LoadedJob, name: str) -> Estimate:
    """Estimate a user's own config; a refusal names the file it came from."""
    try:
        return checked_estimate(loaded.job)
    except InputError as exc:
        raise InputError([f"{name} ({loaded.source}): {p}" for p in exc.problems]) from None


def unread_differences(a: LoadedJob, b: LoadedJob) -> list[UnreadDifference]:
    """Keys and flags that neither estimate reads, where the two files differ."""
    va, vb = _ignored_values(a), _ignored_values(b)
    names = [*va, *(n for n in vb if n not in va)]
    return [UnreadDifference(n, va.get(n), vb.get(n)) for n in names if va.get(n) != vb.get(n)]


def _ignored_values(loaded: LoadedJob) -> dict[str, str]:
    """Each ignored key or flag with its value as text. A launch script's entries carry their
    values (``--flag v``); for a mapping the value is looked up in the file under the dotted name."""
    if loaded.format == "megatron-args":
        out = {}
        for entry in loaded.ignored:
            name, _, value = entry.partition(" ")
            out[name] = value
        return out
    path = Path(loaded.source)
    if not path.is_file():  # a recipe from the catalog: no file to quote values from
        return {entry: "" for entry in loaded.ignored}
    mapping = native.parse_mapping(path, read_config_text(path))
    out = {}
    for entry in loaded.ignored:
        node: Any = mapping
        for part in entry.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[entry] = json.dumps(node, sort_keys=True) if isinstance(node, dict | list) else value_text(node)
    return out
