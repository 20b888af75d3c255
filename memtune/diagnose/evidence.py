"""What the log scanner found: failures (with the label each implies) and context facts."""

from __future__ import annotations

from dataclasses import dataclass

from memtune.diagnose.messages import AllocatorNumbers

# Classification labels (stable strings, also used in --json output)
FRAGMENTATION = "fragmentation"
CAPACITY = "capacity"
OUTSIDE_PYTORCH = "outside_pytorch"
HOST_OOM = "host_oom"
CONFIGURATION = "configuration"
NOT_OOM = "not_oom"
LABELS = (FRAGMENTATION, CAPACITY, OUTSIDE_PYTORCH, HOST_OOM, CONFIGURATION, NOT_OOM)

# How much a finding says about the cause. An allocator message with numbers outranks a
# launcher's "-9", which outranks a sentence in a pasted issue, which outranks a bare traceback.
EXPLICIT = 3
DIRECT = 2
NARRATIVE = 1
CIRCUMSTANTIAL = 0


@dataclass(frozen=True)
class Where:
    source: str
    line: int  # 1-based
    rank: int | None

    def __str__(self) -> str:
        rank = f" [rank {self.rank}]" if self.rank is not None else ""
        return f"{self.source}:{self.line}{rank}"


@dataclass(frozen=True)
class Failure:
    """One line (or wrapped message) that reports a failure."""

    kind: str  # detector name, e.g. "allocator_oom", "nccl_oom", "host_oom_kill"
    label: str | None  # None for allocator messages: their numbers decide (see classify)
    strength: int
    where: Where
    text: str  # the evidence, trimmed
    numbers: AllocatorNumbers | None = None
    note: str = ""  # why this kind of line implies its label
    consumed: int = 0  # following lines of the same stream that belong to this message


@dataclass(frozen=True)
class Fact:
    """Context that changes the reading of failures: allocator settings, world size, memory reports."""

    kind: str  # expandable_on | expandable_off | torch_version | exit_code | world_size | rank_memory | host_memory_percent | phase
    where: Where
    text: str
    # text (settings, torch version, phase), an int (world size, exit code), a percentage
    # (host memory) or (rank, max reserved bytes) (rank memory)
    value: str | int | float | tuple[int, int] | None = None
