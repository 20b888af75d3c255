"""Lower bounds on the step model's price of the layouts ``memtune plan`` searches.

One model prices every layout, the step model (``memtune.perf.step``); the search prices only
what a lower bound on that same price cannot rule out. Every bound here is
``memtune.perf.simulate.step_bound`` (or ``spread_bound``) of stages the step model prices,
with what a whole set of layouts shares:

- a **parallel shape** (TP, CP, EP, ETP, micro-batch, SP; ``SHAPE_KNOBS``): every layout group
  of it, at every PP, VPP and split of the layers (``shape``);
- a **layout group** (a shape at one PP, VPP and split; ``space.Group``): every member of it
  (``layout``);
- the members of a group that recompute and offload activations alike, and under LoRA
  re-gather alike: their passes are the same (``alike``);
- a member (``member``).

Each rests on properties of the prices that ``tests/plan/test_prune.py`` checks on random
spaces instead of assuming them: recompute, activation offload, the LoRA adapters' re-gather and
Megatron-FSDP only add to a chunk's passes (to its kernels, its host work and where the host
waits for the GPU); the sharding and optimizer offload change only the data-parallel work (the
per-microbatch gradient add, whose gradient dtype follows the sharding, and the collectives),
the work once a step and how much of the TP collectives the device connections hide; splitting
a pass into several never makes it cheaper, on the GPU or on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memtune.config.derived import Derived
from memtune.config.knobs import Knobs, Recompute
from memtune.perf.simulate import ChunkWork, StageWork, spread_bound, step_bound
from memtune.perf.step import Priced, StepPricer, overlap_of
from memtune.plan.fast import FastEstimator

# A bound and a simulated step of the same layout add the same durations in different orders:
# a bound is taken as this much below what it says before a layout is passed over.
BOUND_SLACK = 1e-9


def passed_over(bound: float, threshold: float) -> bool:
    """Whether a layout bounded by ``bound`` is slower than ``threshold`` at best."""
    return bound * (1 - BOUND_SLACK) > threshold


@dataclass
class Bounds:
    """The bounds of the layouts of one job; views come from the search's ``fast`` path and
    prices from its ``pricer``, so the bounds share what the search caches."""

    fast: FastEstimator
    pricer: StepPricer
    lora: bool  # the job trains LoRA adapters

    def corners(self, head: Knobs) -> list[Knobs]:
        """The members of ``head``'s layout group with the cheapest passes: nothing recomputed or
        offloaded, under LoRA with and without re-gather (recompute turns re-gather off, so
        either corner bounds a member that recomputes). DDP: Megatron-FSDP keeps more than one
        device connection, and so hides less of the TP collectives."""
        corner = replace(
            head, recompute=Recompute(), sharding="ddp", offload=0.0, act_offload=0, regather=False
        )
        if self.lora and head.sp and head.tp > 1:
            return [corner, replace(corner, regather=True)]
        return [corner]

    def shape(self, head: Knobs) -> float:
        """Every member of every layout group of ``head``'s parallel shape: the passes of one
        chunk holding the whole model, spread evenly over the stages (``spread_bound``), for
        the cheaper corner. The microbatches per stage, GBS x TP x CP / (MBS x GPUs), are the
        same at every PP."""
        bounds = []
        for corner in self.corners(head):
            d = self.fast.derived(corner)
            whole = self.pricer.whole_model(d)
            bounds.append(spread_bound(whole, d.num_microbatches, d.pp, overlap_of(d)))
        return min(bounds)

    def layout(self, head: Knobs) -> float:
        """Every member of ``head``'s layout group: its corners' passes."""
        return self._passes(self.corners(head))

    def alike(self, c: Knobs) -> float:
        """Every member of ``c``'s layout group that recomputes, offloads activations and
        re-gathers as ``c`` does: their passes, which are the same."""
        return self._passes([replace(c, sharding="ddp", offload=0.0)])

    def member(self, c: Knobs) -> tuple[Derived, Priced, float]:
        """``c`` itself: its view, its stages as the step model prices them, and their bound."""
        d = self.fast.derived(c)
        priced = self.pricer.price(d)
        return d, priced, step_bound(priced.stages, priced.num_microbatches, priced.overlap)

    def _passes(self, corners: list[Knobs]) -> float:
        """The bound of the corners' stages, field by field the least of them, without the
        data-parallel collectives and the optimizer step."""
        priced = [self.pricer.price(self.fast.derived(c), data_parallel=False) for c in corners]
        if len(priced) == 1:  # one corner is its own least
            return step_bound(priced[0].stages, priced[0].num_microbatches, priced[0].overlap)
        least: dict[tuple[int, ...], StageWork] = {}  # ranks that build the same chunks share a StageWork
        stages = []
        for works in zip(*(p.stages for p in priced), strict=True):
            key = tuple(id(work) for work in works)
            stage = least.get(key)
            if stage is None:
                stage = least[key] = _least_stage(works)
            stages.append(stage)
        return step_bound(stages, priced[0].num_microbatches, priced[0].overlap)


def _least_stage(works: tuple[StageWork, ...]) -> StageWork:
    """A stage no slower in any field than each of ``works``, without an optimizer step."""
    least: dict[tuple[int, ...], ChunkWork] = {}
    chunks = []
    for chunk in zip(*(w.chunks for w in works), strict=True):
        key = tuple(id(work) for work in chunk)
        if key not in least:
            least[key] = _least_chunk(chunk)
        chunks.append(least[key])
    return StageWork(tuple(chunks), min(w.send_s for w in works), 0.0)


def _least_chunk(works: tuple[ChunkWork, ...]) -> ChunkWork:
    if len(works) == 1:
        return works[0]
    return ChunkWork(
        forward_s=min(w.forward_s for w in works),
        backward_s=min(w.backward_s for w in works),
        tp_forward_s=min(w.tp_forward_s for w in works),
        tp_backward_s=min(w.tp_backward_s for w in works),
        tp_backward_blocking_s=min(w.tp_backward_blocking_s for w in works),
        ep_forward_s=min(w.ep_forward_s for w in works),
        ep_backward_s=min(w.ep_backward_s for w in works),
        output_wgrad_s=min(w.output_wgrad_s for w in works),
        forward_host_s=min(w.forward_host_s for w in works),
        backward_host_s=min(w.backward_host_s for w in works),
        forward_syncs=all(w.forward_syncs for w in works),
        backward_syncs=all(w.backward_syncs for w in works),
    )
