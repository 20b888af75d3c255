import pytest

from memtune.diagnose import detectors, diagnose_text
from memtune.diagnose.classify import ExpandableState, read_allocator
from memtune.diagnose.messages import AllocatorNumbers, parse_allocator_message
from tests.diagnose.diagnose_samples import (
    FAILURE_LINES,
    MSG_21_CAPACTY,
    MSG_24_PRIVATE_POOLS,
    MSG_211_CAPACITY,
    MSG_211_FRAGMENTATION,
    MSG_211_OTHER_PROCESS,
    MSG_ASYNC,
    MSG_OLD_MEGATRON60,
    MSG_OLD_TEXTGEN,
)

GiB, MiB = 1 << 30, 1 << 20


@pytest.mark.parametrize(
    "message, label",
    [
        (MSG_211_FRAGMENTATION, "fragmentation"),  # U 50 GiB ≥ R 2 GiB
        (MSG_OLD_MEGATRON60, "fragmentation"),  # 28.32 − 19.22 = 9.1 GiB ≫ 2.29 GiB
        (MSG_211_CAPACITY, "capacity"),
        (MSG_OLD_TEXTGEN, "capacity"),  # U 0.29 GiB ≥ R 0.16 GiB, but below the 512 MiB noise floor
        (
            MSG_211_OTHER_PROCESS,
            "capacity",
        ),  # R > U + F (docs/allocator.md C3); the 61 GiB co-tenant is named as the holder
        (
            MSG_24_PRIVATE_POOLS,
            "capacity",
        ),  # R > U + F; 20 GiB of CUDA-graph pools are PyTorch's own, in use (rule 5)
        (MSG_21_CAPACTY, "fragmentation"),  # U 6.14 GiB ≥ R 1.96 GiB
    ],
)
def test_allocator_rules(message, label):
    assert read_allocator(parse_allocator_message(message), None)[0] == label


def test_fragmentation_reason_quotes_the_numbers():
    _label, reasons = read_allocator(parse_allocator_message(MSG_211_FRAGMENTATION), None)
    assert reasons == [
        "reserved but unallocated 50.00 GiB > requested 2.00 GiB: the memory exists but not contiguously"
    ]


def test_expandable_segments_on_rules_fragmentation_out():
    label, reasons = read_allocator(parse_allocator_message(MSG_211_FRAGMENTATION), True)
    assert label == "capacity"
    assert "expandable segments were on, which rules it out" in reasons[0]


def test_fragmentation_assisted_when_cache_plus_free_covers_request():
    n = AllocatorNumbers(
        requested=6 * GiB, total=80 * GiB, free=3 * GiB, allocated=70 * GiB, unallocated=4 * GiB
    )
    label, reasons = read_allocator(n, False)
    assert label == "fragmentation" and "fragmentation-assisted" in reasons[0]


def test_tiny_request_on_a_full_gpu_is_capacity_with_the_incidental_reason():
    n = AllocatorNumbers(requested=2 * MiB, total=80 * GiB, free=0, allocated=79 * GiB, unallocated=0)
    label, reasons = read_allocator(n, None)
    assert label == "capacity" and "incidental" in reasons[0]


def test_async_backend_is_capacity_with_no_fragmentation_reading():
    d = diagnose_text(MSG_ASYNC)
    assert d.verdict.label == "capacity"
    assert d.verdict.ranks[0].root.failure.kind == "async_allocator_oom"


def test_nvml_zero_bytes_is_flagged_not_trusted():
    n = AllocatorNumbers(
        requested=30 * GiB,
        total=80 * GiB,
        free=2 * GiB,
        allocated=40 * GiB,
        unallocated=1 * GiB,
        this_process=0,
    )
    label, reasons = read_allocator(n, None)
    assert label == "capacity" and "container PID mismatch" in reasons[0]


@pytest.mark.parametrize("line, label", FAILURE_LINES)
def test_each_failure_line_is_recognised(line, label):
    d = diagnose_text("some preamble\n" + line + "\nsome epilogue\n")
    assert d.verdict.label == label, d.verdict.reasons
    assert d.verdict.ranks[0].root.failure.where.line == 2


@pytest.mark.parametrize("line, label", FAILURE_LINES)
def test_each_failure_line_passes_the_prefilter(line, label):
    raw = line.encode()
    assert any(t in raw for t in detectors.TRIGGERS)


def test_hint_is_not_evidence_of_expandable_segments():
    d = diagnose_text(MSG_211_FRAGMENTATION)
    assert d.verdict.expandable.on is None and d.verdict.label == "fragmentation"


def test_logged_alloc_conf_rules_fragmentation_out():
    d = diagnose_text("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" + MSG_211_FRAGMENTATION)
    assert d.verdict.expandable == ExpandableState(True, "log <text>:1")
    assert d.verdict.label == "capacity"


def test_unsupported_platform_warning_means_off():
    text = (
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n[W1001 01:18:06.108184462 CUDAAllocatorConfig.h:28] "
        "Warning: expandable_segments not supported on this platform (function operator())\n"
        + MSG_211_FRAGMENTATION
    )
    d = diagnose_text(text)
    assert d.verdict.expandable.on is False and d.verdict.label == "fragmentation"


def test_allocator_message_outranks_the_launchers_kill_on_other_lines():
    text = "[rank2]: " + MSG_211_CAPACITY + "\nE1129 failed (exitcode: -9) local_rank: 2\n"
    d = diagnose_text(text)
    assert d.verdict.label == "capacity" and d.verdict.failed_ranks == [2]


def test_one_rank_of_32_with_headroom_elsewhere():
    lines = ["using world size: 32, data-parallel size: 4"]
    lines += [
        f"[Rank {r}] (after 10 iterations) memory (MB) | allocated: 60000.0 | max allocated: 70000.0 | "
        f"reserved: 80000.0 | max reserved: 80000.0"
        for r in range(32)
    ]
    lines.append("[rank5]: torch.OutOfMemoryError: CUDA out of memory.")  # no numbers
    d = diagnose_text("\n".join(lines))
    # one failing rank among 32 is an uneven load on that rank (docs/allocator.md C8): still a shortage, said so
    assert d.verdict.label == "capacity"
    assert d.verdict.failed_ranks == [5] and d.verdict.known_ranks == 32
    assert d.verdict.confidence == "low"  # the label is the default for a message without numbers
    assert any(
        r.startswith("only 1 of 32 ranks failed") and "the load is uneven" in r for r in d.verdict.reasons
    )


def test_nothing_found():
    d = diagnose_text("iteration 1 | loss 2.3\niteration 2 | loss 2.2\n")
    assert d.verdict.label is None and d.fixes == []
