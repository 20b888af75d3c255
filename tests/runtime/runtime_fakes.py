"""Stand-ins for the device: allocator statistics and NVML readings given step by step."""

from __future__ import annotations

from memtune.runtime.stats import ALLOCATOR_KEYS


class SeriesStats:
    """Answers ``sample()`` from a list of per-step values, like ``torch.cuda.memory_stats``
    would after each step; counts peak resets so tests can check the monitor makes them."""

    def __init__(self, steps: list[dict[str, int]]):
        self.notes: list[str] = []
        self.steps = steps
        self.index = 0
        self.resets = 0

    def sample(self) -> dict[str, int | None]:
        values = self.steps[min(self.index, len(self.steps) - 1)]
        self.index += 1
        return {name: values.get(name) for name in ALLOCATOR_KEYS}

    def reset_peaks(self) -> None:
        self.resets += 1


class FixedDevice:
    def __init__(self, used: int | None, total: int | None):
        self.notes: list[str] = []
        self.used, self.total = used, total

    def sample(self) -> dict[str, int | None]:
        return {"device_used_bytes": self.used, "device_total_bytes": self.total}


def step_values(peak: int, allocated: int, reserved: int, retries: int = 0) -> dict[str, int]:
    return {
        "peak_allocated_bytes": peak,
        "allocated_bytes": allocated,
        "peak_reserved_bytes": reserved,
        "reserved_bytes": reserved,
        "peak_active_bytes": peak,
        "active_bytes": allocated,
        "num_alloc_retries": retries,
        "num_ooms": 0,
    }
