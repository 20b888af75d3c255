"""Byte units and how every command prints them: GiB (2^30 bytes) unless a source says GB."""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
GB = 10**9  # Megatron-LM's and Bridge's logs report "GB" as 10^9 bytes


def gib(nbytes: float) -> str:
    """A table cell: GiB with two decimals, no unit."""
    return f"{nbytes / GiB:.2f}"


def human(nbytes: float) -> str:
    """A size in a sentence: GiB, or MiB below a tenth of a GiB so it does not read as zero."""
    if abs(nbytes) < GiB // 10:
        return f"{nbytes / MiB:.1f} MiB"
    return f"{nbytes / GiB:.2f} GiB"
