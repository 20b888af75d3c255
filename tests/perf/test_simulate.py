"""The simulated iteration on schedules small enough to work out by hand (forward 1 s,
backward 2 s per chunk and microbatch unless a test says otherwise)."""

from __future__ import annotations

import random

import pytest

from memtune.perf.simulate import (
    ChunkWork,
    Overlap,
    StageWork,
    simulate,
    spread_bound,
    stage_order,
    step_bound,
)

NO_OVERLAP = Overlap(single_device_connection=False)


def stages(p: int, v: int = 1, send: float = 0.0, optimizer: float = 0.0, **work: float) -> list[StageWork]:
    chunk = ChunkWork(forward_s=1.0, backward_s=2.0, **work)  # type: ignore[arg-type]
    return [StageWork((chunk,) * v, send, optimizer) for _ in range(p)]


def test_single_stage_runs_back_to_back() -> None:
    sim = simulate(stages(1, optimizer=0.5), 3, 1, NO_OVERLAP)
    assert sim.step_s == pytest.approx(3 * 3 + 0.5)
    assert sim.stage_idle_s == (0.0,)


def test_1f1b_bubble_is_p_minus_1_microbatches() -> None:
    # r0: F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9]; r1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7].
    sim = simulate(stages(2), 2, 2, NO_OVERLAP, record_events=True)
    assert sim.step_s == pytest.approx((2 + 2 - 1) * 3)
    assert sim.stage_idle_s == pytest.approx((3.0, 3.0))
    r1 = [(e.kind, e.microbatch, e.start) for e in sim.events if e.stage == 1 and e.stream == "compute"]
    assert r1[:4] == [("forward", 0, 1.0), ("backward", 0, 2.0), ("forward", 1, 4.0), ("backward", 1, 5.0)]


def test_blocking_sends_sit_on_the_senders_timeline() -> None:
    # Worked through in the module's order: the last backward of r0 starts at 7.3, ends at 9.3.
    sim = simulate(stages(2, send=0.1), 2, 2, NO_OVERLAP)
    assert sim.step_s == pytest.approx(9.3)
    overlapped = simulate(
        stages(2, send=0.1), 2, 2, Overlap(single_device_connection=False, overlap_p2p_comm=True)
    )
    # Non-blocking: r1's F1 waits only for its own clock (4.1), r0's last backward runs [7.2, 9.2].
    assert overlapped.step_s == pytest.approx(9.2)


def test_interleaved_order_and_bubble() -> None:
    # p=2, v=2, M=2: rank 0 warms up all four forwards; rank 1 two.
    assert stage_order(2, 2, 2, 2, 0) == [
        [("F", 0, 0)], [("F", 1, 0)], [("F", 0, 1)], [("F", 1, 1)],
        [("B", 0, 1)], [("B", 1, 1)], [("B", 0, 0)], [("B", 1, 0)],
    ]  # fmt: skip
    assert stage_order(2, 2, 2, 2, 1)[2:4] == [[("F", 0, 1), ("B", 0, 1)], [("F", 1, 1), ("B", 1, 1)]]
    # 12 s of work per rank plus (p - 1) x (F + B) of one chunk: 15 s.
    assert simulate(stages(2, v=2), 2, 2, NO_OVERLAP).step_s == pytest.approx(15.0)


def test_grad_reduce_overlaps_the_last_backward_bucket_by_bucket() -> None:
    # Last backward [4, 6]; buckets ready at 4.67, 5.33, 6.0, each 0.5 s: the last ends at 6.5.
    overlapped = simulate(stages(1, grad_reduce_s=1.5, buckets=3), 2, 1, Overlap(overlap_grad_reduce=True))
    assert overlapped.step_s == pytest.approx(6.5)
    assert simulate(stages(1, grad_reduce_s=1.5, buckets=3), 2, 1, Overlap()).step_s == pytest.approx(7.5)


