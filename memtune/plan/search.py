"""The search behind ``memtune plan``: enumerate, prune, bound, estimate, price, check.

One model prices every layout: the step model (``memtune.perf.step``), which ``plan`` ranks by
and ``estimate``, ``fix`` and ``bench`` print. The search prices only what a lower bound on
that same price cannot rule out (``memtune/plan/bound.py``):

1. every candidate of the space (``space.layouts``), in groups of one parallel layout;
2. drop what arithmetic alone refuses (``space.pruned``, each with the check code that would);
3. walk best first (``_walk``): the least bound left is split into the next level's bounds
   (parallel shape, layout group, members that recompute alike) or, at the last, its members
   are estimated with the estimator's cached fast path (``fast``; those whose verdict is
   ``fits``), bounded one by one and priced (the simulated step); a member whose price would
   enter the best ``top`` goes through the gate for advice (``memtune.check.admit``) on the real job;
4. stop at the first bound above the ``top``-th best price that passed the gate: every layout
   left is slower than that at best. The shown layouts are estimated again by
   ``memtune.estimate.estimate`` on the gated job.

With ``pareto`` every candidate is estimated (over forked workers), and the memory/throughput
frontier of those that fit is exact by the step model: a layout is priced only where its bound
could still put it on the frontier.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from memtune.catalog.gpus import capacity_bytes, get_gpu
from memtune.check import Admission, CheckedJob, admit
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived, derive
from memtune.config.knobs import Knobs, Recompute
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, estimate
from memtune.perf import constants as K
from memtune.perf.step import (
    SHAPE_KNOBS,
    Priced,
    StepPrediction,
    StepPricer,
    Throughput,
    throughput_of,
)
from memtune.plan.bound import BOUND_SLACK, Bounds, passed_over
from memtune.plan.fast import FastEstimator
from memtune.plan.space import (
    Group,
    Space,
    changes_of,
    default_space,
    layouts,
    pruned,
    pruned_layout,
    unsplittable,
)


def step_price(checked: CheckedJob) -> Throughput:
    """What ``plan`` ranks by: the step model of the gated job exactly as it would run,
    bounded like ``estimate`` (``memtune bench plan --accuracy`` scores this same function;
    the search's own prices, made with a ``StepPricer`` that reuses prices across layouts,
    equal it: ``tests/plan/test_fast.py``)."""
    return throughput_of(checked.derived)


@dataclass
class Scored:
    """A candidate that fits: its memory, the least step time the step model can give it, and
    the step model's price once it has been priced."""

    candidate: Knobs
    peak_bytes: int
    needed_bytes: int
    bound_s: float  # step_bound of its priced stages
    order: tuple[int, int]  # position in the enumeration: ties go to the earlier (smaller) layout
    throughput: Throughput | None = None

    @property
    def step_s(self) -> float:
        """The simulated step; infinite while unpriced or where the step was not simulated."""
        step = self.throughput.prediction if self.throughput else None
        return step.step_time_s if step else float("inf")


@dataclass
class Gated:
    """A priced candidate that passed the gate."""

    scored: Scored
    changes: list[Change]
    checked: CheckedJob

    @property
    def throughput(self) -> Throughput:
        assert self.scored.throughput is not None, "only priced candidates are gated"
        return self.scored.throughput

    def rank_key(self) -> tuple[float, tuple[int, int]]:
        """Fastest first (ties to the earlier layout); a step too long to simulate after them."""
        return (self.scored.step_s, self.scored.order)


