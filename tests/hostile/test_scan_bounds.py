"""A log of many OOM messages: lines past the finding caps are counted, not read again (issue 29
item 5: 400,000 OOM lines took over 120 s)."""

from __future__ import annotations

from collections import Counter

import pytest

from memtune.diagnose import detectors, logscan
from memtune.diagnose.logscan import KEEP_PER_KIND, scan_text
from memtune.limits import MAX_FINDINGS_PER_KIND

OOM = (
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {r} has a total "
    "capacity of 79.10 GiB of which 1.00 GiB is free. Of the allocated memory 60.00 GiB is allocated by "
    "PyTorch, and 17.00 GiB is reserved by PyTorch but unallocated. See documentation for Memory Management"
)


@pytest.fixture
def detect_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    calls: Counter[str] = Counter()
    real = detectors.detect

    def counting(line: detectors.Line) -> list[detectors.Failure | detectors.Fact]:
        calls["detect"] += 1
        return real(line)

    monkeypatch.setattr(logscan.detectors, "detect", counting)
    return calls


def test_one_ranks_messages_past_its_cap_are_counted_without_the_detectors(detect_calls):
    result = scan_text("\n".join(OOM.format(r=0) for _ in range(2_000)) + "\n")
    assert len(result.failures) == KEEP_PER_KIND
    assert result.suppressed == Counter({"allocator_oom": 2_000 - KEEP_PER_KIND})
    assert detect_calls["detect"] == KEEP_PER_KIND


def test_many_ranks_messages_past_the_overall_cap_are_counted_the_same(detect_calls):
    lines = [OOM.format(r=r % 50) for r in range(3_000)]  # 50 ranks of one or two digits
    result = scan_text("\n".join(lines) + "\n")
    assert len(result.failures) == MAX_FINDINGS_PER_KIND
    assert result.suppressed == Counter({"allocator_oom": 3_000 - MAX_FINDINGS_PER_KIND})
    assert detect_calls["detect"] == MAX_FINDINGS_PER_KIND


def test_a_message_wrapped_over_two_lines_is_still_read_whole_each_time(detect_calls):
    first, _, rest = OOM.format(r=0).partition(" Of the allocated")
    result = scan_text(f"{first}\n Of the allocated{rest}\n" * 300)
    assert len(result.failures) == KEEP_PER_KIND
    assert result.suppressed == Counter({"allocator_oom": 300 - KEEP_PER_KIND})
    assert all("17.00 GiB is reserved" in f.text for f in result.failures)
    assert detect_calls["detect"] == 300  # its findings depend on the next line: never short-cut