def test_interleaved_chunks_reduce_in_the_order_their_gradients_are_ready() -> None:
    # The 15 s schedule above; rank 0's chunk 1 takes its last backward at [9, 11], chunk 0 at
    # [13, 15]. Megatron-Core launches each chunk's reduction once its last backward is done, so
    # chunk 1's 1 s reduction hides at [11, 12] and only chunk 0's [15, 16] is exposed: 16 s, not
    # the 17 s of reducing chunk 0 first and chunk 1 behind it.
    work = stages(2, v=2, grad_reduce_s=1.0, buckets=1)
    sim = simulate(
        work, 2, 2, Overlap(single_device_connection=False, overlap_grad_reduce=True), record_events=True
    )
    assert sim.step_s == pytest.approx(16.0)
    reduces = [(e.chunk, e.start, e.end) for e in sim.events if e.stage == 0 and e.kind == "grad reduce"]
    assert reduces == [
        (1, pytest.approx(11.0), pytest.approx(12.0)),
        (0, pytest.approx(15.0), pytest.approx(16.0)),
    ]


def test_param_gather_overlaps_the_first_forward() -> None:
    # Gather 1 s in two buckets: the forward starts after the first (0.5 s) and runs to 1.5 s.
    work = stages(1, param_gather_s=1.0, buckets=2)
    assert simulate(work, 1, 1, Overlap(overlap_param_gather=True)).step_s == pytest.approx(3.5)
    assert simulate(work, 1, 1, Overlap()).step_s == pytest.approx(4.0)


def test_tp_collectives_hide_only_where_megatron_overlaps_them() -> None:
    work = stages(1, tp_forward_s=0.2, tp_backward_s=0.4)
    assert simulate(work, 1, 1, NO_OVERLAP).step_s == pytest.approx(3.6)
    # CUDA_DEVICE_MAX_CONNECTIONS=1: the column-parallel half of the backward's collectives hides.
    assert simulate(work, 1, 1, Overlap()).step_s == pytest.approx(3.4)
    # blocking collectives (LoRA adapters' own) stay on the critical path either way
    blocking = stages(1, tp_forward_s=0.2, tp_backward_s=0.4, tp_backward_blocking_s=0.3)
    assert simulate(blocking, 1, 1, Overlap()).step_s == pytest.approx(3.7)


def test_deferred_output_wgrad_fills_the_last_stages_flush() -> None:
    # The last stage's backward drops to 1.5 s and its 2 x 0.5 s of wgrad run after its last
    # backward, while rank 0 still runs its own: r0's last backward runs [6, 8].
    work = [
        StageWork((ChunkWork(1.0, 2.0),), 0.0, 0.0),
        StageWork((ChunkWork(1.0, 2.0, output_wgrad_s=0.5),), 0.0, 0.0),
    ]
    assert simulate(work, 2, 2, NO_OVERLAP).step_s == pytest.approx(9.0)
    deferred = Overlap(single_device_connection=False, deferred_output_wgrad_microbatches=2)
    assert simulate(work, 2, 2, deferred).step_s == pytest.approx(8.0)


def test_expert_all_to_all_hides_in_combined_1f1b_pairs() -> None:
    work = stages(1, ep_forward_s=0.5, ep_backward_s=0.5)
    assert simulate(work, 2, 1, NO_OVERLAP).step_s == pytest.approx(2 * 4.0)
    # One extra warm-up forward, then (F1, B0) paired: F1's all-to-all hides under B0.
    paired = Overlap(single_device_connection=False, overlap_moe_expert_parallel_comm=True)
    assert simulate(work, 2, 1, paired).step_s == pytest.approx(8.0 - 0.5)
    delayed = Overlap(
        single_device_connection=False, overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True
    )
    assert simulate(work, 2, 1, delayed).step_s == pytest.approx(8.0 - 1.0)
    # Megatron needs CUDA_DEVICE_MAX_CONNECTIONS > 1 for it: with 1, nothing hides.
    single = Overlap(overlap_moe_expert_parallel_comm=True)
    assert simulate(work, 2, 1, single).step_s == pytest.approx(8.0)


