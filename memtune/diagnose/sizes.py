"""Byte sizes as PyTorch prints them (``format_size``: bytes, KiB, MiB, GiB) and as memtune shows them."""

from __future__ import annotations

GiB = 1 << 30
MiB = 1 << 20

_UNIT_BYTES = {
    "bytes": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    # memory_summary() and Megatron's "memory (MB)" print binary units with SI names
    "kb": 1 << 10,
    "mb": 1 << 20,
    "gb": 1 << 30,
}

SIZE_PATTERN = r"(\d+(?:\.\d+)?)\s*(bytes|KiB|MiB|GiB|TiB)"


def to_bytes(number: str, unit: str) -> int:
    return round(float(number) * _UNIT_BYTES[unit.lower()])


def gib(n: int | float) -> str:
    """Bytes as GiB for reports; small values in MiB so they do not read as zero."""
    if abs(n) < GiB // 10:
        return f"{n / MiB:.1f} MiB"
    return f"{n / GiB:.2f} GiB"
