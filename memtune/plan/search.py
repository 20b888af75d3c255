"""The search behind ``memtune plan``: enumerate, prune, estimate, predict, rank, check.

1. every candidate of the space (``space.candidates``);
2. drop what arithmetic alone refuses (``space.pruned``, each with the check code that would);
3. estimate the most-loaded rank with the estimator's cached fast path (``fast``) and keep
   candidates whose verdict is ``fits`` (peak, fragmentation margin and memory outside PyTorch
   within the GPU);
4. predict throughput (``memtune.perf``) and sort, fastest first;
5. walk that order through ``memtune.check.gate`` on the real job: a candidate any check refuses
   is dropped, until ``top`` (and the Pareto frontier) are filled. Shown layouts are estimated
   again by ``memtune.estimate.estimate`` on the gated job.
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
from memtune.check import CheckedJob, gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived, derive
from memtune.config.knobs import Knobs
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate import Estimate, estimate
from memtune.perf import Prediction, PredictionMemo, predict_derived
from memtune.plan.fast import FastEstimator
from memtune.plan.space import Group, Space, default_space, layouts, pruned, pruned_layout


@dataclass
class Scored:
    candidate: Knobs
    peak_bytes: int
    needed_bytes: int
    prediction: Prediction
    order: tuple[int, int]  # position in the enumeration: ties go to the earlier (smaller) layout


@dataclass
class Planned:
    """A shown layout: gated, estimated by ``estimate`` and predicted."""

    rank: int  # 1-based position among the layouts that passed
    candidate: Knobs
    changes: list[Change]
    checked: CheckedJob
    estimate: Estimate
    prediction: Prediction
    relative: float  # throughput relative to the best layout

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
            result = fast.evaluate(c, stop_when_over=True)
            if result.verdict != "fits":
                continue
            counts["fit"] += 1
            prediction = predict_derived(fast.derived(c), w.gpu, w.memo)
            scored.append(
                Scored(c, result.worst.peak_bytes, result.needed_bytes, prediction, (index, position))
            )
    return scored, counts, pruned_by


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
        fast=FastEstimator(base, capacity_bytes(base.cluster)),
        keep=keep,
        memo=PredictionMemo(),
        gpu=get_gpu(base.cluster.gpu),
        groups=groups,
    )
    # Contiguous blocks share tensor-parallel sizes, and so the estimator's cached pieces: a few
    # large blocks per worker duplicate little work between processes.
    block = 16 if workers <= 1 else max(16, -(-len(groups) // (workers * 6)))
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

    # The search allocates millions of small objects and frees none of them until it ends: the
    # cyclic garbage collector's passes over them are pure cost, in the workers as here.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if workers > 1 and len(blocks) > 1:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                for bounds, result in zip(blocks, pool.imap(_score_block, blocks)):
                    gather(result, bounds)
        else:
            for bounds in blocks:
                gather(_score_block(bounds), bounds)
    finally:
        if collecting:
            gc.enable()
    _WORK = None
    scored.sort(key=lambda s: (-s.prediction.tokens_per_s_per_gpu, s.order))
    refused_by: Counter[str] = Counter()
    shown: list[Planned] = []
    gated: dict[Knobs, Planned | None] = {}

    def admit(s: Scored) -> Planned | None:
        if s.candidate in gated:
            return gated[s.candidate]
        changes = s.candidate.changes(base)
        try:
            checked = gate(with_changes(base, changes))
        except InputError as exc:
            refused_by[exc.problems[0].split(" ", 1)[0]] += 1
            gated[s.candidate] = None
            return None
        counts["checked"] += 1
        planned = Planned(0, s.candidate, changes, checked, estimate(checked), s.prediction, 0.0)
        gated[s.candidate] = planned
        return planned

    for s in scored:
        if len(shown) >= top:
            break
        planned = admit(s)
        if planned is not None:
            shown.append(planned)
    front: list[Planned] = []
    if pareto:
        for s in pareto_front(scored):
            planned = admit(s)
            if planned is not None:
                front.append(planned)
    best = shown[0].prediction.tokens_per_s_per_gpu if shown else 1.0
    for i, p in enumerate(shown, 1):
        p.rank = i
    for p in shown + front:
        p.relative = p.prediction.tokens_per_s_per_gpu / best
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
    )
