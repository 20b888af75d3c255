"""One training iteration, simulated event by event on every pipeline stage, and a lower bound
on its step time that places nothing.

Each stage runs its forwards and backwards in exactly the order Megatron-Core's schedules do
(``megatron/core/pipeline_parallel/schedules.py``: 1F1B, or the interleaved schedule with its
warm-up of ``2 (p - r - 1) + (v - 1) N`` forwards, steady one-forward-one-backward phase and
cool-down; the order itself comes from :mod:`memtune.estimate.schedule`). A forward of virtual
stage ``s`` waits for stage ``s - 1``'s output to arrive, a backward for stage ``s + 1``'s
gradient; the last virtual stage turns its forward around. Communication sits on its stream
and is hidden behind compute only where the job's settings make Megatron do so
(:class:`Overlap`, each rule citing the code that implements it). Step time, bubble and
per-stage idle time come out of the simulation; nothing is a fixed fraction.

Durations come in per virtual chunk and microbatch (:class:`ChunkWork`): the caller prices
compute and collectives (``memtune/perf/step.py``); this module only places them. The parts:

- a chunk's pass (:meth:`_Iteration.place`): its compute, the communication left exposed, the
  send of its output; it starts once the stage's host has issued its first kernel and ends once
  the host has issued its last: the host runs ahead of the GPU from pass to pass until a pass
  makes it wait for the GPU (MoE dispatch, batched pipeline exchanges);
- the schedule (:meth:`_Iteration.run`): every stage walks its order as far as its inputs allow;
  a long steady phase repeats itself exactly, and is skipped once it does (:meth:`_Iteration.skip`,
  so a step of any length is priced in bounded time);
- the flush (:meth:`_Iteration.flush`): deferred weight gradients and the gradient reduction;
  then every stage's optimizer step after the slowest (:meth:`_Iteration.finish`);
- :func:`step_bound`: a lower bound on :func:`simulate`'s step from the same durations, which
  ``memtune plan`` prunes with.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

from memtune.errors import InputError
from memtune.estimate.schedule import warmup_count
from memtune.limits import MAX_SIMULATED_OPERATIONS


@dataclass(frozen=True)
class ChunkWork:
    """One microbatch through one model chunk of a stage, in seconds (the DP terms once a step)."""

    forward_s: float  # compute
    backward_s: float  # dgrad + wgrad compute (the output layer's wgrad included)
    tp_forward_s: float = 0.0  # tensor-parallel collectives of the forward
    tp_backward_s: float = 0.0
    # TP collectives of the backward issued synchronously, which nothing hides (LoRA adapters' own)
    tp_backward_blocking_s: float = 0.0
    ep_forward_s: float = 0.0  # expert-parallel dispatch + combine of the forward
    ep_backward_s: float = 0.0
    output_wgrad_s: float = 0.0  # the output layer's weight-gradient GEMM (post-process chunk)
    grad_reduce_s: float = 0.0  # data-parallel reduction of this chunk's gradients
    param_gather_s: float = 0.0  # data-parallel all-gather of its parameters (distributed optimizer)
    buckets: int = 1  # DDP buckets the two DP collectives are split into
    # Megatron-FSDP's per-microbatch gathers and reduce-scatters its compute leaves exposed, per
    # forward and per backward (memtune/perf/sharding.py)
    dp_forward_exposed_s: float = 0.0
    dp_backward_exposed_s: float = 0.0
    # The host's launch work for the pass (Python, kernel launches): it runs ahead of the GPU,
    # across passes too, so a pass ends when its kernels have run and the host has issued them.
    forward_host_s: float = 0.0
    backward_host_s: float = 0.0
    # The pass makes the host wait for the GPU (MoE dispatch): the host cannot run ahead of it,
    # and its host side already counts its waits (perf/step.py).
    forward_syncs: bool = False
    backward_syncs: bool = False


@dataclass(frozen=True)
class StageWork:
    chunks: tuple[ChunkWork, ...]  # one per virtual stage
    send_s: float  # one boundary tensor to the next stage (the gradient back costs the same)
    optimizer_s: float


@dataclass(frozen=True)
class Overlap:
    """Which communication Megatron hides, from the job's settings."""

    # DDP's bucketed reduce-scatter/all-reduce starts while the last backward of a chunk still
    # runs (param_and_grad_buffer.py, grad sync enabled on the last microbatch only).
    overlap_grad_reduce: bool = False
    # The next step's parameter all-gather runs during the forwards, bucket by bucket
    # (forward pre-hooks); without it the gather follows the optimizer step on the critical path.
    overlap_param_gather: bool = False
    # All chunks' gathers are issued at the start instead of by the previous chunk's first forward.
    align_param_gather: bool = False
    # Expert all-to-alls of one microbatch run under the compute of another in the steady
    # one-forward-one-backward phase (combined 1F1B); needs CUDA_DEVICE_MAX_CONNECTIONS > 1
    # (megatron/core/transformer/moe/README.md, "Requirements for EP A2A Overlap").
    overlap_moe_expert_parallel_comm: bool = False
    # With the above, the backward dispatch also hides behind the delayed weight gradients.
    delay_wgrad_compute: bool = False
    # Output-layer wgrad GEMMs of this many microbatches move to the pipeline flush on the last
    # stage (defer_embedding_wgrad_compute; Derived.deferred_wgrad_microbatches).
    deferred_output_wgrad_microbatches: int = 0
    # P2P sends do not block the sending stage (overlap_p2p_comm; batched blocking P2P otherwise).
    overlap_p2p_comm: bool = False
    # CUDA_DEVICE_MAX_CONNECTIONS=1: the column-parallel layers' backward all-gather and
    # reduce-scatter are queued ahead of the dgrad/wgrad GEMMs and run under them
    # (megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication).
    single_device_connection: bool = True
    # Every pass makes the host wait for the GPU: batched pipeline exchanges synchronize the
    # device (Derived.pipeline_p2p_syncs_host), so the host cannot run ahead across passes.
    pipeline_syncs_host: bool = False
    # Each stage runs alone: every pass's input is there at once, as for one rank measured under
    # PyTorch's fake process group (its pipeline exchanges complete without moving data).
    stages_alone: bool = False

    @property
    def paired(self) -> bool:
        """Whether steady-phase forward/backward pairs run as combined 1F1B pairs."""
        return self.overlap_moe_expert_parallel_comm and not self.single_device_connection


