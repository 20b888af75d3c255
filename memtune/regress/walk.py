"""``memtune bisect --configs A B``: the first change on the way from A to B after which the
watched rank no longer fits.

Order. Each differing key's effect alone on what the watched rank needs (its peak, memory outside
PyTorch and the verdict's margins: :func:`memtune.regress.attribution.effect_alone`, the
attribution ``diff`` and ``fix`` use too) is estimated (cheap), and the changes are ordered: those
that lower it first (largest saving first), then those memtune check refuses on their own (they
only make sense with another change, e.g. a TP size with its sequence parallelism), then those
with no effect, then those that raise it, smallest first. Along that order what the prefixes
need falls, then rises, so "fits" holds for a run of
prefixes and then stops: one binary search over the prefixes finds the boundary with about
log2(n) evaluations. That matters for ``--measure``, where every evaluation is a GPU run; the
ordering itself always uses the estimator. Raising changes go smallest first so that the change
named is the one that tips it over with every smaller growth already in: reverting it (and the
larger ones after it) is what brings the job back.

Interactions can make the prefixes' verdicts non-monotone; binary search still ends on two
neighbouring prefixes, the shorter fitting and the longer not, so the change between them is
always a change that makes the job stop fitting from a state that fit. A prefix memtune check
refuses is stepped over (like ``git bisect skip``); if every prefix between the boundary pair
is refused, the changes in between are named together.

"Fits" is :meth:`Estimate.verdict` being ``fits``: a ``tight`` rank (one that fits only if
fragmentation stays under the margin) counts as not fitting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from memtune.check import gate
from memtune.config import LoadedJob
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, RankEstimate, estimate
from memtune.estimate.effect import NEEDED
from memtune.regress.attribution import effect_alone
from memtune.regress.jobs import KeyChange, apply, differing_keys, estimate_named, estimate_or_refusal

FITS = "fits"


@dataclass(frozen=True)
class Probe:
    """One evaluated state: A with the first ``applied`` changes of the order."""

    applied: int
    peak_bytes: int
    verdict: str
    pp_rank: int

    @property
    def fits(self) -> bool:
        return self.verdict == FITS


@dataclass
class Walk:
    order: list[KeyChange]
    single_effects: list[
        int | None
    ]  # change of what the rank needs, each key alone, as ordered; None: refused
    start: Probe
    end: Probe
    culprits: list[KeyChange] = field(default_factory=list)  # empty when A does not fit or B fits
    before: Probe | None = None  # the last fitting prefix
    after: Probe | None = None  # the first non-fitting prefix after it
    probes: list[Probe] = field(default_factory=list)  # every evaluation, in the order made
    refused: list[tuple[int, str]] = field(default_factory=list)  # prefixes memtune check refused
    measured: bool = False


def watched(est: Estimate, global_rank: int | None) -> RankEstimate:
    return est.rank(global_rank) if global_rank is not None else est.worst


Evaluate = Callable[[JobConfig, int], Probe]  # (job, changes applied) -> probe; InputError if refused


def estimator(global_rank: int | None) -> Evaluate:
    def evaluate(job: JobConfig, applied: int) -> Probe:
        est = estimate_or_refusal(job)
        if isinstance(est, str):
            raise InputError(est)
        rank = watched(est, global_rank)
        return Probe(applied, rank.peak_bytes, est.verdict(rank), rank.pp_rank)

    return evaluate


def measurer(global_rank: int, python: str) -> Evaluate:
    """Evaluate by ``memtune measure`` of one global rank on this machine's GPU."""
    from memtune.measure.plan import plan_measurement
    from memtune.measure.run import MeasurementFailed, check_interpreter, run_plan

    check_interpreter(python)

    def evaluate(job: JobConfig, applied: int) -> Probe:
        checked = gate(job)
        est = estimate(checked)
        try:
            result = run_plan(plan_measurement(checked, global_rank), python=python)
        except MeasurementFailed as exc:
            raise InputError(f"memtune measure failed with {applied} changes applied: {exc}") from None
        peak = int(result.measured["peak_allocated_bytes"])
        return Probe(applied, peak, est.verdict_of_peak(peak), result.pp_rank)

    return evaluate


def _order_key(item: tuple[KeyChange, int | None]) -> tuple[int, int]:
    _, effect = item
    if effect is None:
        return (1, 0)
    if effect < 0:
        return (0, effect)
    return (2, 0) if effect == 0 else (3, effect)


def walk(
    a: LoadedJob, b: LoadedJob, global_rank: int | None = None, evaluate: Evaluate | None = None
) -> Walk:
    before = estimate_named(a, "A")
    estimate_named(b, "B")  # refuse an invalid B by name before walking towards it
    changes = differing_keys(a.job, b.job)
    if not changes:
        raise InputError(f"{a.source} and {b.source} describe the same job: nothing to bisect")
    pp_rank = watched(before, global_rank).pp_rank
    effects: list[int | None] = []
    for change in changes:
        # What the watched rank needs (the verdict's figure), as `diff` and `fix` attribute it.
        effect = effect_alone(before, a.job, [change.change])
        effects.append(None if isinstance(effect, str) else effect.on(pp_rank)[NEEDED])
    ordered = sorted(zip(changes, effects), key=_order_key)
    order = [c for c, _ in ordered]
    evaluate = evaluate or estimator(global_rank)
    result = Walk(order, [e for _, e in ordered], start=Probe(0, 0, "", 0), end=Probe(0, 0, "", 0))
    cache: dict[int, Probe | None] = {}

    def probe(applied: int) -> Probe | None:
        if applied not in cache:
            try:
                found = evaluate(apply(a.job, [c.change for c in order[:applied]]), applied)
            except InputError as exc:
                cache[applied] = None
                result.refused.append((applied, exc.problems[0]))
            else:
                cache[applied] = found
                result.probes.append(found)
        return cache[applied]

    n = len(order)
    start, end = probe(0), probe(n)
    if start is None or end is None:
        raise InputError(f"{'A' if start is None else 'B'}: {result.refused[-1][1]}")
    result.start, result.end = start, end
    if not start.fits or end.fits:
        return result
    good, bad = 0, n  # invariant: prefix `good` fits, prefix `bad` does not
    while bad - good > 1:
        mid = (good + bad) // 2
        tried = _nearest_valid(probe, good, bad, mid)
        if tried is None:
            break  # every prefix strictly between is refused: the changes in between go together
        if tried.fits:
            good = tried.applied
        else:
            bad = tried.applied
    result.before, result.after = cache[good], cache[bad]
    result.culprits = order[good:bad]
    return result


def _nearest_valid(probe: Callable[[int], Probe | None], good: int, bad: int, mid: int) -> Probe | None:
    """The prefix nearest ``mid`` strictly between ``good`` and ``bad`` that memtune check accepts."""
    for distance in range(bad - good):
        for candidate in (mid + distance, mid - distance):
            if good < candidate < bad and (found := probe(candidate)) is not None:
                return found
    return None
