"""Find the cheapest remedies that make a failing job fit.

Every remedy of :func:`memtune.fix.changes.menu` is applied and passed through the gate for advice
(:func:`memtune.check.admit`: Megatron must accept it and memtune check must not call it
useless); what passes is estimated, judged by the whole-run verdict ``estimate`` gives (training,
checkpoint load and save on the device, and host memory per node), and priced by the step model. When expandable segments are off and the
job is short of memory or its logs show fragmentation, they come first at no cost and the other
remedies are judged on top of them. When no single remedy is enough, pairs of the most useful
ones are tried; when one is, pairs of those cheaper than the cheapest that fits. Suggestions are
ordered by predicted throughput loss (to a tenth of a percent), then by the field's order of
preference; a remedy the step model cannot price comes after every priced one. Every remedy
tried is reported with what it saves and costs, chosen or not.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from memtune.check import admit, gate
from memtune.config.changes import Change, with_changes
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, estimate
from memtune.estimate.effect import JUDGED, Effect
from memtune.fix.changes import FAMILIES, Remedy, allocator_remedy, menu, selective_remedy
from memtune.perf.step import StepPrediction, throughput_of
from memtune.units import human

# Statuses of a tried remedy, in the order "not chosen" lists them.
FITS, SHORT, NO_EFFECT, WARNED, REFUSED = "fits", "short", "no effect", "warned", "refused"
_LISTING_ORDER = (FITS, SHORT, NO_EFFECT, WARNED, REFUSED)
# Singles that save most and are tried in pairs (none fits alone, or each is cheaper than one that fits).
_PAIRED = 10


@dataclass
class Tried:
    """One remedy (or pair) applied to the job: whether it is admitted, what it saves on the
    failing rank at the judged phase, what the step model says it costs."""

    remedies: tuple[Remedy, ...]
    changes: tuple[Change, ...]  # with the lead's (expandable segments) where it leads
    status: str
    reason: str = ""  # the gate's refusal, or what is still missing
    job: JobConfig | None = None
    estimate: Estimate | None = None
    prediction: StepPrediction | None = None
    saved_bytes: int | None = None
    throughput_change: float | None = None  # relative change in tokens/s per GPU; None: not priced
    unpriced: str | None = None  # why the step model gives no price

    @property
    def title(self) -> str:
        return " + ".join(r.title for r in self.remedies)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(r.family for r in self.remedies)

    @property
    def side_effects(self) -> tuple[str, ...]:
        return tuple(e for r in self.remedies for e in r.side_effects)


@dataclass
class FixResult:
    job: JobConfig
    before: Estimate
    before_prediction: StepPrediction | None
    failing_rank: int  # pipeline rank whose judged peak is highest
    phase: str  # the phase whose peak the verdict judges on that rank
    fragmentation: bool | None  # the logs show fragmentation; None: no logs
    suggestions: list[Tried]  # the lead (expandable segments) first when it leads, then cheapest first
    lead: Tried | None = None  # expandable segments, tried first and under every other remedy
    not_chosen: list[Tried] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (change, why it is not tried)
    warnings: list[str] = field(default_factory=list)  # what makes the figures doubtful
    headroom_bytes: int = 0

    @property
    def proposed(self) -> Tried | None:
        """What ``--write`` writes and the API's caller applies: the first suggestion that makes
        the job fit (expandable segments alone where they suffice, else the cheapest remedy with
        them on)."""
        return next((s for s in self.suggestions if s.status == FITS), None)

    @property
    def fits_already(self) -> bool:
        """The job fits with the headroom asked for, and nothing says it failed."""
        return not self.suggestions and self.lead is None and _fits(self.before, self.headroom_bytes, 0, 0)


def judged_peak(est: Estimate, pp_rank: int) -> int:
    """The peak the verdict judges on a pipeline rank (the largest of training, checkpoint load
    and save)."""
    return est.verdict_peak_bytes(est.ranks[pp_rank])


def phase_of(est: Estimate, pp_rank: int) -> str:
    return est.judged_phase(est.ranks[pp_rank])


def _failing_rank(est: Estimate) -> int:
    return max(range(len(est.ranks)), key=lambda r: judged_peak(est, r))


def saving(before: Estimate, after: Estimate) -> int:
    """What a change takes off the judged peak of ``before``'s failing rank (the largest of its
    training, checkpoint load and save), by the attribution ``diff`` and ``bisect`` use
    (``memtune.estimate.effect``): the figure ``fix`` and ``diagnose`` both quote."""
    return -Effect(before, after).on(_failing_rank(before))[JUDGED]


def _fits(est: Estimate, headroom: int, saved: int, min_saving: int) -> bool:
    worst = max(est.ranks, key=est.verdict_peak_bytes)
    spare = est.capacity_bytes - est.needed_bytes(worst)
    return est.verdict() == "fits" and spare >= headroom and saved >= min_saving


def _merge(remedies: tuple[Remedy, ...]) -> tuple[Change, ...] | None:
    """The remedies' changes together, or None when two set one key differently."""
    merged: dict[str, Change] = {}
    for r in remedies:
        for c in r.changes:
            if c.key in merged and merged[c.key].value != c.value:
                return None
            merged[c.key] = c
    return tuple(merged.values())


