"""``memtune diff A B``: where the memory between two configs went, key by key.

For every differing key the estimate of A with that one change applied gives the key's effect
alone; what the total change leaves over once those are added up is the interactions' part (two
changes that multiply, such as a longer sequence and more in-flight microbatches). All of it is
per pipeline rank and per component, in bytes, so singles plus interactions equal the total
exactly. When A and B have different pipeline sizes the ranks do not correspond, and each
estimate is represented by its most-loaded rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtune.config import LoadedJob
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, RankEstimate
from memtune.estimate.render import components
from memtune.estimate.verdict import needed_bytes
from memtune.regress.jobs import (
    KeyChange,
    UnreadDifference,
    apply,
    differing_keys,
    estimate_named,
    estimate_or_refusal,
    unread_differences,
)

# What a rank needs, as the verdict counts it: the components of its allocator peak (as memtune
# estimate shows them), memory outside PyTorch and the fragmentation margin; then the peak itself.
COMPONENTS = (
    "weights",
    "grads",
    "optimizer",
    "activations",
    "transient",
    "outside PyTorch",
    "fragmentation margin",
)
PEAK = "peak"
MOST_LOADED = "most-loaded rank"

Breakdown = dict[str, int]  # component (and "peak") -> bytes


def breakdown(est: Estimate, rank: RankEstimate) -> Breakdown:
    # The training peak's margin (Estimate.needed_bytes judges a resume's larger peak instead).
    needed = needed_bytes(rank.peak_bytes, est.non_pytorch_bytes, est.verdict_margin)
    margin = needed - rank.peak_bytes - est.non_pytorch_bytes
    return {
        **components(rank),
        "outside PyTorch": est.non_pytorch_bytes,
        "fragmentation margin": margin,
        PEAK: rank.peak_bytes,
    }


def minus(after: Breakdown, before: Breakdown) -> Breakdown:
    return {name: after[name] - before[name] for name in before}


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


def compared(est: Estimate, per_rank: bool) -> list[Breakdown]:
    return [breakdown(est, r) for r in est.ranks] if per_rank else [breakdown(est, est.worst)]


def _applied(job: JobConfig, group: list[KeyChange]) -> JobConfig | str:
    """``job`` with the group's changes, or the first reason the schema refuses the result."""
    try:
        return apply(job, [c.change for c in group])
    except InputError as exc:
        return exc.problems[0]


def _groups(job: JobConfig, changes: list[KeyChange]) -> list[list[KeyChange]]:
    """Each change alone, in order; a change that makes an invalid config alone (a dense model's
    ``num_layers`` and an MoE model's per-layer ``moe_layer_freq`` list) is paired with the first
    other change that makes the pair valid, and the pair is attributed as one. A change no pair
    makes valid stays alone and is reported as refused, its effect inside the interactions."""
    valid = [not isinstance(_applied(job, [c]), str) for c in changes]
    partner: dict[int, int] = {}
    for i, change in enumerate(changes):
        if valid[i] or i in partner:
            continue
        for j, other in enumerate(changes):
            if j != i and j not in partner and not isinstance(_applied(job, [change, other]), str):
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
        job = _applied(a.job, group)
        alone = job if isinstance(job, str) else estimate_or_refusal(job)
        if isinstance(alone, str):
            keys.append(KeyEffect(group[0], None, alone, group[1:]))
            continue
        # One key alone changes the number of ranks only if it is the pipeline size, and then
        # A and B differ in it too, so each side is already its most-loaded rank.
        parts = [minus(e, s) for s, e in zip(start, compared(alone, per_rank))]
        keys.append(KeyEffect(group[0], parts, None, group[1:]))
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
