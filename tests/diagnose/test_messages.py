import pytest

from memtune.diagnose.messages import parse_allocator_message, parse_async_message
from tests.diagnose.diagnose_samples import (
    MSG_14_CACHED,
    MSG_21_CAPACTY,
    MSG_24_PRIVATE_POOLS,
    MSG_211_FRAGMENTATION,
    MSG_211_OTHER_PROCESS,
    MSG_ASYNC,
    MSG_OLD_TEXTGEN,
)

GiB, MiB = 1 << 30, 1 << 20


def test_211_message_fields_in_bytes():
    n = parse_allocator_message(MSG_211_FRAGMENTATION)
    assert n.requested == 2 * GiB
    assert n.device == 0
    assert n.total == 150109106995  # 139.80 × 2^30, rounded
    assert n.free == 3271557  # 3.12 × 2^20
    assert n.this_process == 150098369577
    assert n.allocated == 95863670047
    assert n.unallocated == 50 * GiB
    assert n.private_pools is None and n.allowed is None and n.other_processes == {}
    assert n.format == "2.11+"


def test_21_typo_fingerprint_and_other_process():
    n = parse_allocator_message(MSG_21_CAPACTY)
    assert n.format == "2.1"
    assert n.total == round(79.15 * GiB)
    assert n.other_processes == {2514: round(77.99 * GiB)}
    assert n.unallocated == round(6.14 * GiB)


def test_private_pools_and_format():
    n = parse_allocator_message(MSG_24_PRIVATE_POOLS)
    assert n.private_pools == 20 * GiB
    assert n.format == "2.2-2.8"


def test_other_process_and_bytes_unit():
    n = parse_allocator_message(MSG_211_OTHER_PROCESS)
    assert n.allocated == 512
    assert n.other_processes == {1234: round(60.51 * GiB)}
    assert n.this_process == 612 * MiB
    # 139.80 − 78.68 − 512 bytes − 2 MiB of device memory is not this allocator's
    assert n.outside_allocator == round(139.80 * GiB) - round(78.68 * GiB) - 512 - 2 * MiB


def test_old_format_unallocated_is_reserved_minus_allocated():
    n = parse_allocator_message(MSG_OLD_TEXTGEN)
    assert n.requested == 166 * MiB
    assert n.free == 0
    assert n.allocated == round(6.93 * GiB)
    assert n.unallocated == round(7.22 * GiB) - round(6.93 * GiB)
    assert n.format == "1.5-2.0"


def test_oldest_cached_format():
    n = parse_allocator_message(MSG_14_CACHED)
    assert n.unallocated == round(9.87 * GiB) - round(9.83 * GiB)
    assert n.format == "1.4 or older"


@pytest.mark.parametrize("width", [37, 80, 101])
def test_hard_wrapped_message_joined_without_separator_parses_the_same(width):
    whole = parse_allocator_message(MSG_211_FRAGMENTATION)
    pieces = [MSG_211_FRAGMENTATION[i : i + width] for i in range(0, len(MSG_211_FRAGMENTATION), width)]
    assert parse_allocator_message("".join(p.strip() for p in pieces)) == whole


def test_cudamallocasync_report():
    n = parse_async_message(MSG_ASYNC)
    assert (n.backend, n.device, n.allocated, n.requested) == ("cudaMallocAsync", 0, 139 * GiB, 1024 * MiB)
    assert n.total == round(139.80 * GiB) and n.free == round(3.12 * MiB)
    assert n.allowed is None  # 17179869184.00 GiB means no fraction was set


def test_garbage_size():
    assert parse_allocator_message("CUDA out of memory. Tried to allocate more than 1EB memory.").garbage_size