class _Search:
    """The state one ``find_fixes`` call shares: the job, its estimate and price, the lead."""

    def __init__(self, job: JobConfig, headroom: int, min_saving: int) -> None:
        self.job = job
        self.before = estimate(gate(job))
        self.base_price = throughput_of(self.before.derived).prediction
        self.failing = _failing_rank(self.before)
        self.headroom, self.min_saving = headroom, min_saving
        self.seen: set[str] = set()  # the changed jobs tried: two change sets that make one job are one
        self.lead_changes: tuple[Change, ...] = ()

    def saved(self, est: Estimate) -> int:
        return saving(self.before, est)

    def attempt(self, remedies: tuple[Remedy, ...], lead: bool = False) -> Tried | None:
        own = _merge(remedies)
        changes = own if own is None or lead else _merge_lead(self.lead_changes, own)
        if changes is None:
            return None
        try:
            changed = with_changes(self.job, list(changes))
        except InputError as exc:
            return Tried(remedies, changes, REFUSED, exc.problems[0])
        identity = changed.model_dump_json()
        if identity in self.seen:
            return None
        self.seen.add(identity)
        admitted = admit(changed, self.job)
        if admitted.checked is None:
            return Tried(remedies, changes, REFUSED if admitted.refused else WARNED, admitted.refusal or "")
        est = estimate(admitted.checked)
        tried = Tried(remedies, changes, SHORT, job=changed, estimate=est, saved_bytes=self.saved(est))
        self.price(tried)
        self.judge(tried, lead)
        return tried

    def price(self, tried: Tried) -> None:
        assert tried.estimate is not None
        throughput = throughput_of(tried.estimate.derived)
        tried.prediction = throughput.prediction
        if throughput.prediction is None or self.base_price is None:
            tried.unpriced = throughput.not_simulated or "the job as written has no simulated step"
            return
        tried.throughput_change = (
            throughput.prediction.tokens_per_s_per_gpu / self.base_price.tokens_per_s_per_gpu - 1
        )

    def judge(self, tried: Tried, lead: bool) -> None:
        est, saved = tried.estimate, tried.saved_bytes
        assert est is not None and saved is not None
        # Expandable segments change no peak: they lower the margin, so no saving is asked of them.
        if _fits(est, self.headroom, saved, 0 if lead else self.min_saving):
            tried.status = FITS
            return
        worst = max(est.ranks, key=est.verdict_peak_bytes)
        need = f"needs {human(est.needed_bytes(worst))} of {human(est.capacity_bytes)}"
        if saved < 0:
            tried.status, tried.reason = NO_EFFECT, f"raises the failing rank's peak by {human(-saved)}"
        elif saved == 0 and not lead:
            tried.status, tried.reason = NO_EFFECT, f"does not lower the failing rank's peak; {need}"
        elif est.verdict() == "fits" and saved < self.min_saving:
            tried.reason = f"the log was short by {human(self.min_saving)}"
        elif est.verdict() == "fits":
            spare = est.capacity_bytes - est.needed_bytes(worst)
            tried.reason = f"leaves {human(spare)} free of the {human(self.headroom)} asked"
        else:
            tried.reason = f"still {est.verdict()}: {need}"


def _merge_lead(lead: tuple[Change, ...], own: tuple[Change, ...]) -> tuple[Change, ...]:
    keys = {c.key for c in own}
    return tuple(c for c in lead if c.key not in keys) + own


def find_fixes(
    job: JobConfig,
    fragmentation: bool | None = None,
    limit: int = 3,
    min_saving: int = 0,
    headroom: int = 0,
) -> FixResult:
    """Suggestions that make ``job`` fit (with ``headroom`` bytes to spare), cheapest first.

    ``fragmentation``: what the logs of a failed run say (True: fragmentation; False: another
    shortage; None: no logs). ``min_saving``: the bytes the failing rank must lose besides fitting
    by the estimate (what the log says the run was short by, when the estimate thought it fit).
    A job that fits, with no log saying otherwise, gets no suggestion.
    """
    search = _Search(job, headroom, min_saving)
    before = search.before
    result = FixResult(
        job,
        before,
        search.base_price,
        search.failing,
        phase_of(before, search.failing),
        fragmentation,
        [],
        headroom_bytes=headroom,
    )
    lead = _lead(search, result)
    if fragmentation is None and lead is None and _fits(before, headroom, 0, 0):
        return result
    tried = [t for r in menu(job) if r.family != "allocator" and (t := search.attempt((r,)))]
    if together := _selective_together(search, tried):
        tried.append(together)
    tried += _pairs(search, tried)
    _choose(result, tried, limit)
    result.notes += _notes(before)
    return result