@dataclass
class Planned:
    """A shown layout: gated, priced by the step model, estimated by ``estimate``."""

    rank: int  # 1-based position among the layouts that passed
    candidate: Knobs
    changes: list[Change]
    checked: CheckedJob
    estimate: Estimate
    bound_s: float  # the step model's lower bound the search pruned with
    relative: float  # throughput relative to the best layout
    throughput: Throughput  # the step model's price, or why the step was not simulated

    @property
    def step(self) -> StepPrediction | None:
        return self.throughput.prediction

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.step.tokens_per_s_per_gpu if self.step else 0.0

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.step.model_tflops_per_gpu if self.step else 0.0

    @property
    def step_time_s(self) -> float:
        return self.step.step_time_s if self.step else float("inf")

    @property
    def peak_bytes(self) -> int:
        return self.estimate.worst.peak_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.estimate.capacity_bytes - self.estimate.needed_bytes(self.estimate.worst)


@dataclass
class PlanResult:
    base: JobConfig
    layouts: list[Planned]
    pareto: list[Planned]
    counts: dict[str, int]
    pruned_by: dict[str, int]
    refused_by: dict[str, int]
    seconds: float
    scored: list[Scored] = field(default_factory=list)  # every candidate estimated that fits
    unsplittable_pp: tuple[
        int, ...
    ] = ()  # pipeline sizes no split of the layers serves (``space.unsplittable``)

    def tokens_per_s_per_gpu(self, step_s: float) -> float:
        """Tokens per second per GPU of a step of ``step_s`` (every layout trains the same batch
        on the same GPUs)."""
        d = derive(self.base)
        return d.global_batch_size * d.model.seq_length / step_s / d.world_size


def default_workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 8))


@dataclass
class _Work:
    """What every part of the search reads."""

    base: JobConfig
    base_d: Derived
    gbs: int
    fast: FastEstimator
    bounds: Bounds
    keep: Callable[[Knobs], bool] | None
    groups: list[Group]
    counts: Counter[str] = field(default_factory=Counter)
    pruned_by: Counter[str] = field(default_factory=Counter)
    refused_by: Counter[str] = field(default_factory=Counter)
    gated: dict[Knobs, Gated | None] = field(default_factory=dict)

    def members(self, index: int) -> Iterator[tuple[int, Knobs]]:
        """The candidates of group ``index`` that match the pins and pass arithmetic, counted."""
        group = self.groups[index]
        for position, c in enumerate(group.members):
            if self.keep is not None and not self.keep(c):
                self.counts["not matching pins"] += 1
                continue
            code = pruned(self.base_d, c, self.gbs)
            if code:
                self.pruned_by[code] += 1
                continue
            yield position, c

    def fitting(self, c: Knobs, order: tuple[int, int]) -> Scored | None:
        """The candidate's memory with the estimator's fast path, when it fits."""
        self.counts["estimated"] += 1
        if self.fast.state_exceeds(c):
            return None
        result = self.fast.evaluate(c, stop_when_over=True)
        if result.verdict != "fits":
            return None
        self.counts["fit"] += 1
        return Scored(c, result.worst.peak_bytes, result.needed_bytes, float("inf"), order)

    def price(self, s: Scored, d: Derived, priced: Priced) -> None:
        s.throughput = throughput_of(d, priced)
        self.counts["simulated" if s.throughput.prediction else "not simulated"] += 1

    def admit(self, s: Scored) -> Gated | None:
        """``s`` through the gate for advice on the real job (``memtune.check.admit``: refused
        by Megatron, or warned useless by memtune check), or None when it does not pass."""
        if s.candidate in self.gated:
            return self.gated[s.candidate]
        changes = changes_of(self.base, s.candidate)
        try:
            admission = admit(with_changes(self.base, changes), self.base)
        except InputError as exc:  # a value the schema refuses
            admission = Admission(None, exc.problems[0], refused=True)
        if admission.checked is None:
            self.refused_by[(admission.refusal or "").split(" ", 1)[0]] += 1
            self.gated[s.candidate] = None
            return None
        self.counts["checked"] += 1
        g = self.gated[s.candidate] = Gated(s, changes, admission.checked)
        return g


