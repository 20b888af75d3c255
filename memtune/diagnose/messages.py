"""Numbers out of the out-of-memory messages PyTorch allocators print, in every format since 1.x.

Fields are searched one by one with whitespace-tolerant patterns rather than one template, so a
message that a terminal or Slurm wrapped (joined back without separators) or that lost its tail
still yields what it has. Field meanings are docs/allocator.md M1-M6.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memtune.diagnose.sizes import SIZE_PATTERN, to_bytes


def _tolerant(template: str) -> re.Pattern[str]:
    """Compile a message fragment in which every space may be absent or any run of whitespace."""
    return re.compile(r"\s*".join(template.split(" ")))


S = SIZE_PATTERN
_REQUESTED = _tolerant(rf"Tried to allocate {S}")
_REQUESTED_HUGE = _tolerant(r"Tried to allocate more than 1EB memory")
_DEVICE_TOTAL_NEW = _tolerant(rf"GPU ([0-9]{{1,9}}) has a total capac(?:i)?ty of {S}")
_DEVICE_TOTAL_OLD = _tolerant(rf"\(GPU ([0-9]{{1,9}}); {S} total capacity")
_FREE_NEW = _tolerant(rf"of which {S} is free")
_FREE_OLD = _tolerant(rf"; {S} free;")
_OTHER_PROCESS = _tolerant(rf"Process ([0-9]{{1,9}}) has {S} memory in use")
_THIS_PROCESS = _tolerant(rf"this process has {S} memory in use")
_ALLOWED = _tolerant(rf"{S} allowed;")
_ALLOCATED_NEW = _tolerant(rf"{S} is allocated by PyTorch")
_ALLOCATED_OLD = _tolerant(rf"{S} already allocated")
_PRIVATE_POOLS = _tolerant(rf"with {S} allocated in private pools")
_UNALLOCATED = _tolerant(rf"{S} is reserved by PyTorch but unallocated")
_RESERVED_OLD = _tolerant(rf"{S} (?:reserved in total by PyTorch|cached\))")

# Phrases that end an allocator message; a reader joins wrapped lines until one appears.
MESSAGE_END = _tolerant(r"(?:but unallocated|in total by PyTorch\)|cached\)|would exceed allowed memory)")

_ASYNC_FIELDS = {
    "allocated": _tolerant(rf"Currently allocated : {S}"),
    "requested": _tolerant(rf"Requested : {S}"),
    "total": _tolerant(rf"Device limit : {S}"),
    "free": _tolerant(rf"Free \(according to CUDA\): {S}"),
    "allowed": re.compile(rf"PyTorch\s*limit[^:]{{0,200}}:\s*{S}"),
}
_ASYNC_DEVICE = _tolerant(r"Allocation on device ([0-9]{1,9}) would exceed allowed memory")
_NO_FRACTION_SET = 17179869184 * (1 << 30)  # what cudaMallocAsync prints when no fraction is set


@dataclass(frozen=True)
class AllocatorNumbers:
    """What one allocator OOM message says, in bytes; None where the message lacks the field."""

    requested: int | None = None
    device: int | None = None
    total: int | None = None
    free: int | None = None
    allocated: int | None = None  # by PyTorch, including free bytes cached in private pools
    unallocated: int | None = None  # reserved by PyTorch but not allocated: the fragmentation number
    private_pools: int | None = None
    allowed: int | None = None  # set_per_process_memory_fraction limit
    this_process: int | None = None  # NVML: this process, PyTorch and everything else
    other_processes: dict[int, int] = field(default_factory=dict)  # pid -> bytes, NVML
    backend: str = "native"  # native | cudaMallocAsync
    format: str = "unknown"  # which PyTorch generation printed it
    garbage_size: bool = False  # "more than 1EB": a corrupt size, not a memory shortage

    @property
    def outside_allocator(self) -> int | None:
        """Device memory in use that this process's PyTorch allocator does not hold."""
        total, free, allocated = self.total, self.free, self.allocated
        if total is None or free is None or allocated is None:
            return None
        return max(0, total - free - allocated - (self.unallocated or 0))

    @property
    def nvml_unreliable(self) -> bool:
        """Containers often hide the real PID from NVML: the process then reports 0 bytes for itself."""
        return self.this_process == 0 and bool(self.allocated)


def _size(pattern: re.Pattern[str], text: str, group: int = 1) -> int | None:
    m = pattern.search(text)
    return to_bytes(m.group(group), m.group(group + 1)) if m else None


def _format_of(text: str) -> str:
    squeezed = re.sub(r"\s+", "", text)
    if "totalcapacty" in squeezed:
        return "2.1"
    if "optimizing-memory-usage-with-pytorch-cuda-alloc-conf" in squeezed:
        return "2.11+"
    if "PYTORCH_ALLOC_CONF=expandable_segments" in squeezed:
        return "2.9-2.10"
    if "inprivatepools" in squeezed or "PYTORCH_CUDA_ALLOC_CONF=expandable_segments" in squeezed:
        return "2.2-2.8"
    if "hasatotalcapacity" in squeezed:
        return "2.2+"
    if "reservedintotalbyPyTorch" in squeezed:
        return "1.5-2.0"
    if "cached)" in squeezed:
        return "1.4 or older"
    return "unknown"


def parse_allocator_message(text: str) -> AllocatorNumbers:
    """Parse the native caching allocator's message (text starts at or before "Tried to allocate")."""
    if _REQUESTED_HUGE.search(text):
        return AllocatorNumbers(garbage_size=True, format=_format_of(text))
    device = total = None
    if m := (_DEVICE_TOTAL_NEW.search(text) or _DEVICE_TOTAL_OLD.search(text)):
        device, total = int(m.group(1)), to_bytes(m.group(2), m.group(3))
    allocated = _size(_ALLOCATED_NEW, text)
    old_format = allocated is None
    if old_format:
        allocated = _size(_ALLOCATED_OLD, text)
    unallocated = _size(_UNALLOCATED, text)
    if unallocated is None and allocated is not None:
        reserved = _size(_RESERVED_OLD, text)
        if reserved is not None:
            unallocated = max(0, reserved - allocated)
    this_process = _size(_THIS_PROCESS, text)
    others = {int(m.group(1)): to_bytes(m.group(2), m.group(3)) for m in _OTHER_PROCESS.finditer(text)}
    return AllocatorNumbers(
        requested=_size(_REQUESTED, text),
        device=device,
        total=total,
        free=_size(_FREE_OLD if old_format else _FREE_NEW, text),
        allocated=allocated,
        unallocated=unallocated,
        private_pools=_size(_PRIVATE_POOLS, text),
        allowed=_size(_ALLOWED, text),
        this_process=this_process,
        other_processes=others,
        format=_format_of(text),
    )


def parse_async_message(text: str) -> AllocatorNumbers:
    """Parse the multi-line report of ``backend:cudaMallocAsync``."""
    values = {name: _size(pattern, text) for name, pattern in _ASYNC_FIELDS.items()}
    allowed = values["allowed"]
    device = _ASYNC_DEVICE.search(text)
    return AllocatorNumbers(
        requested=values["requested"],
        device=int(device.group(1)) if device else None,
        total=values["total"],
        free=values["free"],
        allocated=values["allocated"],
        allowed=None if allowed is not None and allowed >= _NO_FRACTION_SET else allowed,
        backend="cudaMallocAsync",
        format="cudaMallocAsync",
    )
