"""How many microbatches each pipeline rank holds at its peak, per model chunk.

Megatron-Core's 1F1B schedule runs ``p - r - 1`` warm-up forwards on rank ``r`` before the
first backward, so ``min(p - r, M)`` microbatches are in flight at once. The interleaved
schedule orders forwards in groups of ``N`` microbatches (``microbatch_group_size_per_vp_stage``,
default ``p``), chunk by chunk, and warms up ``2 (p - r - 1) + (m - 1) N`` of them.
"""

from __future__ import annotations

from memtune.config.derived import Derived
from memtune.config.knobs import KnobSubset


def forward_order(num_microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) pairs in the order the interleaved schedule runs their forwards."""
    order: list[tuple[int, int]] = []
    for start in range(0, num_microbatches, group):
        members = range(start, min(start + group, num_microbatches))
        order.extend((mb, chunk) for chunk in range(chunks) for mb in members)
    return order


def warmup_forwards(d: Derived, pp_rank: int) -> int:
    group = d.model.microbatch_group_size_per_vp_stage or d.pp
    return warmup_count(d.pp, d.vpp, d.num_microbatches, group, pp_rank)


def warmup_count(pp: int, chunks: int, num_microbatches: int, group: int, pp_rank: int) -> int:
    """Forwards rank ``pp_rank`` runs before its first backward (Megatron-Core's
    ``num_warmup_microbatches``, capped at all of them)."""
    if chunks == 1:
        return min(pp - pp_rank - 1, num_microbatches)
    return min(2 * (pp - pp_rank - 1) + (chunks - 1) * group, num_microbatches * chunks)


# The knobs ``in_flight`` depends on: the microbatch count (TP, PP, CP and the micro-batch set it),
# the stages and the virtual stages (memtune/plan/fast.py keys its cache by them).
IN_FLIGHT_KNOBS = KnobSubset("tp", "pp", "vpp", "cp", "mbs")


def in_flight(d: Derived, pp_rank: int) -> dict[int, int]:
    """Microbatches whose activations rank ``pp_rank`` holds at its peak, by virtual stage."""
    held = min(warmup_forwards(d, pp_rank) + 1, d.num_microbatches * d.vpp)
    if d.vpp == 1:
        return {0: held}
    group = d.model.microbatch_group_size_per_vp_stage or d.pp
    return dict(enumerate(chunk_counts(d.num_microbatches, d.vpp, group, held)))


def chunk_counts(num_microbatches: int, chunks: int, group: int, held: int) -> list[int]:
    """How many of the first ``held`` entries of :func:`forward_order` belong to each chunk,
    computed without building the order (it has num_microbatches x chunks entries)."""
    full_groups = num_microbatches // group
    done = min(held // (group * chunks), full_groups)
    left = held - done * group * chunks
    width = group if done < full_groups else num_microbatches - full_groups * group
    return [done * group + max(0, min(left - c * width, width)) for c in range(chunks)]
