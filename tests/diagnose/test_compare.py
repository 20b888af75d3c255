"""Snapshot comparison: the live set at each peak, attributed to sites, categories and phases."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from memtune.cli import main
from memtune.diagnose.compare import (
    BACKWARD,
    BEFORE_TRACE,
    FORWARD,
    OPTIMIZER,
    SETUP_STATE,
    Category,
    compare,
    compare_ranks,
    profile,
)
from memtune.errors import InputError

REAL = Path(__file__).parent / "fixtures/snapshot-fragmentation-torch2.11.pickle"  # ../shared/reference/
MiB = 1 << 20

WEIGHT = [
    {
        "filename": "/opt/megatron/core/tensor_parallel/layers.py",
        "line": 50,
        "name": "_initialize_affine_weight_gpu",
    }
]
ATTENTION = [{"filename": "/opt/megatron/core/transformer/attention.py", "line": 88, "name": "forward"}]
EXPERTS = [{"filename": "/opt/megatron/core/transformer/moe/experts.py", "line": 120, "name": "forward"}]
ADAM = [{"filename": "/usr/lib/python3/site-packages/torch/optim/adam.py", "line": 9, "name": "_init_group"},
        {"filename": "/opt/megatron/core/optimizer/optimizer.py", "line": 70, "name": "step"}]  # fmt: skip
BACKWARD_CALL = [
    {"filename": "/opt/megatron/core/pipeline_parallel/schedules.py", "line": 400, "name": "backward_step"}
]


def _snapshot(
    events: list[tuple[str, int, int, list[dict[str, object]]]], live: dict[int, tuple[int, list]]
) -> dict:
    """A snapshot whose trace is `events` (action, address, size, frames) and whose segments hold `live`."""
    blocks = [
        {"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": f}
        for a, (s, f) in live.items()
    ]
    trace = [
        {"action": act, "addr": a, "size": s, "stream": 0, "time_us": 1000 * i, "frames": f}
        for i, (act, a, s, f) in enumerate(events)
    ]
    segment = {"device": 0, "address": 0, "total_size": 1 << 34, "segment_pool_id": (0, 0), "blocks": blocks}
    return {"segments": [segment], "device_traces": [trace], "allocator_settings": {}}


def _training(extra_expert_bytes: int = 0) -> dict:
    """Weights (before the trace), two activations in forward, a backward that frees them, then Adam."""
    events = [
        ("alloc", 0x1000, 100 * MiB, ATTENTION),
        ("alloc", 0x2000, 50 * MiB, EXPERTS),
    ]
    if extra_expert_bytes:
        events.append(("alloc", 0x3000, extra_expert_bytes, EXPERTS))
    events += [
        ("alloc", 0x4000, 30 * MiB, BACKWARD_CALL),
        ("alloc", 0x5000, 20 * MiB, []),  # autograd's engine thread: no Python stack
        ("free_completed", 0x1000, 100 * MiB, []),
        ("free_completed", 0x2000, 50 * MiB, []),
        ("alloc", 0x6000, 400 * MiB, ADAM),
    ]
    if extra_expert_bytes:
        events.insert(-1, ("free_completed", 0x3000, extra_expert_bytes, []))
    live = {0x100: (1000 * MiB, WEIGHT), 0x4000: (30 * MiB, BACKWARD_CALL), 0x5000: (20 * MiB, []),
            0x6000: (400 * MiB, ADAM)}  # fmt: skip
    return _snapshot(events, live)


def test_the_peak_is_rebuilt_from_the_trace_not_read_at_the_snapshot():
    p = profile(_training(), "a")
    # Weights 1000 + attention 100 + experts 50 + backward 30 + 20 = 1200 MiB before the frees;
    # after them 1050 + Adam 400 = 1450 MiB at the end, which is the peak.
    assert p.peak_bytes == 1450 * MiB == p.snapshot_bytes
    assert p.peak_phase == OPTIMIZER
    assert p.by_category == {"weights": 1000 * MiB, "gradients": 50 * MiB, "optimizer state": 400 * MiB}
    assert p.by_phase == {BEFORE_TRACE: 1000 * MiB, BACKWARD: 50 * MiB, OPTIMIZER: 400 * MiB}


def test_a_peak_inside_the_trace_counts_what_was_live_then():
    snap = _snapshot(
        [
            ("alloc", 0x1000, 300 * MiB, ATTENTION),
            ("free_completed", 0x1000, 300 * MiB, []),
            ("alloc", 0x2000, 10 * MiB, ATTENTION),
        ],
        {0x100: (64 * MiB, WEIGHT), 0x2000: (10 * MiB, ATTENTION)},
    )
    p = profile(snap, "a")
    assert (p.peak_bytes, p.snapshot_bytes) == (364 * MiB, 74 * MiB)
    assert p.peak_phase == FORWARD
    assert p.by_site == {"tensor_parallel/layers.py:50 in _initialize_affine_weight_gpu": 64 * MiB,
                         "transformer/attention.py:88 in forward": 300 * MiB}  # fmt: skip
    assert p.by_category == {"weights": 64 * MiB, "activations": 300 * MiB}


def test_the_growth_is_attributed_to_the_change_s_tensors():
    c = compare(profile(_training(), "a"), profile(_training(extra_expert_bytes=256 * MiB), "b"))
    # The extra expert activation is freed before Adam allocates: B peaks in backward, at
    # 1000 + 100 + 50 + 256 + 30 + 20 = 1456 MiB, 6 MiB over A's 1450 at the end.
    assert (c.growth, c.b.peak_phase) == (6 * MiB, BACKWARD)
    # One that outlives the backward is live at B's peak, and named.
    snap_b = _training()
    snap_b["segments"][0]["blocks"].append(
        {"address": 0x9000, "size": 256 * MiB, "state": "active_allocated", "frames": EXPERTS}
    )
    snap_b["device_traces"][0].insert(
        2, {"action": "alloc", "addr": 0x9000, "size": 256 * MiB, "time_us": 1500, "frames": EXPERTS}
    )
    c = compare(profile(_training(), "a"), profile(snap_b, "b"))
    assert c.growth == 256 * MiB
    assert (c.sites[0].key, c.sites[0].change) == ("moe/experts.py:120 in forward", 256 * MiB)
    assert (c.categories[0].key, c.categories[0].change) == ("activations", 256 * MiB)
    assert (c.phases[0].key, c.phases[0].change) == (FORWARD, 256 * MiB)


def test_a_category_of_the_user_s_own_is_tried_first():
    p = profile(_training(), "a", (Category.parse("moe=moe/experts"),))
    assert "moe" not in p.by_category  # the expert block is freed before the peak
    q = profile(_training(), "a", (Category.parse("adam=optim/adam"),))
    assert q.by_category["adam"] == 400 * MiB and "optimizer state" not in q.by_category


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("noequals", "--category noequals: expected NAME=REGEX, e.g. 'router=moe/router'"),
        (
            "x=(",
            "--category x=(: not a regular expression (missing ), unterminated subpattern at position 0)",
        ),
    ],
)
def test_a_bad_category_is_one_line(text, message):
    with pytest.raises(InputError) as err:
        Category.parse(text)
    assert str(err.value) == message


def test_without_a_trace_the_peak_is_the_snapshot():
    snap = _snapshot([], {0x100: (64 * MiB, WEIGHT)})
    p = profile(snap, "a")
    assert (p.peak_bytes, p.traced, p.by_category) == (64 * MiB, False, {"weights": 64 * MiB})
    setup_only = _snapshot([("alloc", 0x2000, MiB, [{"filename": "/x/train.py", "line": 3, "name": "build"}])],
                           {0x2000: (MiB, [{"filename": "/x/train.py", "line": 3, "name": "build"}])})  # fmt: skip
    assert profile(setup_only, "b").by_category == {SETUP_STATE: MiB}


def test_the_real_snapshot_against_itself_changes_nothing():
    from memtune.diagnose.snapshot import read_snapshot, timeline

    snap = read_snapshot(REAL)
    p = profile(snap, "real")
    _, allocated, _, _ = timeline(snap)
    assert p.peak_bytes == max(allocated)  # the same curve as diagnose --plot draws
    assert sum(p.by_site.values()) == p.peak_bytes
    c = compare(p, profile(snap, "real"))
    assert c.growth == 0 and all(d.change == 0 for d in c.sites + c.categories + c.phases)


def _write(path: Path, snap: dict) -> str:
    path.write_bytes(pickle.dumps(snap))
    return str(path)


def test_a_folder_of_ranks_names_the_highest_and_what_it_holds_over_the_median(tmp_path, capsys):
    for rank, extra in ((0, 0), (1, 0), (2, 0), (3, 512)):
        snap = _snapshot([], {0x100: (1000 * MiB, WEIGHT), 0x200: (100 * MiB + extra * MiB, EXPERTS)})
        _write(tmp_path / f"snapshot_rank{rank}.pickle", snap)
    r = compare_ranks(str(tmp_path))
    assert (r.highest.rank, r.median.rank) == (3, 1)
    assert (r.comparison.sites[0].key, r.comparison.sites[0].change) == (
        "moe/experts.py:120 in forward",
        512 * MiB,
    )
    assert main(["diff", "--snapshots", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["highest_rank"], data["median_rank"], data["comparison"]["growth_bytes"]) == (
        3,
        1,
        512 * MiB,
    )


def test_diff_and_diagnose_print_the_same_comparison(tmp_path, capsys):
    a = _write(tmp_path / "a.pickle", _training())
    b = _write(tmp_path / "b.pickle", _training())
    assert main(["diff", "--snapshots", a, b]) == 0
    diffed = capsys.readouterr().out
    assert main(["diagnose", "--snapshot", a, "--snapshot", b]) == 0
    assert capsys.readouterr().out == diffed
    assert "B − A at the peak: +0.00 GiB (+0.0%)" in diffed
    assert all(len(line) <= 80 for line in diffed.splitlines())
    plot = tmp_path / "cmp.png"
    assert main(["diff", "--snapshots", a, b, "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_folder_with_one_snapshot_is_refused(tmp_path, capsys):
    _write(tmp_path / "only.pickle", _training())
    assert main(["diff", "--snapshots", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("needs at least two *.pickle snapshots, found 1")


def test_three_snapshots_to_diagnose_are_refused(tmp_path, capsys):
    a = _write(tmp_path / "a.pickle", _training())
    assert main(["diagnose", "--snapshot", a, "--snapshot", a, "--snapshot", a]) == 2
    assert "--snapshot given 3 times; give one, or two to compare" in capsys.readouterr().err


def test_megatron_s_schedule_names_do_not_decide_the_phase():
    schedule = {"filename": "/opt/megatron/core/pipeline_parallel/schedules.py", "line": 500,
                "name": "forward_backward_no_pipelining"}  # fmt: skip
    events = [
        (
            "alloc",
            0x1000,
            MiB,
            [*ATTENTION, {"filename": "/opt/x/schedules.py", "line": 1, "name": "forward_step"}, schedule],
        ),
        (
            "alloc",
            0x2000,
            MiB,
            [
                {"filename": "/usr/lib/torch/autograd/__init__.py", "line": 1, "name": "backward"},
                *BACKWARD_CALL,
                schedule,
            ],
        ),
    ]
    p = profile(_snapshot(events, {0x1000: (MiB, events[0][3]), 0x2000: (MiB, events[1][3])}), "a")
    assert p.by_phase == {FORWARD: MiB, BACKWARD: MiB}


def test_the_h200_pair_names_unfused_attention_s_softmax_as_the_growth():
    # benchmarks/gpu/snapshot-pair/: two `memtune measure --snapshot` runs on the H200 that
    # differ only in model.attention_backend (flash, unfused).
    from memtune.diagnose.snapshot import read_snapshot

    pair = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "snapshot-pair"
    flash, unfused = (
        profile(read_snapshot(pair / f"snap-{name}.pickle"), name) for name in ("flash", "unfused")
    )
    c = compare(flash, unfused)
    assert (flash.peak_phase, unfused.peak_phase) == ("forward", "backward")
    assert c.growth == unfused.peak_bytes - flash.peak_bytes > 0
    named = [d for d in c.sites if d.key != "(no stack outside PyTorch)"]
    grown = max(named, key=lambda d: d.change)
    assert grown.key.startswith("fusions/fused_softmax.py:") and "forward_torch_softmax" in grown.key
    assert grown.a == 0 and grown.change == 2 * 32 * 2048 * 2048 * 4  # fp32 probabilities, 2 layers