def _lead(search: _Search, result: FixResult) -> Tried | None:
    """Expandable segments lead when they are off and the job is short of memory (or the logs
    show fragmentation): zero cost, and the other remedies are judged with them on."""
    remedy = allocator_remedy(search.job)
    if remedy is None:
        if search.job.env.use_nccl_ub:
            result.notes.append(
                ("Expandable segments", "Megatron-Core refuses them beside NCCL user buffers (check ENV001)")
            )
        return None
    facts = search.before.memory_facts()
    short = facts.verdict != "fits" or facts.capacity_bytes - facts.needed_bytes < max(
        facts.fragmentation_bytes, search.headroom
    )
    if result.fragmentation is False:
        result.notes.append(("Expandable segments", "the logged failure is not fragmentation"))
        return None
    if not (short or result.fragmentation):
        return None
    lead = search.attempt((remedy,), lead=True)
    if lead is None or lead.estimate is None:
        return None
    search.lead_changes = lead.changes
    result.lead = lead
    result.suggestions.append(lead)
    return lead


def _selective_together(search: _Search, singles: list[Tried]) -> Tried | None:
    """The selective recompute modules the gate admitted one by one, recomputed together."""
    admitted = [
        t for t in singles if t.families == ("selective-recompute",) and t.status not in (WARNED, REFUSED)
    ]
    if len(admitted) < 2:
        return None
    modules = set().union(*(set(_recomputed(t)) for t in admitted))
    return search.attempt((selective_remedy(modules),))


def _recomputed(t: Tried) -> list[str]:
    return next(c.value for c in t.remedies[0].changes if c.key == "model.recompute_modules")


def _pairs(search: _Search, singles: list[Tried]) -> list[Tried]:
    """Pairs of remedies from different families that are not enough alone, tried together:
    the most useful ones when no single remedy fits, else those each cheaper than the cheapest
    single that fits (two cheap changes can cost less than one dear one; a pair costs at least
    its dearer member)."""
    fitting = [t.throughput_change for t in singles if t.status == FITS and t.throughput_change is not None]
    cheapest = max(fitting, default=None)  # the smallest loss: changes are negative
    short = [t for t in singles if t.status == SHORT and (t.saved_bytes or 0) > 0]
    if cheapest is not None:
        short = [t for t in short if t.throughput_change is not None and t.throughput_change > cheapest]
    elif any(t.status == FITS for t in singles):
        return []  # a single fits, unpriced: nothing to weigh a pair against
    useful = sorted(short, key=lambda t: -(t.saved_bytes or 0))[:_PAIRED]
    pairs = []
    for a, b in itertools.combinations(useful, 2):
        if a.remedies[0].family != b.remedies[0].family:
            tried = search.attempt((a.remedies[0], b.remedies[0]))
            if tried is not None and tried.status == FITS:
                pairs.append(tried)
    return pairs


def _cost_key(t: Tried) -> tuple[bool, float, int, int]:
    """Priced before unpriced, then predicted loss to a tenth of a percent, the field's order,
    the larger saving."""
    loss = round(-(t.throughput_change or 0.0), 3)
    return (
        t.throughput_change is None,
        loss,
        min(FAMILIES.index(f) for f in t.families),
        -(t.saved_bytes or 0),
    )


def _choose(result: FixResult, tried: list[Tried], limit: int) -> None:
    """The cheapest fitting remedy of each family (or pair of families), up to ``limit``; every
    other one tried goes to "not chosen", fitting ones first, cheapest first."""
    fitting = sorted((t for t in tried if t.status == FITS), key=_cost_key)
    if result.lead is not None and result.lead.status == FITS:
        fitting = []  # expandable segments are enough on their own
    chosen: list[Tried] = []
    families: set[tuple[str, ...]] = set()
    for t in fitting:
        if t.families not in families and len(chosen) < limit:
            families.add(t.families)
            chosen.append(t)
    result.suggestions += chosen
    rest = [t for t in tried if t not in chosen]
    result.not_chosen = sorted(
        rest,
        key=lambda t: (
            _LISTING_ORDER.index(t.status),
            _cost_key(t) if t.status == FITS else (-(t.saved_bytes or 0),),
        ),
    )


def _notes(before: Estimate) -> list[tuple[str, str]]:
    """What is never tried for this job, and why."""
    d = before.derived
    notes = []
    if d.pp > 1:
        notes.append(
            ("More virtual pipeline stages", "VPP is no memory fix: it adds in-flight chunks (check PIP011)")
        )
    if d.pp > 1 and not d.model.cpu_offloading:
        notes.append(
            (
                "Layer-wise activation offload (model.cpu_offloading)",
                "Megatron-Core refuses it with PP > 1: 'Currently there is no support for Pipeline "
                "parallelism with CPU offloading' (check OFF001)",
            )
        )
    if d.micro_batch_size == 1:
        notes.append(("Smaller micro-batch", "the micro-batch is already 1"))
    return notes
