"""Where the monitor's numbers come from: the CUDA caching allocator and NVML.

A :class:`StatsSource` is the seam between the monitor and the device. The real ones read
``torch.cuda.memory_stats`` and NVML; without CUDA the allocator source answers null fields and
says why once, so a monitor on a CPU-only process still writes honest records.
"""

from __future__ import annotations

from typing import Any, Protocol

ALLOCATOR_KEYS = {
    "peak_allocated_bytes": "allocated_bytes.all.peak",
    "allocated_bytes": "allocated_bytes.all.current",
    "peak_reserved_bytes": "reserved_bytes.all.peak",
    "reserved_bytes": "reserved_bytes.all.current",
    "peak_active_bytes": "active_bytes.all.peak",
    "active_bytes": "active_bytes.all.current",
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
}


class StatsSource(Protocol):
    """Allocator statistics of this process's device; fields a source cannot read are None."""

    notes: list[str]

    def sample(self) -> dict[str, int | None]:
        """The ``ALLOCATOR_KEYS`` fields since the last ``reset_peaks``."""
        ...

    def reset_peaks(self) -> None: ...


class DeviceSource(Protocol):
    """Device-level memory (every process on the GPU): ``device_used_bytes``, ``device_total_bytes``."""

    notes: list[str]

    def sample(self) -> dict[str, int | None]: ...


def _none(keys) -> dict[str, int | None]:
    return dict.fromkeys(keys)


class CudaAllocatorStats:
    """``torch.cuda.memory_stats()`` of the current device, peaks reset per step."""

    def __init__(self) -> None:
        import torch

        self.notes: list[str] = []
        self._torch: Any = torch
        self.available = torch.cuda.is_available()
        if not self.available:
            self.notes.append("CUDA is not available: the allocator fields are null")

    def sample(self) -> dict[str, int | None]:
        if not self.available:
            return _none(ALLOCATOR_KEYS)
        stats = self._torch.cuda.memory_stats()
        return {name: stats.get(key) for name, key in ALLOCATOR_KEYS.items()}

    def reset_peaks(self) -> None:
        if self.available:
            self._torch.cuda.reset_peak_memory_stats()


class NvmlDevice:
    """NVML's used and total memory of the device this process uses (``nvidia-ml-py``)."""

    KEYS = ("device_used_bytes", "device_total_bytes")

    def __init__(self, device_index: int | None) -> None:
        self.notes: list[str] = []
        self._handle: Any = None
        if device_index is None:
            self.notes.append("no CUDA device: the NVML fields are null")
            return
        try:
            import pynvml  # type: ignore[import-untyped]
        except ImportError:
            self.notes.append(
                "nvidia-ml-py is not installed (pip install nvidia-ml-py): the NVML fields are null"
            )
            return
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(_physical_index(device_index))
        except pynvml.NVMLError as exc:
            self.notes.append(f"NVML cannot be read ({exc}): the NVML fields are null")
            return
        self._nvml: Any = pynvml

    def sample(self) -> dict[str, int | None]:
        if self._handle is None:
            return _none(self.KEYS)
        info = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        return {"device_used_bytes": int(info.used), "device_total_bytes": int(info.total)}


def _physical_index(device_index: int) -> int:
    """NVML numbers devices physically; CUDA_VISIBLE_DEVICES renumbers them for CUDA."""
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return device_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if device_index < len(entries) and entries[device_index].isdigit():
        return int(entries[device_index])
    return device_index