class _Best:
    """The ``top`` fastest priced candidates that passed the gate; a candidate is gated only when
    its price would put it among them."""

    def __init__(self, top: int, w: _Work) -> None:
        self.top, self.w = top, w
        self.kept: list[Gated] = []

    @property
    def threshold(self) -> float:
        """The step a layout must beat to enter (infinite until ``top`` have passed)."""
        return self.kept[-1].scored.step_s if len(self.kept) >= self.top else float("inf")

    def offer(self, s: Scored) -> None:
        key = (s.step_s, s.order)
        if len(self.kept) >= self.top and key >= self.kept[-1].rank_key():
            return
        g = self.w.admit(s)
        if g is None:
            return
        self.kept.append(g)
        self.kept.sort(key=Gated.rank_key)
        del self.kept[self.top :]


def search(
    base: JobConfig,
    space: Space | None = None,
    top: int = 5,
    pareto: bool = False,
    keep: Callable[[Knobs], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
) -> PlanResult:
    """Rank the layouts of ``base``'s model on its GPUs by the step model's price.

    ``progress(done, total)`` is called as layout groups are done with, in candidates.
    ``workers`` > 1 bounds the layout groups over that many forked processes (the result is the
    same).
    """
    # The search allocates millions of small objects and frees almost none of them until it
    # ends: the cyclic garbage collector's passes over them are pure cost.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _search(base, space, top, pareto, keep, progress, workers)
    finally:
        if collecting:
            gc.enable()


def _search(
    base: JobConfig,
    space: Space | None,
    top: int,
    pareto: bool,
    keep: Callable[[Knobs], bool] | None,
    progress: Callable[[int, int], None] | None,
    workers: int,
) -> PlanResult:
    start = time.perf_counter()
    base_d = derive(base)
    space = space or default_space(base_d)
    groups = list(layouts(base_d, space))
    sizes = [len(g) for g in groups]  # counted, not built
    fast = FastEstimator(base, capacity_bytes(base.cluster.gpu, base.cluster.gpu_memory_gib))
    pricer = StepPricer(get_gpu(base.cluster.gpu), K.MEGATRON_LM_LOOP, reuse=True)
    w = _Work(
        base=base,
        base_d=base_d,
        gbs=base_d.global_batch_size,
        fast=fast,
        bounds=Bounds(fast, pricer, base.peft is not None),
        keep=keep,
        groups=groups,
    )
    w.counts["enumerated"] = sum(sizes)
    # Arithmetic on a group's head refuses all of it (without pins, without building it).
    alive = []
    for index, group in enumerate(groups):
        code = pruned_layout(base_d, group.head, w.gbs)
        if code and keep is None:
            w.pruned_by[code] += sizes[index]
        elif code and keep is not None:
            kept = sum(1 for c in group.members if keep(c))
            w.counts["not matching pins"] += len(group.members) - kept
            w.pruned_by[code] += kept
        else:
            alive.append(index)
    best = _Best(top, w)
    scored: list[Scored] = []
    done = sum(sizes) - sum(sizes[i] for i in alive)
    if pareto:
        _estimate_all(w, alive, best, scored, progress, done, workers)
    else:
        _walk(w, alive, best, scored, progress, done)
    shown = [_planned(g) for g in best.kept]
    front = _frontier(w, scored, shown) if pareto else []
    best_rate = shown[0].tokens_per_s_per_gpu if shown else 1.0
    for i, p in enumerate(shown, 1):
        p.rank = i
    for p in shown + front:
        p.relative = p.tokens_per_s_per_gpu / best_rate if best_rate else 0.0
    w.counts["pruned"] = sum(w.pruned_by.values())
    return PlanResult(
        base=base,
        layouts=shown,
        pareto=front,
        counts=dict(w.counts),
        pruned_by=dict(w.pruned_by),
        refused_by=dict(w.refused_by),
        seconds=time.perf_counter() - start,
        scored=scored,
        unsplittable_pp=unsplittable(base_d, space),
    )


def _walk(
    w: _Work,
    alive: list[int],
    best: _Best,
    scored: list[Scored],
    progress: Callable[[int, int], None] | None,
    done: int,
) -> None:
    """Best first, from the least bound up, until the least bound left is above the ``top``-th
    best price: every layout left is slower than that at best. A bound is split into the next
    level's only when it is the least left: a parallel shape into its layout groups
    (``Bounds.shape``, ``Bounds.layout``), a group into its members that recompute and offload
    alike (``Bounds.alike``; those that recompute nothing take the group's own bound), those
    into their members that fit, each by its own bound, and a member is priced when its bound
    is the least left."""
    total = w.counts["enumerated"]
    shapes: dict[tuple[object, ...], list[int]] = {}
    for index in alive:
        shapes.setdefault(SHAPE_KNOBS.key(w.groups[index].head), []).append(index)
    by_shape = list(shapes.values())
    alike: list[tuple[int, list[tuple[int, Knobs]]]] = []  # a group's members whose passes are the same
    bounded: list[tuple[Scored, Derived, Priced]] = []  # members that fit, bounded, to price
    # (bound, level: 0 a shape, 1 a layout group, 2 members alike, 3 a member; index in by_shape,
    # groups, alike or bounded)
    heap = [(w.bounds.shape(w.groups[indices[0]].head), 0, n) for n, indices in enumerate(by_shape)]
    heapq.heapify(heap)
    while heap:
        bound, level, which = heap[0]
        if passed_over(bound, best.threshold):
            break
        heapq.heappop(heap)
        if level == 0:
            for index in by_shape[which]:
                heapq.heappush(heap, (w.bounds.layout(w.groups[index].head), 1, index))
        elif level == 1:
            passes: dict[tuple[object, ...], list[tuple[int, Knobs]]] = {}
            for position, c in w.members(which):
                passes.setdefault((c.recompute, c.act_offload, c.regather), []).append((position, c))
            for members in passes.values():
                c = members[0][1]
                # nothing recomputed or offloaded: the group's own corner (without LoRA)
                plain = c.recompute == Recompute() and not c.act_offload and w.base.peft is None
                heapq.heappush(heap, (bound if plain else w.bounds.alike(c), 2, len(alike)))
                alike.append((which, members))
            done += len(w.groups[which])
            if progress:
                progress(done, total)
        elif level == 2:
            for member in _fitting_members(w, *alike[which], scored):
                heapq.heappush(heap, (member[0].bound_s, 3, len(bounded)))
                bounded.append(member)
        else:
            s, d, priced = bounded[which]
            w.price(s, d, priced)
            best.offer(s)
    for _, level, which in heap:
        if level == 0:
            w.counts["bounded out"] += sum(len(w.groups[i]) for i in by_shape[which])
        elif level == 1:
            w.counts["bounded out"] += len(w.groups[which])
        elif level == 2:
            w.counts["bounded out"] += len(alike[which][1])
    if progress:
        progress(total, total)


def _fitting_members(
    w: _Work, index: int, members: list[tuple[int, Knobs]], scored: list[Scored]
) -> Iterator[tuple[Scored, Derived, Priced]]:
    """The members that fit, each with its view, its priced stages and their bound."""
    for position, c in members:
        # memory first: most members near the top do not fit, and it costs less than a bound
        s = w.fitting(c, (index, position))
        if s is None:
            continue
        scored.append(s)
        d, priced, s.bound_s = w.bounds.member(c)
        yield s, d, priced


def _estimate_all(
    w: _Work,
    alive: list[int],
    best: _Best,
    scored: list[Scored],
    progress: Callable[[int, int], None] | None,
    done: int,
    workers: int,
) -> None:
    """Every member estimated (the frontier needs every layout that fits, ``_frontier``), over
    ``workers`` forked processes; each that fits is bounded by its layout group's bound, refined
    to its own where it is looked at; the best ``top`` are priced from the least bound up."""
    scored += _fitting_all(w, alive, progress, done, workers)
    groups: dict[int, float] = {}
    for s in scored:
        index = s.order[0]
        if index not in groups:
            groups[index] = w.bounds.layout(w.groups[index].head)
        s.bound_s = groups[index]
    for s in sorted(scored, key=lambda s: (s.bound_s, s.order)):
        if passed_over(s.bound_s, best.threshold):
            break
        d, priced, s.bound_s = w.bounds.member(s.candidate)
        if passed_over(s.bound_s, best.threshold):
            continue
        w.price(s, d, priced)
        best.offer(s)


# What forked workers inherit (set by ``_fitting_all`` just before it forks).
_WORK: _Work | None = None


def _fitting_all(
    w: _Work, alive: list[int], progress: Callable[[int, int], None] | None, done: int, workers: int
) -> list[Scored]:
    """The members of the ``alive`` groups that fit, in enumeration order."""
    global _WORK  # noqa: PLW0603
    total = w.counts["enumerated"]
    # Contiguous blocks share tensor-parallel sizes, and so the estimator's cached pieces: a few
    # large blocks per worker duplicate little work between processes.
    size = 16 if workers <= 1 else max(16, -(-len(alive) // (workers * 3)))
    blocks = [alive[i : i + size] for i in range(0, len(alive), size)]
    fitting: list[Scored] = []

    def gather(block: list[int], found: _Fitting) -> None:
        nonlocal done
        fitting.extend(found[0])
        w.counts.update(found[1])
        w.pruned_by.update(found[2])
        done += sum(len(w.groups[i]) for i in block)
        if progress:
            progress(done, total)

    if workers > 1 and len(blocks) > 1:
        _WORK = w
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                for block, found in zip(blocks, pool.imap(_fitting_block, blocks), strict=True):
                    gather(block, found)
        finally:
            _WORK = None
    else:
        for block in blocks:
            gather(block, _fitting_in(w, block))
    return fitting


# A block's members that fit, and its counts and arithmetic refusals.
_Fitting = tuple[list[Scored], Counter[str], Counter[str]]


def _fitting_block(block: list[int]) -> _Fitting:
    assert _WORK is not None, "_fitting_all sets _WORK before it forks"
    return _fitting_in(_WORK, block)


def _fitting_in(w: _Work, block: list[int]) -> _Fitting:
    counted = replace(w, counts=Counter(), pruned_by=Counter())  # counts of this block alone
    found = [
        s
        for index in block
        for position, c in counted.members(index)
        if (s := counted.fitting(c, (index, position)))
    ]
    return found, counted.counts, counted.pruned_by


def _frontier(w: _Work, scored: list[Scored], shown: list[Planned]) -> list[Planned]:
    """The layouts no other layout that fits beats on both memory and the step model's price,
    among those that pass the gate: by needed memory, least first, the fastest of each size if
    it is faster than every one before; a layout is priced only where its bound could make it
    faster."""
    planned = {p.candidate: p for p in shown}
    front: list[Planned] = []
    best = float("inf")
    ordered = sorted(scored, key=lambda s: (s.needed_bytes, s.bound_s, s.order))
    for _, same in itertools.groupby(ordered, key=lambda s: s.needed_bytes):
        faster = []
        for s in same:
            if s.bound_s * (1 - BOUND_SLACK) >= best:
                continue  # its bound says it cannot be faster
            if s.throughput is None:
                d, priced, s.bound_s = w.bounds.member(s.candidate)
                if s.bound_s * (1 - BOUND_SLACK) >= best:
                    continue
                w.price(s, d, priced)
            if s.step_s < best:
                faster.append(s)
        for s in sorted(faster, key=lambda s: (s.step_s, s.order)):
            g = w.admit(s)
            if g is not None:
                p = planned.get(s.candidate) or _planned(g)
                planned[s.candidate] = p
                front.append(p)
                best = s.step_s
                break
    return front


def _planned(g: Gated) -> Planned:
    s = g.scored
    return Planned(0, s.candidate, g.changes, g.checked, estimate(g.checked), s.bound_s, 0.0, g.throughput)
