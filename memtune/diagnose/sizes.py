"""Byte sizes as PyTorch prints them (``format_size``: bytes, KiB, MiB, GiB) and as memtune shows them."""

from __future__ import annotations

from memtune.units import GiB, KiB, MiB, TiB, human

__all__ = ["SIZE_PATTERN", "GiB", "MiB", "gib", "to_bytes"]

_UNIT_BYTES = {
    "bytes": 1,
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
    # memory_summary() and Megatron's "memory (MB)" print binary units with SI names
    "kb": KiB,
    "mb": MiB,
    "gb": GiB,
}

# A number starts after a non-digit and has bounded digits, so a long digit run cannot make a
# search backtrack over it from every position inside it.
SIZE_PATTERN = r"(?<![0-9.])([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*(bytes|KiB|MiB|GiB|TiB)"


def to_bytes(number: str, unit: str) -> int:
    return round(float(number) * _UNIT_BYTES[unit.lower()])


gib = human  # diagnose's reports say sizes in sentences
