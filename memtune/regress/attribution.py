"""What one change does to a job's memory, and ``memtune diff A B``: where the memory between two
configs went, key by key.

:func:`effect_alone`: a change (one key, or keys that only go together) applied alone to a job,
gated like any job the user wrote, estimated, and compared with the job's own estimate by
``memtune.estimate.effect.Effect``, the one attribution ``diff``, ``bisect --configs`` and ``fix``
share (per pipeline rank and per component of what the rank needs, docs/verdict.md). An
allocator setting thus moves the fragmentation margin, not the peak.

For ``diff``, every differing key's effect alone is that; what the total change leaves over once
those are added up is the interactions' part (two changes that multiply, such as a longer
sequence and more in-flight microbatches), so singles plus interactions equal the total exactly.
When A and B have different pipeline sizes the ranks do not correspond, and each estimate is
represented by its most-loaded rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memtune.config import LoadedJob
from memtune.config.changes import Change
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate
from memtune.estimate.effect import (
    COMPONENTS,
    MOST_LOADED,
    Breakdown,
    Effect,
    compared,
    minus,
)
from memtune.regress.jobs import (
    KeyChange,
    UnreadDifference,
    apply,
    differing_keys,
    estimate_named,
    estimate_or_refusal,
    unread_differences,
)


def effect_alone(before: Estimate, job: JobConfig, changes: Sequence[Change]) -> Effect | str:
    """What ``changes`` do alone to ``job``, whose estimate is ``before``: ``job`` with only them
    applied, gated and estimated like a job the user wrote; or the first reason the schema or
    ``memtune check`` refuses it. A change of a whole optional section (``peft``) adds it or, with
    a null value, removes it."""
    try:
        changed = apply(job, changes)
    except InputError as exc:
        return exc.problems[0]
    after = estimate_or_refusal(changed)
    return after if isinstance(after, str) else Effect(before, after)


@dataclass
class KeyEffect:
    """One differing key and what it does alone, per compared rank; or a key that no valid config
    changes alone, with the key that must change with it (``together``)."""

    change: KeyChange
    alone: list[Breakdown] | None  # None: A with only this change is refused by memtune check
    refused: str | None = None  # the first reason, when refused
    together: list[KeyChange] = field(default_factory=list)

    def __str__(self) -> str:
        return " with ".join(str(c) for c in [self.change, *self.together])


@dataclass
class ConfigDiff:
    a: LoadedJob
    b: LoadedJob
    before: Estimate
    after: Estimate
    labels: list[str]  # the compared ranks: "pp_rank N" each, or the most-loaded rank of each side
    total: list[Breakdown]
    keys: list[KeyEffect]
    interactions: list[Breakdown]
    unread: list[UnreadDifference] = field(default_factory=list)

    @property
    def per_rank(self) -> bool:
        return self.labels[0] != MOST_LOADED


def _valid(job: JobConfig, group: list[KeyChange]) -> bool:
    """The schema accepts ``job`` with the group's changes (memtune check may still refuse it)."""
    try:
        apply(job, [c.change for c in group])
    except InputError:
        return False
    return True


def _groups(job: JobConfig, changes: list[KeyChange]) -> list[list[KeyChange]]:
    """Each change alone, in order; a change that makes an invalid config alone (a dense model's
    ``num_layers`` and an MoE model's per-layer ``moe_layer_freq`` list) is paired with the first
    other change that makes the pair valid, and the pair is attributed as one. A change no pair
    makes valid stays alone and is reported as refused, its effect inside the interactions."""
    valid = [_valid(job, [c]) for c in changes]
    partner: dict[int, int] = {}
    for i, change in enumerate(changes):
        if valid[i] or i in partner:
            continue
        for j, other in enumerate(changes):
            if j != i and j not in partner and _valid(job, [change, other]):
                partner[i], partner[j] = j, i
                break
    groups = []
    for i, change in enumerate(changes):
        if i not in partner:
            groups.append([change])
        elif i < partner[i]:
            groups.append([change, changes[partner[i]]])
    return groups


def diff_configs(a: LoadedJob, b: LoadedJob) -> ConfigDiff:
    before, after = estimate_named(a, "A"), estimate_named(b, "B")
    per_rank = len(before.ranks) == len(after.ranks)
    labels = [f"pp_rank {r.pp_rank}" for r in before.ranks] if per_rank else [MOST_LOADED]
    start, end = compared(before, per_rank), compared(after, per_rank)
    total = [minus(e, s) for s, e in zip(start, end)]
    keys = []
    for group in _groups(a.job, differing_keys(a.job, b.job)):
        effect = effect_alone(before, a.job, [c.change for c in group])
        if isinstance(effect, str):
            keys.append(KeyEffect(group[0], None, effect, group[1:]))
            continue
        # One key alone changes the number of ranks only if it is the pipeline size, and then
        # A and B differ in it too, so each side is already its most-loaded rank.
        keys.append(KeyEffect(group[0], effect.parts(per_rank), None, group[1:]))
    interactions = []
    for i, whole in enumerate(total):
        singles = [k.alone[i] for k in keys if k.alone is not None]
        interactions.append({name: whole[name] - sum(s[name] for s in singles) for name in whole})
    return ConfigDiff(a, b, before, after, labels, total, keys, interactions, unread_differences(a, b))


@dataclass(frozen=True)
class Attribution:
    """One line of the answer: a change (or the interactions) moved one component of one rank."""

    what: str  # "model.seq_length 4096 -> 8192" or "interactions"
    rank: str  # a label of ConfigDiff.labels
    component: str
    delta: int


INTERACTIONS = "interactions between the changes"


def attributions(diff: ConfigDiff) -> list[Attribution]:
    """Every non-zero component change of every key alone and of the interactions, largest first."""
    found = []
    for effect in diff.keys:
        for label, part in zip(diff.labels, effect.alone or []):
            found += [Attribution(str(effect), label, c, part[c]) for c in COMPONENTS if part[c]]
    for label, part in zip(diff.labels, diff.interactions):
        found += [Attribution(INTERACTIONS, label, c, part[c]) for c in COMPONENTS if part[c]]
    return sorted(found, key=lambda a: -abs(a.delta))
