"""Real OOMs produced on an H200 by benchmarks/gpu/oom_fixtures.py; active once the files are there."""

import pytest

from memtune.diagnose import diagnose
from memtune.diagnose.snapshot import read_snapshot, summarise
from tests.diagnose.diagnose_samples import FIXTURES

H200 = FIXTURES / "h200"


def _needs(name):
    return pytest.mark.skipif(
        not (H200 / name).exists(), reason=f"tests/diagnose/fixtures/h200/{name} not produced yet"
    )


@_needs("capacity.log")
def test_capacity():
    d = diagnose([str(H200 / "capacity.log")])
    assert d.verdict.label == "capacity" and d.verdict.confidence == "high"
    n = d.verdict.numbers
    assert n.requested == 4 << 30 and n.unallocated < (512 << 20)


@_needs("fragmentation.log")
def test_fragmentation():
    d = diagnose([str(H200 / "fragmentation.log")])
    assert d.verdict.label == "fragmentation"
    n = d.verdict.numbers
    assert n.requested == 2 << 30 and n.unallocated >= n.requested


@_needs("fragmentation-expandable.log")
def test_same_pattern_with_expandable_segments_is_capacity():
    d = diagnose([str(H200 / "fragmentation-expandable.log")])
    assert d.verdict.label == "capacity"


@_needs("capacity-cudamallocasync.log")
def test_cudamallocasync():
    d = diagnose([str(H200 / "capacity-cudamallocasync.log")])
    assert d.verdict.label == "capacity"
    assert d.verdict.numbers.backend == "cudaMallocAsync"


@_needs("fragmentation-snapshot.pickle")
def test_snapshot():
    s = summarise(read_snapshot(H200 / "fragmentation-snapshot.pickle"), "h200")
    assert s.label == "fragmentation"
    assert s.largest_free_block < s.failed_request.size <= s.inactive + (s.failed_request.device_free or 0)


def test_snapshot_names_the_users_python_line_not_the_allocators_cpp_frames():
    s = summarise(read_snapshot(H200 / "fragmentation-snapshot.pickle"), "h200")
    top = s.top_sites[0]
    assert "oom_fixtures.py" in top.frame and " in fragmentation" in top.frame