def test_uneven_stages_wait_for_the_slowest() -> None:
    # Stage 1 twice as slow: 1F1B over 2 microbatches is bounded by its 2 x 6 s plus r0's F0 and B1.
    work = [StageWork((ChunkWork(1.0, 2.0),), 0.0, 0.0), StageWork((ChunkWork(2.0, 4.0),), 0.0, 0.0)]
    sim = simulate(work, 2, 2, NO_OVERLAP)
    assert sim.step_s == pytest.approx(1.0 + 12.0 + 2.0)
    assert sim.stage_idle_s[1] == pytest.approx(3.0)


def test_unaligned_param_gathers_follow_the_previous_chunks_first_forward() -> None:
    # p=1, v=2, M=1: chunk 0's gather (1 s, one bucket) starts at 0, chunk 1's only when chunk
    # 0's first forward starts (1 s, after its gather): forward c0 [1, 2], c1 waits to 2 -> [2, 3].
    work = [StageWork((ChunkWork(1.0, 2.0, param_gather_s=1.0),) * 2, 0.0, 0.0)]
    unaligned = simulate(work, 1, 1, Overlap(overlap_param_gather=True), record_events=True)
    gathers = [(e.chunk, e.start, e.end) for e in unaligned.events if e.kind == "param gather"]
    assert gathers == [(0, 0.0, 1.0), (1, 1.0, 2.0)]
    aligned = simulate(
        work, 1, 1, Overlap(overlap_param_gather=True, align_param_gather=True), record_events=True
    )
    assert [(e.chunk, e.start) for e in aligned.events if e.kind == "param gather"] == [(0, 0.0), (1, 1.0)]
    # Either way: forwards [1, 2] and [2, 3], backwards of 2 s each: 7 s.
    assert unaligned.step_s == pytest.approx(7.0)


def test_a_long_steady_phase_is_priced_without_placing_it() -> None:
    # 1,280,000 passes; uniform chunks: (M v + p - 1) (F + B) exactly, as the interleaved
    # schedule's bubble says, from a few periods placed.
    sim = simulate(stages(8, v=8), 10_000, 8, NO_OVERLAP)
    assert sim.step_s == pytest.approx((10_000 * 8 + 7) * 3.0, rel=1e-12)
    assert sim.stage_compute_s == pytest.approx((10_000 * 8 * 3.0,) * 8, rel=1e-12)
    assert sim.placed < 10_000


def test_a_recorded_schedule_beyond_the_limit_is_refused_in_one_line() -> None:
    from memtune.errors import InputError

    with pytest.raises(InputError, match="the simulation stops at 1,000,000"):
        simulate(stages(8, v=8), 10_000, 8, NO_OVERLAP, record_events=True)


def test_events_are_recorded_only_when_asked_and_change_no_time() -> None:
    work = stages(2)
    quiet, recorded = simulate(work, 4, 2, NO_OVERLAP), simulate(work, 4, 2, NO_OVERLAP, record_events=True)
    assert quiet.events == () and len(recorded.events) >= 2 * 2 * 4
    assert (quiet.step_s, quiet.stage_compute_s, quiet.stage_exposed_comm_s) == (
        recorded.step_s,
        recorded.stage_compute_s,
        recorded.stage_exposed_comm_s,
    )