class Event(NamedTuple):
    """One interval of a stage's timeline (a tuple: a step places up to 10^5 of them)."""

    stage: int
    stream: str  # "compute" (the stage's timeline) or "dp" (the data-parallel stream)
    kind: str  # forward, backward, exposed comm, send, output wgrad, grad reduce, param gather, optimizer
    microbatch: int  # -1 where none
    chunk: int  # -1 where none
    start: float
    end: float


@dataclass(frozen=True)
class Simulated:
    step_s: float
    stage_compute_s: tuple[float, ...]  # passes (host-bound time included), deferred wgrad, optimizer
    stage_optimizer_s: tuple[float, ...]  # of which the optimizer step
    stage_exposed_comm_s: tuple[float, ...]  # communication on the stage's critical path
    stage_idle_s: tuple[float, ...]  # waiting: the pipeline bubble and waits for the slowest stage
    events: tuple[Event, ...]  # every placed pass, when the simulation was asked to record them
    placed: int = 0  # forward and backward passes placed; the rest repeated a steady period exactly

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the step on the busiest stage (the least idle one)."""
        return min(self.stage_idle_s) / self.step_s if self.step_s else 0.0


Op = tuple[str, int, int]  # ("F" | "B", microbatch, chunk)


def stage_order(
    pp: int, chunks: int, num_microbatches: int, group: int, pp_rank: int, combined: bool = False
) -> list[list[Op]]:
    """The operations of one stage in Megatron-Core's order; steady-phase forward/backward pairs
    are grouped (they are what combined 1F1B overlaps). ``combined`` (EP all-to-all overlap)
    runs one more warm-up forward so that the two halves of every pair are independent
    (schedules.py, get_pp_rank_microbatches)."""
    order = _Order(pp, chunks, num_microbatches, group, pp_rank, combined, paired=True)
    return [list(order.step(i)) for i in range(order.length)]


def _warmup(pp: int, chunks: int, num_microbatches: int, group: int, pp_rank: int, combined: bool) -> int:
    return min(
        warmup_count(pp, chunks, num_microbatches, group, pp_rank) + combined, num_microbatches * chunks
    )


def simulated_operations(stages: int, chunks: int, num_microbatches: int) -> int:
    """Forward and backward passes of one step; a simulation that skips repeated steady periods
    places fewer (``Simulated.placed``)."""
    return 2 * stages * chunks * num_microbatches


class _Order:
    """One stage's steps in Megatron-Core's order (:func:`stage_order`), computed by position
    from the interleaved forward order (``memtune/estimate/schedule.py`` ``forward_order``)
    without building it: a long schedule's skipped periods are never listed. ``paired`` keeps
    steady-phase pairs as one step (combined 1F1B); otherwise every operation is a step of its
    own, waiting for its own input only."""

    def __init__(
        self,
        pp: int,
        chunks: int,
        num_microbatches: int,
        group: int,
        pp_rank: int,
        combined: bool,
        paired: bool,
    ) -> None:
        self.chunks, self.m, self.group = chunks, num_microbatches, group
        self.total = num_microbatches * chunks
        self.warmup = _warmup(pp, chunks, num_microbatches, group, pp_rank, combined)
        self.paired = paired
        # paired: the warm-up forwards, the steady pairs, the cool-down backwards; else each alone
        self.length = self.total + self.warmup if paired else 2 * self.total

    def forward(self, k: int) -> Op:
        """The ``k``-th forward of the interleaved order: groups of ``group`` microbatches, chunk
        by chunk (the last group may be smaller)."""
        g, v = self.group, self.chunks
        full = self.m // g
        if k < full * g * v:
            block, within = divmod(k, g * v)
            chunk, j = divmod(within, g)
            return ("F", block * g + j, chunk)
        chunk, j = divmod(k - full * g * v, self.m - full * g)
        return ("F", full * g + j, chunk)

    def backward(self, k: int) -> Op:
        _, mb, chunk = self.forward(k)
        return ("B", mb, self.chunks - 1 - chunk)

    def step(self, i: int) -> tuple[Op, ...]:
        w, total = self.warmup, self.total
        if i < w:
            return (self.forward(i),)
        if self.paired:
            if i < total:
                return (self.forward(i), self.backward(i - w))
            return (self.backward(i - w),)
        if i < 2 * total - w:
            k, second = divmod(i - w, 2)
            return (self.backward(k),) if second else (self.forward(w + k),)
        return (self.backward(i - total),)

    def steps(self, start: int, stop: int) -> tuple[tuple[Op, ...], ...]:
        return tuple(self.step(i) for i in range(start, min(stop, self.length)))


@functools.lru_cache(maxsize=1024)
def _order_window(
    pp: int, chunks: int, num_microbatches: int, group: int, pp_rank: int, paired: bool, start: int, stop: int
) -> tuple[tuple[Op, ...], ...]:
    """Positions ``start`` to ``stop`` of a stage's order as the simulation walks it. Cached: a
    plan prices dozens of layouts with a handful of schedules between them, each walked in the
    same windows."""
    return _Order(pp, chunks, num_microbatches, group, pp_rank, paired, paired).steps(start, stop)


def simulate(
    stages: list[StageWork],
    num_microbatches: int,
    group: int,
    overlap: Overlap,
    record_events: bool = False,
    max_passes: int = MAX_SIMULATED_OPERATIONS,
) -> Simulated:
    """Simulate one iteration; ``group`` is ``microbatch_group_size_per_vp_stage`` (default PP).
    ``record_events`` keeps every placed pass for a Gantt chart (``Simulated.events``) and then
    places every pass; otherwise a steady phase that repeats itself exactly is skipped
    (:meth:`_Iteration.skip`). A step that would place more than ``max_passes`` is refused."""
    p, v, m = len(stages), len(stages[0].chunks), num_microbatches
    if record_events and simulated_operations(p, v, m) > max_passes:
        raise InputError(
            f"the step has {simulated_operations(p, v, m):,} forward and backward passes over its stages; "
            f"the simulation stops at {max_passes:,} (memtune.limits)"
        )
    iteration = _Iteration(stages, m, group, overlap, record_events, max_passes)
    if not record_events:
        iteration.run_periods()
    iteration.run()
    return iteration.finish()


class _Iteration:
    """The state of one simulated iteration: each stage's clock and position in its order, when
    each microbatch's output (forward) or input gradient (backward) of each virtual stage
    arrives, the data-parallel stream, and each stage's compute and exposed communication."""

    def __init__(
        self,
        stages: list[StageWork],
        num_microbatches: int,
        group: int,
        overlap: Overlap,
        record_events: bool,
        max_passes: int,
    ) -> None:
        p, v, m = len(stages), len(stages[0].chunks), num_microbatches
        self.stages, self.p, self.v, self.m, self.group = stages, p, v, m, group
        self.overlap, self.record, self.max_passes = overlap, record_events, max_passes
        self.last = p * v - 1
        self.orders = [_Order(p, v, m, group, r, overlap.paired, overlap.paired) for r in range(p)]
        # the part of each stage's order being walked, and the position of its first step
        self.windows: list[tuple[tuple[Op, ...], ...]] = [()] * p
        self.window_start = [0] * p
        self.position = [0] * p
        self.clock = [0.0] * p
        self.host_clock = [0.0] * p  # when each stage's host has issued everything so far
        # whether the host held a stage's GPU back (a late launch) since the last snapshot
        self.host_held = [False] * p
        self.dp_free = [0.0] * p
        self.compute = [0.0] * p
        self.exposed = [0.0] * p
        self.events: list[Event] = []
        self.placed = 0
        # Arrival times per virtual stage, by microbatch: each is written once, and every virtual
        # stage runs its microbatches in increasing order, so ``*_done[s]`` counts those written.
        # Dictionaries: a step whose steady periods repeat holds only the microbatches placed.
        self.forward_done: list[dict[int, float]] = [{} for _ in range(p * v)]
        self.backward_done: list[dict[int, float]] = [{} for _ in range(p * v)]
        self.forwards_done = [0] * (p * v)
        self.backwards_done = [0] * (p * v)
        self.backwards_left = [[m] * v for _ in range(p)]
        self.first_forward_seen = [[False] * v for _ in range(p)]
        self.gather_first = [[0.0] * v for _ in range(p)]
        self.gather_end = [[0.0] * v for _ in range(p)]
        self.grads_ready = [
            [(0.0, 0.0)] * v for _ in range(p)
        ]  # (start, length) of each chunk's last backward
        self.pass_compute, self.busy_bwd_deferred, self.host_waits, self.pass_table = _pass_tables(
            stages, overlap
        )
        self.gather_waits = overlap.overlap_param_gather
        self.sends_block = not overlap.overlap_p2p_comm
        if overlap.overlap_param_gather:
            for r in range(p):
                for chunk in range(v) if overlap.align_param_gather else range(1):
                    self.issue_gather(r, chunk, 0.0)

    # --- a chunk's pass ----------------------------------------------------------------------
    def issue_gather(self, r: int, chunk: int, at: float) -> None:
        work = self.stages[r].chunks[chunk]
        start = max(self.dp_free[r], at)
        self.gather_first[r][chunk] = start + work.param_gather_s / work.buckets
        self.gather_end[r][chunk] = self.dp_free[r] = start + work.param_gather_s
        if work.param_gather_s and self.record:
            self.events.append(Event(r, "dp", "param gather", -1, chunk, start, self.dp_free[r]))

    def busy(self, r: int, op: Op) -> float:
        kind, mb, chunk = op
        # Megatron defers the first wgrad_deferral_limit microbatches (all of them when 0).
        if (
            kind == "B"
            and mb < self.overlap.deferred_output_wgrad_microbatches
            and chunk * self.p + r == self.last
        ):
            return self.busy_bwd_deferred[r][chunk]
        return self.pass_compute[kind][r][chunk]

    def place(self, r: int, op: Op, t: float, own: float, pair_compute: float | None) -> float:
        """Place ``op`` (``own`` seconds of compute) on stage ``r`` from ``t``: its compute, the
        communication it leaves exposed and, unless sends overlap, the send of its output.
        Returns when the stage is free again. ``pair_compute`` is the compute of its combined
        1F1B pair, None outside one."""
        kind, mb, chunk = op
        s = chunk * self.p + r
        forward = kind == "F"
        gather_waits = self.gather_waits
        if forward and gather_waits and not self.first_forward_seen[r][chunk]:
            self.first_forward_seen[r][chunk] = True
            t = max(t, self.gather_first[r][chunk])
            # The forward pre-hook waits for this chunk's first bucket, then dispatches the
            # next chunk's gather (param_and_grad_buffer.py, finish_param_sync).
            if not self.overlap.align_param_gather and chunk + 1 < self.v:
                self.issue_gather(r, chunk + 1, t)
        comm, host, syncs, send = self.pass_table[kind][r][chunk]
        if pair_compute is not None:
            comm = _exposed_comm(self.stages[r].chunks[chunk], kind, self.overlap, True, pair_compute - own)
            # Combined 1F1B issues each layer's forward dispatch after its partner's expert
            # backward (megatron-core 0.19.2 models/common/model_chunk_schedule_plan.py,
            # TransformerLayerSchedulePlan.run): the host's wait for the token counts finds the
            # GPU busy with the partner, so the dispatcher's sync no longer idles it. A pipeline
            # exchange's sync still does.
            syncs = self.overlap.pipeline_syncs_host
        # The pass starts once the host has issued its first kernel and keeps the GPU until its
        # kernels have run and the host has issued its last. The host runs ahead of the GPU from
        # one pass to the next, unless the pass makes it wait for the GPU: then the two meet,
        # and the pass takes the longer of its host work (its waits counted) and its kernels.
        issued = self.host_clock[r]
        if issued > t:
            t = issued
            self.host_held[r] = True
        if syncs:
            busy = host if host > own else own
            self.host_clock[r] = t + busy
        else:
            behind = issued + host - t
            busy = behind if behind > own else own
            self.host_clock[r] = issued + host
        if busy > own:
            self.host_held[r] = True
        end = t + busy
        if forward and gather_waits and self.gather_end[r][chunk] > end:
            # the chunk's last bucket arrives before it ends
            self.exposed[r] += self.gather_end[r][chunk] - end
            end = self.gather_end[r][chunk]
        if self.record:
            self.events.append(Event(r, "compute", "forward" if forward else "backward", mb, chunk, t, end))
        self.compute[r] += busy
        t = end
        if comm:
            if self.record:
                self.events.append(Event(r, "compute", "exposed comm", mb, chunk, t, t + comm))
            self.exposed[r] += comm
            t += comm
        arrival = t + send
        if send and self.sends_block:
            if self.record:
                self.events.append(Event(r, "compute", "send", mb, chunk, t, arrival))
            self.exposed[r] += arrival - t
            t = arrival
        if forward:
            self.forward_done[s][mb] = arrival
            self.forwards_done[s] += 1
        else:
            self.backward_done[s][mb] = arrival
            self.backwards_done[s] += 1
            self.backwards_left[r][chunk] -= 1
            if self.backwards_left[r][chunk] == 0:
                self.grads_ready[r][chunk] = (end - busy, busy)
        self.placed += 1
        return t

    # --- the schedule ------------------------------------------------------------------------
    def window(self, r: int, stop: int) -> tuple[tuple[tuple[Op, ...], ...], int]:
        """Stage ``r``'s steps from its position up to ``stop``, and the position of the first."""
        at = self.position[r]
        length = self.orders[r].length
        p, v, m, g, paired = self.p, self.v, self.m, self.group, self.overlap.paired
        window = _order_window(p, v, m, g, r, paired, at, min(stop, length))
        self.windows[r], self.window_start[r] = window, at
        return window, at

    def run(self, limits: list[int] | None = None) -> None:
        """Walk every stage's order as far as its inputs have arrived (up to ``limits``, a
        position per stage), until no stage can move."""
        p, last = self.p, self.last
        forward_done, backward_done = self.forward_done, self.backward_done
        position, clock, busy, place = self.position, self.clock, self.busy, self.place
        windows, starts = self.windows, self.window_start
        lengths = [order.length for order in self.orders]
        alone = self.overlap.stages_alone
        progressed = True
        while progressed:
            progressed = False
            for r in range(p):
                stop = lengths[r] if limits is None else min(limits[r], lengths[r])
                if position[r] >= stop:
                    continue
                window, base = windows[r], starts[r]
                if base + len(window) < stop:
                    window, base = self.window(r, stop)
                while position[r] < stop:
                    step = window[position[r] - base]
                    start = clock[r]
                    for kind, mb, chunk in step:  # each operation's input must have arrived
                        s = chunk * p + r
                        if kind == "F":
                            arrived = 0.0 if s == 0 or alone else forward_done[s - 1].get(mb)
                        elif s == last:
                            arrived = forward_done[s].get(mb)
                        else:
                            arrived = 0.0 if alone else backward_done[s + 1].get(mb)
                        if arrived is None:
                            break
                        if arrived > start:
                            start = arrived
                    else:
                        if len(step) == 1:
                            clock[r] = place(r, step[0], start, busy(r, step[0]), None)
                        else:
                            first, second = step
                            busies = (busy(r, first), busy(r, second))
                            pair = sum(busies)
                            t = place(r, first, start, busies[0], pair)
                            clock[r] = place(r, second, t, busies[1], pair)
                        position[r] += 1
                        progressed = True
                        continue
                    break
                if self.placed > self.max_passes:
                    raise InputError(
                        f"the step has {simulated_operations(p, self.v, self.m):,} forward and backward passes "
                        f"over its stages and no steady phase that repeats; the simulation stops at "
                        f"{self.max_passes:,} (memtune.limits)"
                    )
        if limits is None and any(position[r] < lengths[r] for r in range(p)):
            raise AssertionError("the pipeline schedule deadlocked")  # Megatron's order never does

    def run_periods(self) -> None:
        """Walk the schedule one steady period at a time, and skip ahead once a period repeats
        the one before it exactly (:meth:`skip`)."""
        periods = _Periods.of(self)
        if periods is None:
            return
        before = None
        for n in range(periods.first, periods.last):
            self.run(periods.limits(n))
            now = _Snapshot.of(self)
            self.host_held = [False] * self.p
            if before is not None and self.skip(periods, before, now):
                return
            before = now

    def skip(self, periods: _Periods, before: _Snapshot, now: _Snapshot) -> bool:
        """If the period just placed repeated the one before it, skip as many more as the
        uniform part of the schedule holds; returns whether it did.

        In the steady phase every period of a stage places the same passes, of the same
        durations, on microbatches ``group`` further on, and each pass starts at the latest of
        its stage's clock and its input's arrival. So when every stage's clock and every arrival
        still waiting for its consumer moved by the same time between two periods, each further
        period moves them by that time again, exactly: the step is the same as placing them."""
        step, g = periods.steps_per_period, self.group
        shift = now.clock[0] - before.clock[0]
        tolerance = 1e-9 * max(abs(c) for c in now.clock)
        if any(a - b != step for a, b in zip(now.position, before.position, strict=True)):
            return False
        if any(a < b for a, b in zip(before.position, periods.uniform_start, strict=True)):
            return False
        if any(abs((a - b) - shift) > tolerance for a, b in zip(now.clock, before.clock, strict=True)):
            return False
        host_shift = self.host_shifts(before, now, shift, tolerance)
        if host_shift is None:
            return False
        if any(self.dp_free[r] > before.clock[r] for r in range(self.p)):
            return False  # an early DP transfer might still delay a later one
        if self.overlap.overlap_param_gather and not all(all(seen) for seen in self.first_forward_seen):
            return False
        for done, lo, hi in self.waiting():
            if lo < g:
                return False
            if any(abs(done[mb] - done[mb - g] - shift) > tolerance for mb in range(lo, hi)):
                return False
        skipped = min(end - at for end, at in zip(periods.uniform_end, self.position, strict=True)) // step
        if skipped <= 0:
            return False
        moved = skipped * shift
        for done, lo, hi in self.waiting():
            for mb in range(lo, hi):
                done[mb + skipped * g] = done[mb] + moved
        for s in range(self.p * self.v):
            self.forwards_done[s] += skipped * g
            self.backwards_done[s] += skipped * g
        for r in range(self.p):
            self.position[r] += skipped * step
            self.clock[r] += moved
            self.host_clock[r] += skipped * host_shift[r]
            self.compute[r] += skipped * (now.compute[r] - before.compute[r])
            self.exposed[r] += skipped * (now.exposed[r] - before.exposed[r])
            self.backwards_left[r] = [left - skipped * g for left in self.backwards_left[r]]
        return True

    def host_shifts(
        self, before: _Snapshot, now: _Snapshot, shift: float, tolerance: float
    ) -> list[float] | None:
        """How far each stage's host moves per period from here on, or None where the period
        does not say. A host that moved with its GPU (by ``shift``) repeats with it. A host that
        never waits for the GPU moves by its own work each period; if it held nothing back in
        the period and issued it in less than ``shift`` (it ran further ahead of the GPU), it
        holds nothing back in any later period either, and the GPU's periods repeat without it."""
        moves = []
        for r in range(self.p):
            moved = now.host_clock[r] - before.host_clock[r]
            ahead = not now.host_held[r] and not self.host_waits[r] and moved < shift
            if abs(moved - shift) > tolerance and not ahead:
                return None
            moves.append(shift if abs(moved - shift) <= tolerance else moved)
        return moves

    def waiting(self) -> list[tuple[dict[int, float], int, int]]:
        """Arrivals written and not yet consumed: per virtual stage and direction the arrival
        list and the range of microbatches waiting in it."""
        out = []
        for s in range(self.p * self.v):
            consumed = self.forwards_done[s + 1] if s < self.last else self.backwards_done[s]
            out.append((self.forward_done[s], consumed, self.forwards_done[s]))
            if s > 0:
                out.append((self.backward_done[s], self.backwards_done[s - 1], self.backwards_done[s]))
        return out

    # --- the flush and the optimizer ---------------------------------------------------------
    def flush(self, r: int) -> float:
        """When stage ``r`` is done with the step's gradients: its deferred output-layer weight
        gradients, then its gradient reduction (bucket by bucket on the DP stream under
        ``overlap_grad_reduce``, else on its timeline)."""
        t, v, overlap = self.clock[r], self.v, self.overlap
        deferred = overlap.deferred_output_wgrad_microbatches if r == self.p - 1 else 0
        if deferred:
            span = min(deferred, self.m) * self.stages[r].chunks[-1].output_wgrad_s
            if self.record:
                self.events.append(Event(r, "compute", "output wgrad", -1, v - 1, t, t + span))
            self.compute[r] += span
            t += span
            self.grads_ready[r][v - 1] = (t - span, span)  # the output layer's bucket is ready last
        # each chunk's reduction is launched once its last backward is done (megatron-core
        # schedules.py, backward_step_helper_postprocess), so the DP stream takes the chunks in
        # the order their gradients are ready: under VPP the last chunk first
        for chunk in sorted(range(v), key=lambda c: self.grads_ready[r][c]):
            work = self.stages[r].chunks[chunk]
            if not work.grad_reduce_s:
                continue
            if overlap.overlap_grad_reduce:
                start, busy = self.grads_ready[r][chunk]
                for b in range(work.buckets):
                    bucket_ready = start + busy * (b + 1) / work.buckets
                    begin = max(self.dp_free[r], bucket_ready)
                    self.dp_free[r] = begin + work.grad_reduce_s / work.buckets
                    if self.record:
                        self.events.append(Event(r, "dp", "grad reduce", -1, chunk, begin, self.dp_free[r]))
            else:
                if self.record:
                    self.events.append(
                        Event(r, "compute", "grad reduce", -1, chunk, t, t + work.grad_reduce_s)
                    )
                self.exposed[r] += work.grad_reduce_s
                t += work.grad_reduce_s
        if overlap.overlap_grad_reduce and self.dp_free[r] > t:
            self.exposed[r] += self.dp_free[r] - t
            t = self.dp_free[r]
        return t

    def finish(self) -> Simulated:
        """Gradient clipping's norm all-reduce and finalize_model_grads join every stage before
        the optimizer step; without ``overlap_param_gather`` the parameter gathers follow it."""
        sync = max(self.flush(r) for r in range(self.p))
        finish = []
        for r, stage in enumerate(self.stages):
            t = sync
            if self.record:
                self.events.append(Event(r, "compute", "optimizer", -1, -1, t, t + stage.optimizer_s))
            self.compute[r] += stage.optimizer_s
            t += stage.optimizer_s
            if not self.overlap.overlap_param_gather:
                for chunk, work in enumerate(stage.chunks):
                    if work.param_gather_s:
                        if self.record:
                            self.events.append(
                                Event(r, "compute", "param gather", -1, chunk, t, t + work.param_gather_s)
                            )
                        self.exposed[r] += work.param_gather_s
                        t += work.param_gather_s
            finish.append(t)
        step_s = max(finish)
        return Simulated(
            step_s=step_s,
            stage_compute_s=tuple(self.compute),
            stage_optimizer_s=tuple(stage.optimizer_s for stage in self.stages),
            stage_exposed_comm_s=tuple(self.exposed),
            # a stage that finishes last waits for nothing: its sums differ from step_s by rounding
            stage_idle_s=tuple(
                max(0.0, step_s - c - e) for c, e in zip(self.compute, self.exposed, strict=True)
            ),
            events=tuple(self.events),
            placed=self.placed,
        )


