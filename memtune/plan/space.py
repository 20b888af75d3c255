"""The candidate layouts ``memtune plan`` enumerates, and the cheap facts that prune them.

A candidate is a :class:`~memtune.config.knobs.Knobs` value; :meth:`Knobs.changes` turns it into
the dotted config changes (:class:`~memtune.config.changes.Change`) that make it a job and
``Derived.with_knobs`` gives its derived facts. :func:`pruned` says
why a candidate is refused by arithmetic alone, before any check runs; each reason names the
check that refuses the same candidate (``tests/plan/test_space.py`` confirms on a sample that
every pruned candidate is refused by ``memtune check`` with that code).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from memtune.config.derived import Derived
from memtune.config.knobs import SHARDINGS, Knobs, Recompute

# megatron-core 0.16 accepts query groups that divide TP (see check rule PAR004).
QUERY_GROUPS_DIVISOR_SINCE = (0, 16, 0)

MODES = ("pretrain", "finetune", "lora")


@dataclass(frozen=True)
class Space:
    """What to enumerate: the values of each knob (after pins)."""

    tp: tuple[int, ...]
    pp: tuple[int, ...]
    vpp: tuple[int, ...]
    cp: tuple[int, ...]
    ep: tuple[int, ...]
    mbs: tuple[int, ...]
    sharding: tuple[str, ...]
    offload: tuple[float, ...]


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _powers_of_two(limit: int) -> list[int]:
    out, k = [], 1
    while k <= limit:
        out.append(k)
        k *= 2
    return out


def default_space(d: Derived) -> Space:
    """Every value worth trying for the model and GPU count of ``d``."""
    world = d.world_size
    m = d.model
    per_node = d.job.cluster.gpus_per_node
    pp = [p for p in _divisors(world) if p <= m.num_layers + 2]
    vpp = [v for v in range(1, 17) if any((m.num_layers + e) % v == 0 for e in (0, 2))]
    cp = [c for c in _powers_of_two(min(world, 16)) if m.seq_length % (2 * c) == 0 or c == 1]
    ep = [e for e in _divisors(m.num_moe_experts or 1) if world % e == 0] if d.is_moe else [1]
    return Space(
        tp=tuple(_powers_of_two(min(2 * per_node, m.num_attention_heads, world))),
        pp=tuple(pp),
        vpp=tuple(vpp),
        cp=tuple(cp),
        ep=tuple(ep),
        mbs=(1, 2, 4),
        sharding=SHARDINGS,
        offload=(0.0, 0.5, 1.0),
    )


def recompute_options(d: Derived, chunk_layers: int) -> list[Recompute]:
    """None; the selective module sets that exist for this model; full with n layers per chunk."""
    m = d.model
    sets: list[tuple[str, ...]] = [("core_attn",), ("core_attn", "layernorm")]
    if d.is_moe:
        if m.moe_grouped_gemm:
            sets.append(("core_attn", "layernorm", "moe_act"))
        sets.append(("core_attn", "layernorm", "moe"))
    if not all(d.moe_layer_pattern):
        sets.append(("core_attn", "layernorm", "mlp"))
    if m.multi_latent_attention:
        sets.append(("core_attn", "layernorm", "mla_up_proj"))
    options = [Recompute()] + [Recompute("selective", s) for s in sets]
    fulls = sorted({1, max(1, chunk_layers // 2), chunk_layers})
    options += [Recompute("full", layers=n) for n in fulls if n >= 1]
    return options


def pruned_layout(d: Derived, c: Knobs, gbs: int) -> str | None:
    """The check code refusing every candidate with ``c``'s parallel layout and batch shape, or None."""
    m = d.model
    world = d.world_size
    if world % (c.tp * c.pp * c.cp):
        return "PAR001"
    if d.is_moe and world % (c.etp * c.ep * c.pp):
        return "PAR002"
    if m.num_attention_heads % c.tp:
        return "PAR003"
    groups = d.num_query_groups
    if groups % c.tp and not (d.mcore_version >= QUERY_GROUPS_DIVISOR_SINCE and c.tp % groups == 0):
        return "PAR004"
    if not all(d.moe_layer_pattern) and d.ffn_hidden_size % c.tp:
        return "PAR005"
    if d.is_moe and ((m.num_moe_experts or 1) % c.ep):
        return "MOE002"
    if d.is_moe and d.moe_ffn_hidden_size % c.etp:
        return "MOE004"
    if c.sp and c.tp == 1:
        return "SEQ001"
    if c.cp > 1 and m.seq_length % (2 * c.cp):
        return "SEQ002"
    if c.sp and m.seq_length % c.cp == 0 and (m.seq_length // c.cp) % c.tp:
        return "SEQ003"
    layers = m.num_layers + (2 if c.split == "accounted" else 0)
    if c.pp > 1 and layers % c.pp:
        return "PIP001"
    if c.pp > 1 and c.vpp > 1 and (layers // c.pp) % c.vpp:
        return "PIP002"
    if c.vpp > 1 and c.pp == 1:
        return "PIP009"
    dp = world // (c.tp * c.pp * c.cp)
    if gbs % (c.mbs * dp):
        return "BAT001"
    if c.vpp > 1 and c.pp > 1 and gbs // (c.mbs * dp) < c.pp:
        return "PIP010"
    return None


def pruned(d: Derived, c: Knobs, gbs: int) -> str | None:
    """The check code that refuses ``c`` on arithmetic alone, or None when checks must decide."""
    code = pruned_layout(d, c, gbs)
    if code:
        return code
    if c.recompute.granularity == "full" and not 1 <= c.recompute.layers <= d.model.num_layers // c.pp:
        return "REC002"
    if c.act_offload and c.pp > 1:
        return "OFF001"
    return None


# What the size of a group depends on: one pipeline stage, sequence parallelism, layers per chunk.
GroupSizeKey = tuple[bool, bool, int]


class Group:
    """The candidates that share one parallel layout and batch shape (and so ``pruned_layout``):
    built only when asked for, counted without building them."""

    def __init__(
        self, d: Derived, space: Space, head: Knobs, chunk_layers: int, sizes: dict[GroupSizeKey, int]
    ) -> None:
        self.head = head  # the group's first candidate
        self._d, self._space, self._chunk_layers = d, space, chunk_layers
        self._members: list[Knobs] | None = None
        self._sizes = sizes  # shared by the groups of one enumeration: size by what the inner loops read

    def _inner(self) -> Iterator[tuple[Recompute, str, float, int, bool]]:
        d, space, h = self._d, self._space, self.head
        lora = d.job.peft is not None
        for rec in recompute_options(d, self._chunk_layers):
            for sharding in space.sharding:
                for offload in space.offload if sharding == "distopt" else (0.0,):
                    acts = [0]
                    if h.pp == 1 and rec.granularity is None and not offload:
                        acts.append(max(1, d.model.num_layers // 2))
                    for act in acts:
                        for regather in (False, True) if lora and h.sp else (False,):
                            yield rec, sharding, offload, act, regather

    @property
    def members(self) -> list[Knobs]:
        if self._members is None:
            h = self.head
            self._members = [
                Knobs(
                    h.tp,
                    h.pp,
                    h.vpp,
                    h.cp,
                    h.ep,
                    h.etp,
                    h.mbs,
                    h.sp,
                    rec,
                    sharding,
                    offload,
                    act,
                    regather,
                    h.split,
                )
                for rec, sharding, offload, act, regather in self._inner()
            ]
        return self._members

    def __len__(self) -> int:
        if self._members is not None:
            return len(self._members)
        key: GroupSizeKey = (self.head.pp == 1, self.head.sp, self._chunk_layers)
        size = self._sizes.get(key)
        if size is None:
            size = self._sizes[key] = sum(1 for _ in self._inner())
        return size


def layouts(d: Derived, space: Space) -> Iterator[Group]:
    """Candidates grouped by parallel layout and batch shape."""
    m = d.model
    sizes: dict[GroupSizeKey, int] = {}
    splits = ["even"] + (["accounted"] if m.num_layers_in_first_pipeline_stage is None else [])
    for tp, pp, vpp, cp, ep, mbs in itertools.product(
        space.tp, space.pp, space.vpp, space.cp, space.ep, space.mbs
    ):
        for split in splits:
            if split == "accounted" and pp == 1:
                continue
            layers = m.num_layers + (2 if split == "accounted" else 0)
            # Stage and chunk counts that do not divide the layers are not layouts at all.
            if (pp > 1 and (layers % pp or (layers // pp) % vpp)) or (vpp > 1 and pp == 1):
                continue
            chunk_layers = max(1, layers // (pp * vpp))
            etps = sorted({tp, 1}) if d.is_moe else [tp]
            for etp, sp in itertools.product(etps, (False, True) if tp > 1 else (False,)):
                head = Knobs(
                    tp, pp, vpp, cp, ep, etp, mbs, sp, Recompute(), space.sharding[0], 0.0, 0, False, split
                )
                yield Group(d, space, head, chunk_layers, sizes)


def candidates(d: Derived, space: Space) -> Iterator[Knobs]:
    """Every combination of the space's values, LoRA re-gather and activation offload included
    where they can apply."""
    for group in layouts(d, space):
        yield from group.members