def _random_schedule(
    rng: random.Random, max_microbatches: int, alone: bool = False
) -> tuple[list[StageWork], int, int, Overlap]:
    """Random stages (each chunk its own durations, or every stage but the last alike; the host's
    work per pass none, below or above the GPU's, some passes making the host wait), a
    microbatch count and group Megatron accepts (PIP010, PIP012), and random overlap settings
    (with ``alone``, sometimes every stage run alone)."""
    p, v = rng.randint(1, 6), rng.randint(1, 4)
    if p == 1:
        v = 1
    group = rng.choice([p, p, rng.randint(p, 2 * p)]) if v > 1 else p
    while True:
        m = rng.randint(1, max_microbatches)
        if v == 1 or (group <= m and not 0 < m % group < p):
            break

    def chunk(last: bool) -> ChunkWork:
        some = lambda top: rng.choice([0.0, rng.uniform(0, top)])  # noqa: E731
        host = rng.choice([0.0, 0.5, 1.5])  # the host's work against the GPU's, per pass
        forward, backward = rng.uniform(0.5, 2), rng.uniform(1, 4)
        return ChunkWork(
            forward,
            backward,
            tp_forward_s=some(0.3),
            tp_backward_s=some(0.3),
            tp_backward_blocking_s=some(0.1),
            ep_forward_s=some(0.5),
            ep_backward_s=some(0.5),
            output_wgrad_s=rng.uniform(0, 0.5) if last else 0.0,
            grad_reduce_s=some(3),
            param_gather_s=some(3),
            buckets=rng.randint(1, 4),
            forward_host_s=host * rng.uniform(0.5, 1.5) * forward,
            backward_host_s=host * rng.uniform(0.5, 1.5) * backward,
            forward_syncs=rng.random() < 0.2,
            backward_syncs=rng.random() < 0.1,
        )

    alike = rng.random() < 0.5
    shared = tuple(chunk(False) for _ in range(v))
    work = [
        StageWork(
            shared if alike and r < p - 1 else tuple(chunk(r == p - 1 and c == v - 1) for c in range(v)),
            rng.choice([0.0, rng.uniform(0, 0.2)]),
            rng.uniform(0, 2),
        )
        for r in range(p)
    ]
    overlap = Overlap(
        overlap_grad_reduce=rng.random() < 0.5,
        overlap_param_gather=rng.random() < 0.5,
        align_param_gather=rng.random() < 0.3,
        overlap_moe_expert_parallel_comm=rng.random() < 0.3,
        delay_wgrad_compute=rng.random() < 0.3,
        deferred_output_wgrad_microbatches=rng.choice([0, 0, m, rng.randint(1, m)]) if p > 1 else 0,
        overlap_p2p_comm=rng.random() < 0.5,
        single_device_connection=rng.random() < 0.5,
        pipeline_syncs_host=rng.random() < 0.3,
        stages_alone=alone and rng.random() < 0.2,
    )
    return work, m, group, overlap


def test_skipping_repeated_periods_gives_the_step_of_placing_every_pass() -> None:
    """On 400 random schedules (long enough that most repeat a steady period), the simulation
    that skips repeated periods gives what placing every pass gives, stage by stage, to
    rounding; and it places fewer passes on the long ones."""
    rng = random.Random(20)
    skipped = 0
    for _ in range(400):
        work, m, group, overlap = _random_schedule(rng, 200, alone=True)
        full = simulate(work, m, group, overlap, record_events=True)
        periodic = simulate(work, m, group, overlap)
        assert periodic.step_s == pytest.approx(full.step_s, rel=1e-9)
        assert periodic.stage_compute_s == pytest.approx(full.stage_compute_s, rel=1e-9)
        assert periodic.stage_exposed_comm_s == pytest.approx(full.stage_exposed_comm_s, rel=1e-9, abs=1e-9)
        skipped += periodic.placed < full.placed
    assert skipped >= 100


def test_the_bound_is_never_above_the_simulated_step() -> None:
    """``step_bound`` on 2,000 random schedules: never above the simulated step (to rounding),
    and equal to it for a one-forward-one-backward pipeline of identical stages without sends,
    where the bubble is exactly p - 1 forwards and backwards."""
    rng = random.Random(21)
    for _ in range(2000):
        work, m, group, overlap = _random_schedule(rng, 40)
        assert step_bound(work, m, overlap) <= simulate(work, m, group, overlap).step_s * (1 + 1e-12)
    even = stages(4, optimizer=0.5)  # (8 + 3) x 3 s + 0.5 s
    assert step_bound(even, 8, NO_OVERLAP) == simulate(even, 8, 4, NO_OVERLAP).step_s == 33.5


