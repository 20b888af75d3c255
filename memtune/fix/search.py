"""Find the cheapest remedies that make a failing job fit.

Each remedy of :func:`memtune.fix.changes.options` (and, when no single one is enough, each pair
of remedies from different families) is applied, passed through ``memtune check`` (a change any
check refuses is reported, never proposed), estimated, and, when its most-loaded rank fits with
the fragmentation margin, priced by the throughput model. Suggestions are ordered by predicted
throughput loss (to the nearest percent), then by the field's order of preference.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, estimate
from memtune.fix.changes import FAMILIES, Remedy, allocator_remedy, options
from memtune.perf.step import StepPrediction, predict_step
from memtune.units import GiB


@dataclass
class Suggestion:
    remedies: tuple[Remedy, ...]
    changes: tuple[Change, ...]
    job: JobConfig
    estimate: Estimate
    prediction: StepPrediction
    saved_bytes: int  # on the failing rank (the most-loaded one before the change)
    throughput_change: float  # relative change in tokens/s per GPU

    @property
    def title(self) -> str:
        return " + ".join(r.title for r in self.remedies)


@dataclass
class FixResult:
    job: JobConfig
    before: Estimate
    before_prediction: StepPrediction
    failing_rank: int  # pipeline rank
    fragmentation: bool  # the failure is fragmentation (diagnose's verdict, or "tight")
    suggestions: list[Suggestion]
    not_chosen: list[tuple[str, str]] = field(default_factory=list)  # (remedy, why not)
    warnings: list[str] = field(default_factory=list)  # what makes the figures doubtful


def _merge(remedies: tuple[Remedy, ...]) -> tuple[Change, ...] | None:
    """The remedies' changes together, or None when two set one key differently."""
    merged: dict[str, Change] = {}
    for r in remedies:
        for c in r.changes:
            if c.key in merged and merged[c.key].value != c.value:
                return None
            merged[c.key] = c
    return tuple(merged.values())


def find_fixes(
    job: JobConfig, fragmentation: bool | None = None, limit: int = 3, min_saving: int = 0
) -> FixResult:
    """Suggestions that make ``job``'s most-loaded rank fit, cheapest first.

    ``fragmentation``: the failure is fragmentation (from ``diagnose``); by default it is when the
    estimate says "tight" (fits only if fragmentation stays under the margin). ``min_saving``: the
    bytes the failing rank must lose besides fitting by the estimate (what an out-of-memory log
    says the run was short by, when the estimate thought it fit).
    """
    before = estimate(gate(job))
    base_pred = predict_step(before.derived)
    failing = before.worst.pp_rank
    verdict = before.verdict()
    if fragmentation is None:
        fragmentation = verdict == "tight"
    not_chosen: list[tuple[str, str]] = []
    candidates = options(job)
    if not fragmentation:
        candidates = [r for r in candidates if r.family != "allocator"]
        if allocator_remedy(job):
            not_chosen.append(("Expandable segments", "the failure is not fragmentation: it changes no peak"))
    elif job.env.use_nccl_ub:
        not_chosen.append(
            (
                "Expandable segments",
                "Megatron-Core refuses them beside NCCL user buffers (env.use_nccl_ub, check ENV001)",
            )
        )
    d = before.derived
    if d.vpp > 1 or d.pp > 1:
        not_chosen.append(
            ("More virtual pipeline stages", "VPP does not reduce peak memory (it adds in-flight chunks)")
        )
    if d.pp > 1 and not job.model.cpu_offloading:
        not_chosen.append(
            (
                "Layer-wise activation offload (model.cpu_offloading)",
                "Megatron-Core refuses it with PP > 1 (check OFF001); fine-grained offloading is tried instead",
            )
        )
    if job.train.micro_batch_size == 1:
        not_chosen.append(("Smaller micro-batch", "the micro-batch is already 1"))

    tried: set[str] = set()  # the changed jobs seen: two change sets that make one job are one remedy

    def attempt(remedies: tuple[Remedy, ...]) -> Suggestion | None:
        changes = _merge(remedies)
        if changes is None:
            return None
        title = " + ".join(r.title for r in remedies)
        try:
            changed = with_changes(job, list(changes))
        except InputError as exc:
            not_chosen.append((title, "refused by memtune check: " + exc.problems[0]))
            return None
        identity = changed.model_dump_json()
        if identity in tried:
            return None
        tried.add(identity)
        try:
            checked = gate(changed)
        except InputError as exc:
            not_chosen.append((title, "refused by memtune check: " + exc.problems[0]))
            return None
        est = estimate(checked)
        pred = predict_step(checked.derived)
        after_rank = est.ranks[failing] if len(est.ranks) == len(before.ranks) else est.worst
        saved = before.worst.peak_bytes - after_rank.peak_bytes
        s = Suggestion(
            remedies,
            changes,
            changed,
            est,
            pred,
            saved,
            pred.tokens_per_s_per_gpu / base_pred.tokens_per_s_per_gpu - 1,
        )
        if est.verdict() != "fits" or (saved < min_saving and s.remedies[0].family != "allocator"):
            not_chosen.append((title, _why_short(before, est, saved, min_saving)))
            return None
        return s

    fitting = [s for r in candidates if (s := attempt((r,)))]
    if not fitting:
        singles = [r for r in candidates if r.family != "allocator"]
        for a, b in itertools.combinations(singles, 2):
            if a.family != b.family and (s := attempt((a, b))):
                fitting.append(s)
    fitting.sort(
        key=lambda s: (
            round(-s.throughput_change, 2),
            min(FAMILIES.index(r.family) for r in s.remedies),
            -s.saved_bytes,
        )
    )
    chosen = []
    seen_families: set[tuple[str, ...]] = set()
    for s in fitting:
        families = tuple(r.family for r in s.remedies)
        if families in seen_families:
            continue
        seen_families.add(families)
        chosen.append(s)
        if len(chosen) == limit:
            break
    best_cost = chosen[0].throughput_change if chosen else 0.0
    for s in fitting:
        if s not in chosen and tuple(r.family for r in s.remedies) not in {
            tuple(r.family for r in c.remedies) for c in chosen
        }:
            not_chosen.append(
                (
                    s.title,
                    f"fits but costs {-s.throughput_change:.1%} throughput (the first costs {max(0.0, -best_cost):.1%})",
                )
            )
    return FixResult(job, before, base_pred, failing, fragmentation, chosen, _dedupe(not_chosen))


def _why_short(before: Estimate, after: Estimate, saved: int, min_saving: int) -> str:
    """Why a remedy that was estimated is not proposed, in words (never a negative saving)."""
    still = (
        f"still {after.verdict()}"
        if after.verdict() != "fits"
        else f"the log was short by {min_saving / GiB:.2f} GiB"
    )
    if saved < 0:
        return f"does not help: raises the failing rank's peak by {-saved / GiB:.2f} GiB"
    if saved == 0 and after.margin < before.margin:
        return (
            f"changes no peak; the fragmentation margin drops {before.margin:.0%} → {after.margin:.0%} "
            f"(needs {after.needed_bytes(after.worst) / GiB:.2f} of {after.capacity_bytes / GiB:.2f} GiB), {still}"
        )
    if saved == 0:
        return f"does not lower the failing rank's peak, {still}"
    return f"not enough: saves {saved / GiB:.2f} GiB, {still}"


def _dedupe(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(items))