# What ``_Iteration.place`` looks up of each pass (a step places up to 10^5 of them), by kind
# ("F", "B"), stage and chunk.
PassTables = tuple[
    dict[str, list[list[float]]],
    list[list[float]],
    list[bool],
    dict[str, list[list[tuple[float, float, bool, float]]]],
]


def _pass_tables(stages: list[StageWork], overlap: Overlap) -> PassTables:
    """Each pass's fixed prices, looked up instead of computed: its compute; the backward's
    busy time without the output layer's deferred weight gradient; whether a stage's host ever
    waits for its GPU; and, outside combined 1F1B pairs, each pass's exposed communication, host
    work, whether it makes the host wait, and the send after it."""
    p, v = len(stages), len(stages[0].chunks)
    pass_compute = {
        "F": [[w.forward_s for w in st.chunks] for st in stages],
        "B": [[w.backward_s for w in st.chunks] for st in stages],
    }
    busy_bwd_deferred = [[w.backward_s - w.output_wgrad_s for w in st.chunks] for st in stages]
    # each pass's host work and whether it makes the host wait for the GPU
    waits = overlap.pipeline_syncs_host
    pass_host = {
        "F": [[(w.forward_host_s, waits or w.forward_syncs) for w in st.chunks] for st in stages],
        "B": [[(w.backward_host_s, waits or w.backward_syncs) for w in st.chunks] for st in stages],
    }
    host_waits = [any(syncs for kind in ("F", "B") for _, syncs in pass_host[kind][r]) for r in range(p)]
    comm_alone = {
        kind: [[_exposed_comm(w, kind, overlap, False, 0.0) for w in st.chunks] for st in stages]
        for kind in ("F", "B")
    }
    # The send after each pass, by the stage that sends it (the gradient back costs the same).
    last = p * v - 1
    sends = {
        "F": [stages[s % p].send_s if s != last else 0.0 for s in range(p * v)],
        "B": [stages[(s - 1) % p].send_s if s != 0 else 0.0 for s in range(p * v)],
    }
    # what ``place`` reads of each pass in one look-up: its exposed communication outside a
    # combined 1F1B pair, its host work, whether it makes the host wait for the GPU, its send
    pass_table = {
        kind: [
            [(comm_alone[kind][r][c], *pass_host[kind][r][c], sends[kind][c * p + r]) for c in range(v)]
            for r in range(p)
        ]
        for kind in ("F", "B")
    }
    return pass_compute, busy_bwd_deferred, host_waits, pass_table