def test_spreading_the_whole_model_bounds_every_split() -> None:
    # The whole model's passes (F 8 s, B 16 s over 8 chunks of F 1, B 2) over 4 stages, M 4:
    # 4 x 24 / 4 = 24 s, below the 1F1B step of (4 + 3) x 6 s.
    whole = ChunkWork(8.0, 16.0)
    assert spread_bound(whole, 4, 4, NO_OVERLAP) == pytest.approx(24.0)
    assert simulate(stages(4, v=2), 4, 4, NO_OVERLAP).step_s >= 24.0


def test_the_host_runs_ahead_of_the_gpu_across_passes() -> None:
    # One stage, 3 microbatches. Forwards: 1 s of kernels the host takes 2 s to issue;
    # backwards: 2 s of kernels issued in 1 s. Taking the longer side per pass gives
    # 3 x (2 + 2) = 12 s; the host runs ahead under the backwards instead: it issues F0 [0, 2],
    # B0 [2, 3], F1 [3, 5], B1 [5, 6], F2 [6, 8], B2 [8, 9]; the GPU runs F0 until the host is
    # done with it [0, 2], B0 [2, 4], F1 until its last launch [4, 5], B1 [5, 7], F2 [7, 8],
    # B2 [8, 10]: 10 s, the whole step's larger side (GPU 9 s, host 9 s) plus the first launch.
    work = ChunkWork(forward_s=1.0, backward_s=2.0, forward_host_s=2.0, backward_host_s=1.0)
    sim = simulate([StageWork((work,), 0.0, 0.0)], 3, 1, NO_OVERLAP)
    assert sim.step_s == pytest.approx(10.0)
    assert sim.stage_compute_s == pytest.approx((10.0,))
    # a host-bound step takes the host's total; a GPU-bound one the GPU's
    host_bound = ChunkWork(forward_s=1.0, backward_s=2.0, forward_host_s=3.0, backward_host_s=3.0)
    assert simulate([StageWork((host_bound,), 0.0, 0.0)], 3, 1, NO_OVERLAP).step_s == pytest.approx(18.0)
    gpu_bound = ChunkWork(forward_s=1.0, backward_s=2.0, forward_host_s=0.5, backward_host_s=0.5)
    assert simulate([StageWork((gpu_bound,), 0.0, 0.0)], 3, 1, NO_OVERLAP).step_s == pytest.approx(9.0)


def test_a_pass_that_waits_for_the_gpu_stops_the_host_running_ahead() -> None:
    # The same step with forwards that make the host wait (MoE dispatch): each forward's host
    # side (2 s, its waits included) starts only when the GPU is free, and the host resumes
    # when the forward ends: F0 [0, 2], B0 [2, 4] (issued [2, 3]), F1 [4, 6], B1 [6, 8],
    # F2 [8, 10], B2 [10, 12].
    work = ChunkWork(
        forward_s=1.0, backward_s=2.0, forward_host_s=2.0, backward_host_s=1.0, forward_syncs=True
    )
    assert simulate([StageWork((work,), 0.0, 0.0)], 3, 1, NO_OVERLAP).step_s == pytest.approx(12.0)


