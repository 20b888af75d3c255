"""The search behind ``memtune plan``: enumerate, prune, estimate, predict, rank, check.

1. every candidate of the space (``space.candidates``);
2. drop what arithmetic alone refuses (``space.pruned``, each with the check code that would);
3. estimate the most-loaded rank with the estimator's cached fast path (``fast``) and keep
   candidates whose verdict is ``fits`` (peak, fragmentation margin and memory outside PyTorch
   within the GPU);
4. predict throughput with the fast analytic model (``memtune.perf.predict_derived``) and sort,
   fastest first: the pruning pass;
5. walk that order through the gate for advice (``memtune.check.admit``) on the real job (a candidate any check refuses or warns useless
   is dropped) until ``RESCORED_CANDIDATES`` (at least ``top``) have passed, then add the best
   that passes of every TP size not among them;
6. price those with the step model (``step_price``: ``memtune.perf.step.throughput_of`` of the
   gated job, bounded like ``estimate``) and order them by it; the first ``top`` are shown,
   estimated again by ``memtune.estimate.estimate`` on the gated job.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from memtune.catalog.gpus import GPU, capacity_bytes, get_gpu
from memtune.check import Admission, CheckedJob
from memtune.check import admit as admit_change
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived, derive
from memtune.config.knobs import Knobs
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, estimate
from memtune.perf import Prediction, PredictionMemo, predict_derived
from memtune.perf.step import StepPrediction, Throughput, throughput_of
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


@dataclass
class Scored:
    candidate: Knobs
    peak_bytes: int
    needed_bytes: int
    prediction: Prediction
    order: tuple[int, int]  # position in the enumeration: ties go to the earlier (smaller) layout


# How many of the analytic model's best candidates (that pass the gate) the step model re-prices,
# besides the best of each TP size not among them. Its simulation costs about 1 us per forward
# or backward pass it places, 0.005-0.1 CPU-s per layout of a 1,024-GPU job: 32 cost about
# 0.7 CPU-s there. Re-pricing the analytic top 64 of three searches put the step model's best at
# analytic positions 6 (Llama 3.1 405B, 1,024 H100s), 17 (Llama 3 70B, 64) and 60 (Qwen3-30B-A3B,
# 16; docs/plan.md): 16 would miss the second, 32 finds both dense ones. The best of each TP size
# found what the top 32 missed for Llama 3 70B LoRA on 8 GPUs (TP 1 at analytic position 449,
# 15% faster by the step model than the top 32's best) and Llama 3 70B on 64 (TP 1, 3%).
RESCORED_CANDIDATES = 32


def step_price(checked: CheckedJob) -> Throughput:
    """What ``plan`` ranks by: the step model of the gated job exactly as it would run,
    bounded like ``estimate`` (``memtune bench plan --accuracy`` scores this same function)."""
    return throughput_of(checked.derived)


@dataclass
class Gated:
    """A candidate that passed the gate, priced by the step model."""

    scored: Scored
    changes: list[Change]
    checked: CheckedJob
    throughput: Throughput

    def rank_key(self) -> tuple[bool, float, tuple[int, int]]:
        """Simulated steps first, fastest first (ties to the earlier layout); a step too long to
        simulate keeps its analytic figure, after them."""
        step = self.throughput.prediction
        return (step is None, -(step or self.scored.prediction).tokens_per_s_per_gpu, self.scored.order)


@dataclass
class Planned:
    """A shown layout: gated, priced by the step model, estimated by ``estimate``."""

    rank: int  # 1-based position among the layouts that passed
    candidate: Knobs
    changes: list[Change]
    checked: CheckedJob
    estimate: Estimate
    prediction: Prediction  # the analytic model's (the pruning pass)
    relative: float  # throughput relative to the best layout
    throughput: Throughput  # the step model's, or why it was not simulated

    @property
    def step(self) -> StepPrediction | None:
        return self.throughput.prediction

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """The figure the layout is ranked by: the step model's, the analytic one where the step
        was not simulated."""
        return (self.step or self.prediction).tokens_per_s_per_gpu

    @property
    def model_tflops_per_gpu(self) -> float:
        return (self.step or self.prediction).model_tflops_per_gpu

    @property
    def step_time_s(self) -> float:
        return (self.step or self.prediction).step_time_s

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
    scored: list[Scored] = field(default_factory=list)
    unsplittable_pp: tuple[
        int, ...
    ] = ()  # pipeline sizes no split of the layers serves (``space.unsplittable``)


def pareto_front(items: list[Scored]) -> list[Scored]:
    """Layouts no other layout beats on both peak memory and throughput."""
    front: list[Scored] = []
    best = -1.0
    for s in sorted(items, key=lambda s: (s.needed_bytes, -s.prediction.tokens_per_s_per_gpu)):
        if s.prediction.tokens_per_s_per_gpu > best:
            front.append(s)
            best = s.prediction.tokens_per_s_per_gpu
    return front


@dataclass
class _Work:
    """What every block of the search reads."""

    base_d: Derived
    gbs: int
    fast: FastEstimator
    keep: Callable[[Knobs], bool] | None
    memo: PredictionMemo
    gpu: GPU
    groups: list[Group]


# What forked workers inherit (set by ``search`` just before it forks).
_WORK: _Work | None = None

# A block's scored layouts, candidates counted by stage, and pruned candidates by check code.
BlockResult = tuple[list[Scored], Counter[str], Counter[str]]


def _score_block(bounds: tuple[int, int]) -> BlockResult:
    """Prune, estimate and predict the layout groups ``bounds`` of the enumeration."""
    w = _WORK
    assert w is not None, "search sets _WORK before scoring blocks"
    base_d, gbs, fast, keep = w.base_d, w.gbs, w.fast, w.keep
    counts: Counter[str] = Counter()
    pruned_by: Counter[str] = Counter()
    scored: list[Scored] = []
    for index in range(*bounds):
        group = w.groups[index]
        code = pruned_layout(base_d, group.head, gbs)
        if code and keep is None:
            size = len(group)
            counts["enumerated"] += size
            pruned_by[code] += size
            continue
        members = group.members
        counts["enumerated"] += len(members)
        if keep is not None:
            kept = [c for c in members if keep(c)]
            counts["not matching pins"] += len(members) - len(kept)
            members = kept
        if not members:
            continue
        if code:
            pruned_by[code] += len(members)
            continue
        for position, c in enumerate(members):
            code = pruned(base_d, c, gbs)
            if code:
                pruned_by[code] += 1
                continue
            counts["estimated"] += 1
            if fast.state_exceeds(c):
                continue
            result = fast.evaluate(c, stop_when_over=True)
            if result.verdict != "fits":
                continue
            counts["fit"] += 1
            prediction = predict_derived(fast.derived(c), w.gpu, w.memo)
            scored.append(
                Scored(c, result.worst.peak_bytes, result.needed_bytes, prediction, (index, position))
            )
    return scored, counts, pruned_by


# The gated jobs ``search`` prices by the step model (set just before it forks).
_PRICED: list[CheckedJob] = []


def _price(index: int) -> Throughput:
    return step_price(_PRICED[index])


def default_workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 8))


def search(
    base: JobConfig,
    space: Space | None = None,
    top: int = 5,
    pareto: bool = False,
    keep: Callable[[Knobs], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
) -> PlanResult:
    """Rank the layouts of ``base``'s model on its GPUs by predicted throughput.

    ``workers`` > 1 forks that many processes over blocks of layouts (the result is the same);
    ``progress(done, total)`` is called as blocks finish, in candidates.
    """
    # The search allocates millions of small objects and frees almost none of them until it
    # ends: the cyclic garbage collector's passes over them are pure cost, in the workers as
    # here, and they slow the step model's simulations after the memory pass twofold.
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
    # A module global, not an argument: forked workers inherit it instead of unpickling it per block.
    global _WORK  # noqa: PLW0603
    _WORK = _Work(
        base_d=base_d,
        gbs=base_d.global_batch_size,
        fast=FastEstimator(base, capacity_bytes(base.cluster.gpu, base.cluster.gpu_memory_gib)),
        keep=keep,
        memo=PredictionMemo(),
        gpu=get_gpu(base.cluster.gpu),
        groups=groups,
    )
    # Contiguous blocks share tensor-parallel sizes, and so the estimator's cached pieces: a few
    # large blocks per worker duplicate little work between processes.
    block = 16 if workers <= 1 else max(16, -(-len(groups) // (workers * 3)))
    blocks = [(i, min(i + block, len(groups))) for i in range(0, len(groups), block)]
    total = sum(sizes)
    counts: Counter[str] = Counter()
    pruned_by: Counter[str] = Counter()
    scored: list[Scored] = []
    done = 0

    def gather(result: BlockResult, bounds: tuple[int, int]) -> None:
        nonlocal done
        scored.extend(result[0])
        counts.update(result[1])
        pruned_by.update(result[2])
        done += sum(sizes[bounds[0] : bounds[1]])
        if progress:
            progress(done, total)

    if workers > 1 and len(blocks) > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for bounds, result in zip(blocks, pool.imap(_score_block, blocks)):
                gather(result, bounds)
    else:
        for bounds in blocks:
            gather(_score_block(bounds), bounds)
    _WORK = None
    scored.sort(key=lambda s: (-s.prediction.tokens_per_s_per_gpu, s.order))
    refused_by: Counter[str] = Counter()
    gated: dict[Knobs, Gated | None] = {}

    def checked_of(s: Scored) -> tuple[list[Change], CheckedJob] | None:
        """``s`` through the gate for advice (refused by Megatron, or warned useless by memtune
        check), or None when it does not pass."""
        changes = changes_of(base, s.candidate)
        try:
            admission = admit_change(with_changes(base, changes), base)
        except InputError as exc:  # a value the schema refuses
            admission = Admission(None, exc.problems[0], refused=True)
        if admission.checked is None:
            refused_by[(admission.refusal or "").split(" ", 1)[0]] += 1
            gated[s.candidate] = None
            return None
        counts["checked"] += 1
        return changes, admission.checked

    def admitted(s: Scored, changes: list[Change], checked: CheckedJob, throughput: Throughput) -> Gated:
        counts["simulated" if throughput.prediction else "not simulated"] += 1
        g = gated[s.candidate] = Gated(s, changes, checked, throughput)
        return g

    def admit(s: Scored) -> Gated | None:
        """``s`` gated and priced by the step model, or None when a check refuses it."""
        if s.candidate in gated:
            return gated[s.candidate]
        passed = checked_of(s)
        return None if passed is None else admitted(s, *passed, step_price(passed[1]))

    # The best that pass the gate, priced by the step model: over the workers, each simulation
    # being independent (forked workers inherit the gated jobs; only the prices come back).
    chosen: list[tuple[Scored, list[Change], CheckedJob]] = []
    for s in scored:
        if len(chosen) >= max(top, RESCORED_CANDIDATES):
            break
        if (passed := checked_of(s)) is not None:
            chosen.append((s, *passed))
    # and the analytic best of every TP size that has none among them (the analytic model's TP
    # communication is its crudest term)
    sizes_seen = {s.candidate.tp for s, _, _ in chosen}
    for s in scored:
        if s.candidate.tp in sizes_seen or s.candidate in gated:  # gated: refused above
            continue
        if (passed := checked_of(s)) is not None:
            chosen.append((s, *passed))
            sizes_seen.add(s.candidate.tp)
    global _PRICED  # noqa: PLW0603
    _PRICED = [checked for _, _, checked in chosen]
    try:
        if workers > 1 and len(chosen) > 1:
            with multiprocessing.get_context("fork").Pool(min(workers, len(chosen))) as pool:
                prices = pool.map(_price, range(len(chosen)))
        else:
            prices = [_price(i) for i in range(len(chosen))]
    finally:
        _PRICED = []
    rescored = [
        admitted(s, changes, checked, price)
        for (s, changes, checked), price in zip(chosen, prices, strict=True)
    ]
    rescored.sort(key=Gated.rank_key)
    planned: dict[Knobs, Planned] = {}

    def shown_as(g: Gated) -> Planned:
        p = planned.get(g.scored.candidate)
        if p is None:
            s = g.scored
            p = planned[s.candidate] = Planned(
                0, s.candidate, g.changes, g.checked, estimate(g.checked), s.prediction, 0.0, g.throughput
            )
        return p

    shown = [shown_as(g) for g in rescored[:top]]
    front: list[Planned] = []
    if pareto:
        # The analytic model's frontier over every layout that fits, gated, priced by the step
        # model and filtered again by that price: what it shows is a frontier of what it shows.
        priced = [shown_as(g) for s in pareto_front(scored) if (g := admit(s)) is not None]
        best_rate = -1.0
        for p in sorted(
            priced, key=lambda p: (p.estimate.needed_bytes(p.estimate.worst), -p.tokens_per_s_per_gpu)
        ):
            if p.tokens_per_s_per_gpu > best_rate:
                front.append(p)
                best_rate = p.tokens_per_s_per_gpu
    best = shown[0].tokens_per_s_per_gpu if shown else 1.0
    for i, p in enumerate(shown, 1):
        p.rank = i
    for p in shown + front:
        p.relative = p.tokens_per_s_per_gpu / best
    counts["pruned"] = sum(pruned_by.values())
    return PlanResult(
        base=base,
        layouts=shown,
        pareto=front,
        counts=dict(counts),
        pruned_by=dict(pruned_by),
        refused_by=dict(refused_by),
        seconds=time.perf_counter() - start,
        scored=scored,
        unsplittable_pp=unsplittable(base_d, space),
    )
