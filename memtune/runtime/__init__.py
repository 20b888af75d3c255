"""The running job, checked against the estimate: memory monitor, allocator set-up, OOM capture.

Nothing here imports torch until it is used: the monitor imports it when it starts, the OOM hook
when it is entered, and the allocator functions read torch's version without importing it.
``memtune run`` and ``memtune report`` (:mod:`memtune.runtime.cli`) build on these.
"""

from __future__ import annotations

from memtune.runtime.allocator import (
    AllocatorCheck,
    AllocatorConfigError,
    AllocatorSetup,
    check_allocator,
    configure_allocator,
)
from memtune.runtime.monitor import MemoryMonitor, MemoryWarning
from memtune.runtime.oom import capture_oom, write_snapshot

__all__ = [
    "AllocatorCheck",
    "AllocatorConfigError",
    "AllocatorSetup",
    "MemoryMonitor",
    "MemoryWarning",
    "capture_oom",
    "check_allocator",
    "configure_allocator",
    "write_snapshot",
]