def test_a_dispatch_sync_in_a_combined_1f1b_pair_finds_the_partner_queued() -> None:
    # Forwards that make the host wait (2 s to issue, 1 s of kernels) and backwards of 3 s the
    # host issues in 0.5 s. Alone, every forward holds the GPU for its host's 2 s: F0 [0, 2],
    # B0 [2, 5], F1 [5, 7], B1 [7, 10], F2 [10, 12], B2 [12, 15]. Combined 1F1B (F0, then the
    # pairs (F1, B0), (F2, B1), then B2) issues each forward's dispatch after its partner's
    # expert backward, so a paired forward's wait no longer idles the GPU and the host runs
    # ahead through it: F0 [0, 2] (alone, it still waits), F1 [2, 4] (issued [2, 4]), B0 [4, 7]
    # (issued by 4.5), F2 [7, 8] (issued [4.5, 6.5]), B1 [8, 11], B2 [11, 14].
    work = ChunkWork(
        forward_s=1.0, backward_s=3.0, forward_host_s=2.0, backward_host_s=0.5, forward_syncs=True
    )
    stage = [StageWork((work,), 0.0, 0.0)]
    assert simulate(stage, 3, 1, NO_OVERLAP).step_s == pytest.approx(15.0)
    paired = Overlap(single_device_connection=False, overlap_moe_expert_parallel_comm=True)
    assert simulate(stage, 3, 1, paired).step_s == pytest.approx(14.0)


def test_a_host_that_runs_ahead_does_not_stop_a_long_steady_phase_being_skipped() -> None:
    # The long interleaved schedule above with host work at half the GPU's per pass: a pass
    # starts when the host begins issuing it and the host issues it in half the pass's time, so
    # the host never holds the GPU back, the step is the host-free one, and its steady periods
    # still repeat (the host runs further ahead of the GPU each period, and is moved by its own
    # work when they are skipped).
    sim = simulate(stages(8, v=8, forward_host_s=0.5, backward_host_s=1.0), 10_000, 8, NO_OVERLAP)
    assert sim.step_s == pytest.approx((10_000 * 8 + 7) * 3.0, rel=1e-12)
    assert sim.placed < 10_000
    # with the host slower than the GPU (every pass 2 s more to issue than to run), each stage
    # runs at its host's pace: the last stage's host is done issuing at 10,000 x 8 x (3 + 4) s,
    # after which its last backward's gradient crosses the seven stages before it, 2 s each;
    # and the periods repeat as well
    slow = simulate(stages(8, v=8, forward_host_s=3.0, backward_host_s=4.0), 10_000, 8, NO_OVERLAP)
    assert slow.step_s == pytest.approx(10_000 * 8 * 7.0 + 7 * 2.0, rel=1e-12)
    assert slow.placed < 10_000


def test_every_pass_that_makes_the_host_wait_takes_the_longer_of_host_and_gpu() -> None:
    # Batched pipeline exchanges: the host cannot run ahead, so with forwards that take 2 s to
    # issue and 1 s to run, and backwards 1 s and 2 s, each microbatch costs 2 + 2 s on one
    # stage: 3 x 4 s (against 10 s when the host runs ahead, above); the bound says as much
    work = ChunkWork(forward_s=1.0, backward_s=2.0, forward_host_s=2.0, backward_host_s=1.0)
    waits = Overlap(single_device_connection=False, pipeline_syncs_host=True)
    assert simulate([StageWork((work,), 0.0, 0.0)], 3, 1, waits).step_s == pytest.approx(12.0)
    assert step_bound([StageWork((work,), 0.0, 0.0)], 3, waits) == pytest.approx(12.0)
    # running ahead, the bound is the larger of the step's host and GPU totals: 9 s of each
    assert step_bound([StageWork((work,), 0.0, 0.0)], 3, NO_OVERLAP) == pytest.approx(9.0)


def test_a_stage_run_alone_waits_for_no_other_stage() -> None:
    # 1F1B over two stages takes (2 + 2 - 1) x 3 s; each stage alone, as one rank under the
    # fake process group, runs its two microbatches back to back: 2 x 3 s
    alone = simulate(stages(2), 2, 2, Overlap(single_device_connection=False, stages_alone=True))
    assert alone.step_s == pytest.approx(6.0)
    assert alone.stage_idle_s == pytest.approx((0.0, 0.0))