@dataclass(frozen=True)
class _Periods:
    """The steady periods of a schedule: ``group`` microbatches through every chunk of a stage,
    the same passes shifted by ``group`` microbatches from one period to the next.

    A period's passes are uniform (the same durations, the same inputs one period later) once
    every chunk's first forward has run (they wait for parameter gathers; all fall in the
    warm-up or the first steady pair) and the last stage is past the microbatches whose
    output-layer weight gradients are deferred (a limit below all of them), and until the last
    full group of microbatches (whose last backwards start the gradient reduction)."""

    steady_start: tuple[int, ...]  # per stage: the position of its first steady-phase step
    uniform_start: tuple[int, ...]  # per stage: the positions of its uniform periods' steps
    uniform_end: tuple[int, ...]
    steps_per_period: int
    first: int  # the first period walked
    last: int  # the periods walked one at a time before giving up on a repeat

    @staticmethod
    def of(it: _Iteration) -> _Periods | None:
        p, v, m, g = it.p, it.v, it.m, it.group
        pairs = g * v  # steady forward/backward pairs per period and stage
        per_pair = 1 if it.overlap.paired else 2
        full = m // g  # groups of microbatches the forward order fills
        warmups = [_warmup(p, v, m, g, r, it.overlap.paired) for r in range(p)]
        deferral = it.overlap.deferred_output_wgrad_microbatches
        # one pair in (a chunk's first forward is at most the first steady pair), or past the
        # deferred microbatches
        first_pair = max(1, -(-deferral // g) * pairs if 0 < deferral < m else 0)
        # the first forward of the last full group's first chunk ends the uniform pairs
        ends = [(full - 1) * pairs - w for w in warmups]
        periods = (min(ends) - first_pair) // pairs
        # one walked, one to compare with it, one at least to skip
        if periods < 3:
            return None
        first = first_pair // pairs
        return _Periods(
            steady_start=tuple(warmups),
            uniform_start=tuple(w + first_pair * per_pair for w in warmups),
            uniform_end=tuple(w + e * per_pair for w, e in zip(warmups, ends, strict=True)),
            steps_per_period=pairs * per_pair,
            first=first,
            last=first + 2 + periods // 2,
        )

    def limits(self, n: int) -> list[int]:
        """Positions ending period ``n`` of every stage."""
        return [start + (n + 1) * self.steps_per_period for start in self.steady_start]


@dataclass(frozen=True)
class _Snapshot:
    position: tuple[int, ...]
    clock: tuple[float, ...]
    compute: tuple[float, ...]
    exposed: tuple[float, ...]
    host_clock: tuple[float, ...]
    host_held: tuple[bool, ...]  # since the snapshot before

    @staticmethod
    def of(it: _Iteration) -> _Snapshot:
        return _Snapshot(
            tuple(it.position),
            tuple(it.clock),
            tuple(it.compute),
            tuple(it.exposed),
            tuple(it.host_clock),
            tuple(it.host_held),
        )


def step_bound(stages: list[StageWork], num_microbatches: int, overlap: Overlap) -> float:
    """A lower bound on :func:`simulate`'s step time from the same durations, placing nothing.

    Every pass of a stage runs on its timeline one after another, so the stage is busy at
    least the sum of its passes, each with the communication it leaves exposed at the least
    (a combined 1F1B pair hides at most its partner's compute), its blocking send, and the
    longer of its host work and its kernels where it makes the host wait for the GPU. Its first
    pass cannot start before a microbatch's forward has crossed every earlier stage, and once
    its last pass (a backward) is done, that microbatch's backward still has to cross every
    earlier stage to stage 0. The host issues every pass of its stage one after another from
    the step's start, and no pass ends before the host has issued it, so the stage's last pass
    also ends no earlier than all its host work. Stage 0 then reduces what it does not overlap;
    the slowest stage's end joins every stage before the optimizer step, which the largest
    optimizer step (and the parameter gathers, when they do not overlap the forwards) follows.
    Each term is a bound on the corresponding one of the simulation, and the simulation only
    adds waits to them."""
    p, v, m = len(stages), len(stages[0].chunks), num_microbatches
    blocking = not overlap.overlap_p2p_comm
    intrinsic: dict[int, _StageParts] = {}  # stages often share one tuple of chunks
    busy, host, chain_forward, chain_backward, reduce = [], [], [], [], []
    for r, stage in enumerate(stages):
        parts = intrinsic.get(id(stage.chunks))
        if parts is None:
            parts = intrinsic[id(stage.chunks)] = _stage_parts(stage, overlap)
        total = parts.total
        if blocking:  # a send after every pass but the last virtual stage's forward and the first's backward
            total += (v - (r == p - 1)) * stage.send_s
            total += v * stages[r - 1].send_s if r else (v - 1) * stages[-1].send_s
        busy.append(m * total)
        host.append(m * parts.host)
        chain_forward.append(parts.least_forward + stage.send_s)
        chain_backward.append(parts.least_backward)
        reduce.append(0.0 if overlap.overlap_grad_reduce else parts.reduced)
    deferred = min(overlap.deferred_output_wgrad_microbatches, m) * stages[-1].chunks[-1].output_wgrad_s
    sync = 0.0
    before = after = 0.0  # a microbatch's forward across stages 0..r-1, and its backward back
    for r in range(p):
        sync = max(sync, max(before + busy[r], host[r]) + reduce[r])
        if r > 0:
            own_send = 0.0 if blocking else stages[r - 1].send_s
            flushed = deferred if r == p - 1 else 0.0
            last = max(before + busy[r] - flushed + own_send, host[r] + stages[r - 1].send_s)
            sync = max(sync, last + after + reduce[0])
            after += stages[r - 1].send_s
        before += chain_forward[r]
        after += chain_backward[r]
    tail = max(
        stage.optimizer_s
        + (0.0 if overlap.overlap_param_gather else sum(w.param_gather_s for w in stage.chunks))
        for stage in stages
    )
    return sync + tail


def spread_bound(whole: ChunkWork, num_microbatches: int, stages: int, overlap: Overlap) -> float:
    """A lower bound on the step of every split over ``stages`` pipeline stages (any number of
    virtual stages, any split of the layers) of a model whose every layer, embedding and loss
    one chunk, ``whole``, holds: each of its pieces at the least it keeps any pass holding it
    busy (where it makes the host wait for the GPU, the longer of its kernels and host work),
    and its host work added up (``StepPricer.whole_model``). Splitting a pass into several
    never makes it cheaper (those pieces, the least communication they leave exposed and their
    host work only add up; a split adds its own host work per chunk and microbatch), so the
    stages' passes take at least ``num_microbatches`` of ``whole``'s in all, and their hosts at
    least as many of its host work; and the busiest stage, which :func:`step_bound` bounds the
    step by, at least an even share of either."""
    paired = overlap.paired
    partner = math.inf if paired else 0.0
    device = whole.forward_s + _exposed_comm(whole, "F", overlap, paired, partner)
    device += whole.backward_s + _exposed_comm(whole, "B", overlap, paired, partner)
    host = whole.forward_host_s + whole.backward_host_s
    return num_microbatches * max(device, host) / stages


def _least_passes(work: ChunkWork, overlap: Overlap) -> tuple[float, float]:
    """A chunk's forward and backward pass at the least each keeps its stage busy: its kernels
    (or its host work, where it makes the host wait for the GPU, if longer) and the least
    communication it can leave exposed (a combined 1F1B pair hides at most its partner's
    compute)."""
    paired = overlap.paired
    partner = math.inf if paired else 0.0
    waits = overlap.pipeline_syncs_host
    # in a pair, a pass's dispatcher sync finds the partner's kernels queued (_Iteration.place)
    forward_waits = waits or (work.forward_syncs and not paired)
    backward_waits = waits or (work.backward_syncs and not paired)
    forward = max(work.forward_s, work.forward_host_s) if forward_waits else work.forward_s
    backward = max(work.backward_s, work.backward_host_s) if backward_waits else work.backward_s
    return (
        forward + _exposed_comm(work, "F", overlap, paired, partner),
        backward + _exposed_comm(work, "B", overlap, paired, partner),
    )


@dataclass(frozen=True)
class _StageParts:
    total: float  # the least passes (_least_passes) over one microbatch of every chunk
    host: float  # the host's work over one microbatch of every chunk
    least_forward: float
    least_backward: float
    reduced: float  # the gradient reduction of all its chunks


def _stage_parts(stage: StageWork, overlap: Overlap) -> _StageParts:
    """What :func:`step_bound` takes of one stage."""
    total, forwards, backwards = 0.0, [], []
    for work in stage.chunks:
        forward, backward = _least_passes(work, overlap)
        total += forward + backward
        forwards.append(forward)
        backwards.append(backward)
    host = sum(w.forward_host_s + w.backward_host_s for w in stage.chunks)
    reduced = sum(w.grad_reduce_s for w in stage.chunks)
    return _StageParts(total, host, min(forwards), min(backwards), reduced)


def _exposed_comm(
    work: ChunkWork, kind: str, overlap: Overlap, paired: bool, partner_compute: float
) -> float:
    """Communication of one operation left on the stage's critical path."""
    if kind == "F":
        # tp_forward_s / tp_backward_s are what stays exposed: under Transformer Engine's
        # userbuffer overlap the step model has already priced it inside the GEMMs
        tp, ep, own = work.tp_forward_s, work.ep_forward_s, work.forward_s
        tp_hidden = 0.0
    else:
        tp, ep, own = work.tp_backward_s, work.ep_backward_s, work.backward_s
        # CUDA_DEVICE_MAX_CONNECTIONS=1: the column-parallel half of the layer's backward collectives
        tp_hidden = min(tp / 2, own) if overlap.single_device_connection else 0.0
    ep_hidden = 0.0
    # Combined 1F1B: the forward's all-to-alls run under the partner's backward; the backward's
    # only under delayed weight gradients.
    if paired and (kind == "F" or overlap.delay_wgrad_compute):
        ep_hidden = min(ep, partner_compute)
    blocking = work.tp_backward_blocking_s if kind == "B" else 0.0
    dp = work.dp_forward_exposed_s if kind == "F" else work.dp_backward_exposed_s
    return tp - tp_hidden + ep - ep_hidden + blocking + dp
