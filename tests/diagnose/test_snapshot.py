import pickle

import pytest

from memtune.diagnose.snapshot import load_plain_pickle, plot, read_snapshot, summarise, timeline
from memtune.errors import InputError
from tests.diagnose.diagnose_samples import FIXTURES

REAL = FIXTURES / "snapshot-fragmentation-torch2.11.pickle"
GiB = 1 << 30


def test_real_snapshot_summary():
    s = summarise(read_snapshot(REAL), str(REAL))
    # docs/allocator.md C1 repro: a 100 GiB segment carved into 1 GiB tensors, every other one freed, 2 GiB requested
    assert s.reserved == 149554200576  # 139.28 GiB
    assert s.allocated == 95867109376  # 89.28 GiB, as the OOM message says
    assert s.inactive == s.fragmented == 50 * GiB
    assert s.largest_free_block == 1 * GiB
    assert s.segments == 52 and s.segment_sizes[0] == (GiB, 39)
    assert s.failed_request.size == 2 * GiB and s.failed_request.device_free == 3276800
    assert s.expandable_segments is False
    assert s.label == "fragmentation"
    assert s.top_sites[0].bytes == 50 * GiB and s.top_sites[0].blocks == 50
    assert s.top_sites[0].frame.endswith("probe.py:283 in _frag")
    assert round(s.fragmentation_ratio, 4) == round(50 * GiB / 149554200576, 4)


def test_expandable_snapshot_rules_fragmentation_out():
    snap = read_snapshot(REAL)
    snap["allocator_settings"] = dict(snap["allocator_settings"], expandable_segments=True)
    assert summarise(snap, "x").label == "capacity"


def test_timeline_is_anchored_at_the_final_totals():
    snap = read_snapshot(REAL)
    times, allocated, reserved, ooms = timeline(snap)
    assert allocated[-1] == 95867109376 and reserved[-1] == 149554200576
    assert reserved[0] == 100 * GiB and allocated[0] == 0  # first event: the 100 GiB segment
    assert len(ooms) == 5 and times == sorted(times)


def test_timeline_skips_trace_entries_whose_action_is_not_text():
    snap = {
        "segments": [{"total_size": 4096, "blocks": [{"size": 1024, "state": "active_allocated"}]}],
        "device_traces": [
            [
                {"action": ["alloc"], "size": 512, "time_us": 10},
                {"action": "alloc", "size": 1024, "time_us": 20},
            ]
        ],
    }
    times, allocated, reserved, ooms = timeline(snap)
    # the listed action counts as nothing; the alloc brings the curve to the final 1024 bytes
    assert times == [0.0, 1e-05] and allocated == [0, 1024] and reserved == [4096, 4096] and ooms == []


def test_plot_writes_a_png(tmp_path):
    out = tmp_path / "mem.png"
    plot(read_snapshot(REAL), out, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _reduce_pickle(module: bytes, name: bytes, arg: bytes) -> bytes:
    """Protocol-0 bytes for module.name(arg), written by hand so the test never builds the callable."""
    return b"c" + module + b"\n" + name + b"\n(V" + arg + b"\ntR."


def test_pickle_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    evil = _reduce_pickle(b"os", b"system", b"touch " + str(marker).encode())
    path = tmp_path / "evil.pickle"
    path.write_bytes(evil)
    with pytest.raises(InputError) as exc:
        read_snapshot(path)
    assert "references os.system" in exc.value.problems[0] and "refused" in exc.value.problems[0]
    assert not marker.exists()


@pytest.mark.parametrize(
    "opcodes",
    [
        _reduce_pickle(b"builtins", b"eval", b"1+1"),
        b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06getcwd\x93)R.",  # STACK_GLOBAL
        b"(ios\nsystem\nV/bin/true\n.",  # INST
        b"\x80\x02\x82\x01.",  # EXT1: the copyreg extension registry
        b"P1\n.",  # persistent id
    ],
)
def test_every_way_to_reach_a_callable_is_refused(opcodes):
    with pytest.raises(InputError):
        load_plain_pickle(opcodes, "x")


def test_truncated_and_wrong_pickles(tmp_path):
    data = REAL.read_bytes()
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as exc:
        read_snapshot(cut)
    assert "not a readable pickle" in exc.value.problems[0]
    other = tmp_path / "other.pickle"
    other.write_bytes(pickle.dumps({"weights": [1, 2]}))
    with pytest.raises(InputError) as exc:
        read_snapshot(other)
    assert exc.value.problems == [f"{other}: a pickle, but not a memory snapshot (no 'segments' list)"]
    empty = tmp_path / "empty.pickle"
    empty.write_bytes(b"")
    with pytest.raises(InputError):
        read_snapshot(empty)


def test_deeply_nested_pickle_is_rejected_cleanly(tmp_path):
    path = tmp_path / "deep.pickle"
    path.write_bytes(b"\x80\x02" + b"]" * 200000 + b"a" * 199999 + b".")  # lists nested 200000 deep
    with pytest.raises(InputError) as exc:
        read_snapshot(path)
    assert "not a memory snapshot" in exc.value.problems[0]


def test_size_cap(tmp_path, monkeypatch):
    import memtune.diagnose.snapshot as snapshot

    monkeypatch.setattr(snapshot, "MAX_SNAPSHOT_BYTES", 1000)
    with pytest.raises(InputError) as exc:
        read_snapshot(REAL)
    assert "larger than" in exc.value.problems[0]
