"""One training iteration, simulated event by event on every pipeline stage.

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
compute and collectives (``memtune/perf/collectives.py``); this module only places them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from memtune.errors import InputError
from memtune.estimate.schedule import forward_order, warmup_count
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
    stage_compute_s: tuple[float, ...]  # forward, backward, deferred wgrad, optimizer
    stage_optimizer_s: tuple[float, ...]  # of which the optimizer step
    stage_exposed_comm_s: tuple[float, ...]  # communication on the stage's critical path
    stage_idle_s: tuple[float, ...]  # waiting: the pipeline bubble and waits for the slowest stage
    events: tuple[Event, ...]  # every placed pass, when the simulation was asked to record them

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
    table = forward_order(num_microbatches, chunks, group)
    total = len(table)
    warmup = min(warmup_count(pp, chunks, num_microbatches, group, pp_rank) + combined, total)

    def backward(k: int) -> Op:
        mb, chunk = table[k]
        return ("B", mb, chunks - 1 - chunk)

    steps: list[list[Op]] = [[("F", *table[k])] for k in range(warmup)]
    steps += [[("F", *table[warmup + k]), backward(k)] for k in range(total - warmup)]
    steps += [[backward(k)] for k in range(total - warmup, total)]
    return steps


def simulated_operations(stages: int, chunks: int, num_microbatches: int) -> int:
    """Forward and backward passes the simulation of one step places: its cost grows with them."""
    return 2 * stages * chunks * num_microbatches


@functools.lru_cache(maxsize=256)
def _steps(
    pp: int, chunks: int, num_microbatches: int, group: int, pp_rank: int, paired: bool
) -> tuple[tuple[Op, ...], ...]:
    """:func:`stage_order` as the simulation walks it: pairs kept only where they are simulated
    as pairs. Cached: a plan prices dozens of layouts with a handful of schedules between them."""
    order = stage_order(pp, chunks, num_microbatches, group, pp_rank, paired)
    if paired:
        return tuple(tuple(step) for step in order)
    return tuple((op,) for step in order for op in step)  # each operation waits for its own input only


def simulate(
    stages: list[StageWork], num_microbatches: int, group: int, overlap: Overlap, record_events: bool = False
) -> Simulated:
    """Simulate one iteration; ``group`` is ``microbatch_group_size_per_vp_stage`` (default PP).
    ``record_events`` keeps every placed pass for a Gantt chart (``Simulated.events``); ranking
    needs only the times."""
    p, v, m = len(stages), len(stages[0].chunks), num_microbatches
    if simulated_operations(p, v, m) > MAX_SIMULATED_OPERATIONS:
        raise InputError(
            f"the step has {simulated_operations(p, v, m):,} forward and backward passes over its stages; "
            f"the simulation stops at {MAX_SIMULATED_OPERATIONS:,} (memtune.limits)"
        )
    last = p * v - 1
    ep_pairs = overlap.overlap_moe_expert_parallel_comm and not overlap.single_device_connection
    orders = [_steps(p, v, m, group, r, ep_pairs) for r in range(p)]
    position = [0] * p
    clock = [0.0] * p
    dp_free = [0.0] * p
    compute = [0.0] * p
    exposed = [0.0] * p
    events: list[Event] = []
    # When each microbatch's output (forward) or input gradient (backward) of each virtual stage
    # arrives where it is needed; None until it has run.
    no_times: list[float | None] = [None] * m
    forward_done = [list(no_times) for _ in range(p * v)]
    backward_done = [list(no_times) for _ in range(p * v)]
    backwards_left = [[m] * v for _ in range(p)]
    first_forward_seen = [[False] * v for _ in range(p)]
    gather_first = [[0.0] * v for _ in range(p)]
    gather_end = [[0.0] * v for _ in range(p)]

    def issue_gather(r: int, chunk: int, at: float) -> None:
        work = stages[r].chunks[chunk]
        start = max(dp_free[r], at)
        gather_first[r][chunk] = start + work.param_gather_s / work.buckets
        gather_end[r][chunk] = dp_free[r] = start + work.param_gather_s
        if work.param_gather_s and record_events:
            events.append(Event(r, "dp", "param gather", -1, chunk, start, dp_free[r]))

    if overlap.overlap_param_gather:
        for r in range(p):
            for chunk in range(v) if overlap.align_param_gather else range(1):
                issue_gather(r, chunk, 0.0)

    grads_ready = [[(0.0, 0.0)] * v for _ in range(p)]  # (start, length) of each chunk's last backward

    # Each chunk's compute and, outside combined 1F1B pairs, its exposed communication per pass
    # are fixed: looked up per pass instead of computed (a step of a large job places 10^4-10^5).
    deferral = overlap.deferred_output_wgrad_microbatches
    pass_compute = {
        "F": [[w.forward_s for w in st.chunks] for st in stages],
        "B": [[w.backward_s for w in st.chunks] for st in stages],
    }
    busy_bwd_deferred = [[w.backward_s - w.output_wgrad_s for w in st.chunks] for st in stages]
    comm_alone = {
        kind: [
            [_exposed_comm(w, (kind, 0, c), overlap, False, 0.0) for c, w in enumerate(st.chunks)]
            for st in stages
        ]
        for kind in ("F", "B")
    }
    # The send after each pass, by the stage that sends it (the gradient back costs the same).
    forward_send = [stages[s % p].send_s if s != last else 0.0 for s in range(p * v)]
    backward_send = [stages[(s - 1) % p].send_s if s != 0 else 0.0 for s in range(p * v)]
    gather_waits = overlap.overlap_param_gather
    sends_block = not overlap.overlap_p2p_comm

    def busy_of(r: int, op: Op) -> float:
        kind, mb, chunk = op
        # Megatron defers the first wgrad_deferral_limit microbatches (all of them when 0).
        if kind == "B" and mb < deferral and chunk * p + r == last:
            return busy_bwd_deferred[r][chunk]
        return pass_compute[kind][r][chunk]

    def place(r: int, op: Op, t: float, own: float, pair_compute: float | None) -> float:
        """Place ``op`` (``own`` seconds of compute) on stage ``r`` from ``t``; returns when the
        stage is free again. ``pair_compute`` is the compute of its combined 1F1B pair, None
        outside one."""
        kind, mb, chunk = op
        s = chunk * p + r
        forward = kind == "F"
        if forward and gather_waits and not first_forward_seen[r][chunk]:
            first_forward_seen[r][chunk] = True
            t = max(t, gather_first[r][chunk])
            # The forward pre-hook waits for this chunk's first bucket, then dispatches the
            # next chunk's gather (param_and_grad_buffer.py, finish_param_sync).
            if not overlap.align_param_gather and chunk + 1 < v:
                issue_gather(r, chunk + 1, t)
        comm = (
            comm_alone[kind][r][chunk]
            if pair_compute is None
            else _exposed_comm(stages[r].chunks[chunk], op, overlap, True, pair_compute - own)
        )
        end = t + own
        if forward and gather_waits:
            end = max(end, gather_end[r][chunk])  # the chunk's last bucket arrives before it ends
        if record_events:
            events.append(Event(r, "compute", "forward" if forward else "backward", mb, chunk, t, end))
        compute[r] += own
        exposed[r] += end - t - own
        t = end
        if comm:
            if record_events:
                events.append(Event(r, "compute", "exposed comm", mb, chunk, t, t + comm))
            exposed[r] += comm
            t += comm
        arrival = t + (forward_send[s] if forward else backward_send[s])
        if arrival > t and sends_block:
            if record_events:
                events.append(Event(r, "compute", "send", mb, chunk, t, arrival))
            exposed[r] += arrival - t
            t = arrival
        (forward_done if forward else backward_done)[s][mb] = arrival
        if not forward:
            backwards_left[r][chunk] -= 1
            if backwards_left[r][chunk] == 0:
                grads_ready[r][chunk] = (end - own, own)
        return t

    progressed = True
    while progressed:
        progressed = False
        for r in range(p):
            order = orders[r]
            while position[r] < len(order):
                step = order[position[r]]
                start = clock[r]
                for kind, mb, chunk in step:  # each operation's input must have arrived
                    s = chunk * p + r
                    if kind == "F":
                        arrived = 0.0 if s == 0 else forward_done[s - 1][mb]
                    else:
                        arrived = forward_done[s][mb] if s == last else backward_done[s + 1][mb]
                    if arrived is None:
                        break
                    if arrived > start:
                        start = arrived
                else:
                    if len(step) == 1:
                        clock[r] = place(r, step[0], start, busy_of(r, step[0]), None)
                    else:
                        first, second = step
                        busies = (busy_of(r, first), busy_of(r, second))
                        pair = sum(busies)
                        t = place(r, first, start, busies[0], pair)
                        clock[r] = place(r, second, t, busies[1], pair)
                    position[r] += 1
                    progressed = True
                    continue
                break
    if any(position[r] < len(orders[r]) for r in range(p)):
        raise AssertionError("the pipeline schedule deadlocked")  # Megatron's order never does

    ends = []
    for r in range(p):
        t = clock[r]
        deferred = overlap.deferred_output_wgrad_microbatches if r == p - 1 else 0
        if deferred:
            span = min(deferred, m) * stages[r].chunks[-1].output_wgrad_s
            if record_events:
                events.append(Event(r, "compute", "output wgrad", -1, v - 1, t, t + span))
            compute[r] += span
            t += span
            grads_ready[r][v - 1] = (t - span, span)  # the output layer's bucket is ready last
        for chunk in range(v):
            work = stages[r].chunks[chunk]
            if not work.grad_reduce_s:
                continue
            if overlap.overlap_grad_reduce:
                start, busy = grads_ready[r][chunk]
                for b in range(work.buckets):
                    bucket_ready = start + busy * (b + 1) / work.buckets
                    begin = max(dp_free[r], bucket_ready)
                    dp_free[r] = begin + work.grad_reduce_s / work.buckets
                    if record_events:
                        events.append(Event(r, "dp", "grad reduce", -1, chunk, begin, dp_free[r]))
            else:
                if record_events:
                    events.append(Event(r, "compute", "grad reduce", -1, chunk, t, t + work.grad_reduce_s))
                exposed[r] += work.grad_reduce_s
                t += work.grad_reduce_s
        if overlap.overlap_grad_reduce and dp_free[r] > t:
            exposed[r] += dp_free[r] - t
            t = dp_free[r]
        ends.append(t)

    # Gradient clipping's norm all-reduce and finalize_model_grads join every stage before the
    # optimizer step.
    sync = max(ends)
    finish = []
    for r in range(p):
        t = sync
        if record_events:
            events.append(Event(r, "compute", "optimizer", -1, -1, t, t + stages[r].optimizer_s))
        compute[r] += stages[r].optimizer_s
        t += stages[r].optimizer_s
        if not overlap.overlap_param_gather:
            for chunk, work in enumerate(stages[r].chunks):
                if work.param_gather_s:
                    if record_events:
                        events.append(
                            Event(r, "compute", "param gather", -1, chunk, t, t + work.param_gather_s)
                        )
                    exposed[r] += work.param_gather_s
                    t += work.param_gather_s
        finish.append(t)
    step_s = max(finish)
    return Simulated(
        step_s=step_s,
        stage_compute_s=tuple(compute),
        stage_optimizer_s=tuple(stage.optimizer_s for stage in stages),
        stage_exposed_comm_s=tuple(exposed),
        stage_idle_s=tuple(step_s - compute[r] - exposed[r] for r in range(p)),
        events=tuple(events),
    )


def _exposed_comm(work: ChunkWork, op: Op, overlap: Overlap, paired: bool, partner_compute: float) -> float:
    """Communication of one operation left on the stage's critical path."""
    if op[0] == "F":
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
    if paired and (op[0] == "F" or overlap.delay_wgrad_compute):
        ep_hidden = min(ep, partner_compute)
    blocking = work.tp_backward_blocking_s if op[0] == "B" else 0.0
    dp = work.dp_forward_exposed_s if op[0] == "F" else work.dp_backward_exposed_s
    return tp - tp_hidden + ep - ep_hidden + blocking + dp
