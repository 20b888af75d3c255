"""The search prunes with a lower bound on the step model's own price: it finds exactly what
pricing every layout that fits would find, on random small search spaces."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, replace

import pytest

from memtune.catalog.gpus import capacity_bytes, get_gpu
from memtune.check import admit, gate
from memtune.config.changes import with_changes
from memtune.config.derived import derive
from memtune.config.knobs import Knobs
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.perf import constants as K
from memtune.perf.simulate import step_bound
from memtune.perf.step import StepPricer, throughput_of
from memtune.plan.bound import Bounds
from memtune.plan.fast import FastEstimator
from memtune.plan.query import Query, base_job
from memtune.plan.search import search
from memtune.plan.space import Space, changes_of, default_space, layouts, pruned

TOP = 5
MAX_CANDIDATES = 400  # per space: pricing every one that fits takes about 1 ms each

# Small models of each kind the planner meets: dense GQA, MoE with grouped experts, MLA with
# a dense first layer and shared experts, Mixtral-like.
MODELS = {
    "llama3-8b": (),
    "qwen3-30b-a3b": (),
    "deepseek-v2-lite": ("model.moe_layer_freq=[0,1,1,1]",),
    "mixtral-8x7b": (),
}


def _subset(rng: random.Random, values: tuple, keep: int) -> tuple:
    return tuple(sorted(rng.sample(values, min(keep, len(values)))))


def _random_space(rng: random.Random) -> tuple[JobConfig, Space]:
    """A small job (4 layers, a short sequence, a GPU of a few GiB so that memory rules out
    some layouts) and a random slice of its search space."""
    while True:
        model = rng.choice(sorted(MODELS))
        gpus = rng.choice([2, 4, 8])
        seq = rng.choice([512, 1024])
        mode = rng.choice(["pretrain", "pretrain", "lora"])
        overrides = (
            "model.num_layers=4",
            f"cluster.gpu_memory_gib={rng.choice([6, 10, 16, 24])}",
            *MODELS[model],
        )
        query = Query(
            model, gpus, "H100-80GB", 8, seq, gpus * rng.choice([2, 4, 8]), mode, overrides=overrides
        )
        try:
            base = base_job(query)
        except InputError:
            continue
        full = default_space(derive(base))
        space = Space(
            tp=_subset(rng, full.tp, 2),
            pp=_subset(rng, full.pp, 2),
            vpp=tuple(sorted({1, *_subset(rng, full.vpp, 1)})),
            cp=(1,),
            ep=_subset(rng, full.ep, 2),
            mbs=_subset(rng, full.mbs, 2),
            sharding=full.sharding,
            offload=_subset(rng, full.offload, 1),
        )
        if sum(len(group) for group in layouts(derive(base), space)) <= MAX_CANDIDATES:
            return base, space


@dataclass(frozen=True)
class Priced:
    candidate: Knobs
    step_s: float
    needed_bytes: int
    order: tuple[int, int]


def _exhaustive(base: JobConfig, space: Space) -> list[Priced]:
    """Every candidate that fits, priced by the step model with nothing reused, in the search's
    enumeration order."""
    d = derive(base)
    fast = FastEstimator(base, capacity_bytes(base.cluster.gpu, base.cluster.gpu_memory_gib))
    out = []
    for index, group in enumerate(layouts(d, space)):
        for position, c in enumerate(group.members):
            if pruned(d, c, d.global_batch_size):
                continue
            result = fast.evaluate(c)
            if result.verdict != "fits":
                continue
            step = throughput_of(d.with_knobs(c)).prediction
            assert step is not None
            out.append(Priced(c, step.step_time_s, result.needed_bytes, (index, position)))
    return out


def _passes(base: JobConfig, c: Knobs) -> bool:
    """Whether the gate for advice admits the layout (no error, no warning the base lacks)."""
    try:
        return admit(with_changes(base, changes_of(base, c)), base).checked is not None
    except InputError:
        return False


def _best(base: JobConfig, priced: list[Priced]) -> list[tuple[Knobs, float]]:
    """The ``TOP`` fastest that pass the gate (ties to the earlier layout)."""
    passed = (p for p in sorted(priced, key=lambda p: (p.step_s, p.order)) if _passes(base, p.candidate))
    return [(p.candidate, p.step_s) for p in itertools.islice(passed, TOP)]


def _frontier(base: JobConfig, priced: list[Priced]) -> list[tuple[Knobs, float]]:
    """By needed memory, least first: the fastest of each size that passes the gate, where it is
    faster than every one before."""
    front: list[tuple[Knobs, float]] = []
    best = float("inf")
    by_memory = sorted(priced, key=lambda p: p.needed_bytes)
    for _, same in itertools.groupby(by_memory, key=lambda p: p.needed_bytes):
        for p in sorted(same, key=lambda p: (p.step_s, p.order)):
            if p.step_s < best and _passes(base, p.candidate):
                front.append((p.candidate, p.step_s))
                best = p.step_s
                break
    return front


def test_the_pruned_search_finds_what_pricing_every_layout_finds():
    """50 random small spaces: the search's best 5, found with the bound, are exactly the 5
    fastest that fit and pass the gate when every layout that fits is priced; and it prices a
    fraction of them."""
    rng = random.Random(37)
    priced_by_search = priced_all = compared = 0
    while compared < 50:
        base, space = _random_space(rng)
        priced = _exhaustive(base, space)
        if len(_best(base, priced)) < TOP:
            continue
        result = search(base, space, top=TOP)
        assert [(p.candidate, p.step_time_s) for p in result.layouts] == _best(base, priced), space
        priced_by_search += result.counts.get("simulated", 0)
        priced_all += len(priced)
        compared += 1
    assert priced_by_search < priced_all / 3


def test_the_frontier_is_the_frontier_of_every_layout_that_fits():
    rng = random.Random(41)
    compared = 0
    while compared < 8:
        base, space = _random_space(rng)
        priced = _exhaustive(base, space)
        if len(_best(base, priced)) < TOP:
            continue
        result = search(base, space, top=TOP, pareto=True)
        assert [(p.candidate, p.step_time_s) for p in result.pareto] == _frontier(base, priced), space
        assert [(p.candidate, p.step_time_s) for p in result.layouts] == _best(base, priced), space
        compared += 1


@pytest.mark.parametrize("seed", range(4))
def test_each_level_of_the_bound_is_below_the_next(seed):
    """A parallel shape's bound is below each of its layout groups', a group's below that of
    each set of its members that recompute alike, that below each member's own, and a
    member's below its simulated step (recompute, offload, Megatron-FSDP and the data-parallel
    collectives only add time)."""
    rng = random.Random(seed)
    base, space = _random_space(rng)
    d = derive(base)
    fast = FastEstimator(base, capacity_bytes(base.cluster.gpu, base.cluster.gpu_memory_gib))
    bounds = Bounds(
        fast, StepPricer(get_gpu(base.cluster.gpu), K.MEGATRON_LM_LOOP, reuse=True), base.peft is not None
    )
    checked = 0
    gbs = d.global_batch_size
    for group in layouts(d, space):
        if pruned(d, group.head, gbs):
            continue
        shape, layout = bounds.shape(group.head), bounds.layout(group.head)
        assert shape <= layout * (1 + 1e-12)
        for c in group.members:
            if pruned(d, c, gbs):
                continue
            _, priced, own = bounds.member(c)
            alike = bounds.alike(c)
            assert layout <= alike * (1 + 1e-12) and alike <= own * (1 + 1e-12), c.label()
            step = throughput_of(d.with_knobs(c)).prediction
            assert step is not None and own <= step.step_time_s * (1 + 1e-12), c.label()
            assert own == step_bound(priced.stages, priced.num_microbatches, priced.overlap)
            checked += 1
    assert checked >= 20


def test_long_schedules_of_published_layouts_are_priced():
    """NVIDIA's Qwen3-235B-A22B on 256 H100s (TP2 PP32 VPP3 EP8 ETP1, GBS 2048, the embedding
    and the loss counted as layers): 98,304 forward and backward passes, priced from the few
    periods placed, and the same step as placing all of them."""
    base = base_job(Query("qwen3-235b-a22b", 256, "H100-80GB", 8, 4096, 2048, "pretrain"))
    job = with_changes(
        base,
        changes_of(
            base,
            replace(
                derive(base).knobs,
                tp=2,
                pp=32,
                vpp=3,
                ep=8,
                etp=1,
                sp=True,
                split="accounted",
                sharding="distopt",
            ),
        ),
    )
    d = gate(job).derived
    throughput = throughput_of(d)
    assert throughput.prediction is not None, throughput.not_simulated
    sim = throughput.prediction.simulated
    assert 2 * d.pp * d.vpp * d.num_microbatches == 98_304 and sim.placed < 50_000
    from memtune.perf.step import predict_step

    full = predict_step(d, record_events=True).simulated
    assert sim.step_s == pytest.approx(full.step_s, rel=1e-9)
    assert sim.stage_compute_s == pytest.approx(full.stage_compute_s, rel=1e-9)
