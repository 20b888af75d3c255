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
from dataclasses import dataclass, replace

from memtune.config.changes import Change
from memtune.config.derived import Derived, derive
from memtune.config.knobs import SHARDINGS, Knobs, Recompute
from memtune.config.layout import balanced_layout, layout_problems, layout_text, parse_layout
from memtune.config.schema import JobConfig

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
    # Chunk counts an even split can serve, and those Megatron-Bridge's recipes run with uneven
    # stages or explicit layouts (``UNEVEN_VPP``).
    vpp = [v for v in range(1, 17) if any((m.num_layers + e) % v == 0 for e in (0, 2)) or v in UNEVEN_VPP]
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
    """None; each selective module that exists in this model (the gate for advice drops those
    memtune check calls useless, core_attn under flash attention for one); full with n layers per
    chunk."""
    options = [Recompute()] + [Recompute("selective", (m,)) for m in d.recomputable_modules]
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
    # Uneven splits and explicit layouts are enumerated only where the gate accepts them (``splits``).
    even = c.split in ("even", "accounted")
    if even and c.pp > 1 and layers % c.pp:
        return "PIP001"
    if even and c.pp > 1 and c.vpp > 1 and (layers // c.pp) % c.vpp:
        return "PIP002"
    if c.vpp > 1 and c.pp == 1:
        return "PIP009"
    dp = world // (c.tp * c.pp * c.cp)
    if gbs % (c.mbs * dp):
        return "BAT001"
    if c.vpp > 1 and c.pp > 1:
        microbatches, group = gbs // (c.mbs * dp), m.microbatch_group_size_per_vp_stage or c.pp
        if not c.pp <= group <= microbatches:
            return "PIP010"
        if 0 < microbatches % group < c.pp:
            return "PIP012"
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
                    first_stage_layers=h.first_stage_layers,
                    last_stage_layers=h.last_stage_layers,
                    pipeline_layout=h.pipeline_layout,
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


@dataclass(frozen=True)
class Split:
    """How one (PP, VPP) splits the layers: the ``Knobs`` fields of the split."""

    split: str
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    pipeline_layout: str | None = None


# Virtual stages per rank searched with uneven first/last stages or an explicit layout: the sizes
# of Megatron-Bridge's DeepSeek-V3 layouts (recipes/deepseek/h100/deepseek_v3.py: VPP 1, 2, 4).
# Every further size multiplies a mixture-of-experts search (EP x ETP x PP x VPP) by as much
# again; an explicit layout keeps at least this many layers in each middle chunk, as Bridge's do.
UNEVEN_VPP = (1, 2, 4)
MIN_LAYOUT_CHUNK_LAYERS = 2

# The gate's rules on first/last stage sizes (memtune/check/rules/pipeline.py).
_UNEVEN_RULES = ("PIP003", "PIP004", "PIP005", "PIP006", "PIP007", "PIP008")


def splits(d: Derived, pp: int, vpp: int) -> list[Split]:
    """The layer splits searched for ``pp`` stages of ``vpp`` chunks: the even split and the one
    counting the embedding and loss as layers where they divide; where neither does, explicit
    first/last stage sizes and Megatron-Bridge's explicit layout (``balanced_layout``), each kept
    only when the gate's own rules accept it. The job's own first/last stage sizes or layout (as
    written, or pinned) are kept at every PP and VPP where the gate accepts them."""
    m = d.model
    if pp == 1:
        return [Split("even")] if vpp == 1 else []
    out = [
        Split(name)
        for name, layers in (("even", m.num_layers), ("accounted", m.num_layers + 2))
        if layers % pp == 0 and (layers // pp) % vpp == 0
    ]
    own_first, own_last = m.num_layers_in_first_pipeline_stage, m.num_layers_in_last_pipeline_stage
    if own_first or own_last:
        own = Split("uneven", own_first or 0, own_last or 0)
        if not _uneven_refused(d, pp, vpp, own):
            out.append(own)
    written = m.pipeline_model_parallel_layout
    if (
        written is not None
        and len(parse_layout(written)) == pp * vpp
        and not layout_problems(written, pp, m.num_layers, d.mtp_num_layers)
    ):
        out.append(Split("layout", pipeline_layout=layout_text(written)))
    if any(s.split in ("even", "accounted") for s in out) or vpp not in UNEVEN_VPP:
        return out
    first, last = _edge_stages(m.num_layers, pp, vpp)
    if first > 0 and last > 0 and not _uneven_refused(d, pp, vpp, Split("uneven", first, last)):
        out.append(Split("uneven", first, last))
    layout = balanced_layout(m.num_layers, d.mtp_num_layers, pp * vpp)
    if (
        layout is not None
        and -(-m.num_layers // (pp * vpp)) >= MIN_LAYOUT_CHUNK_LAYERS
        and not layout_problems(layout, pp, m.num_layers, d.mtp_num_layers)
    ):
        out.append(Split("layout", pipeline_layout=layout))
    # A layout that builds the same chunks as a split before it is the same job.
    kept: dict[tuple[tuple[tuple[int, int], ...], ...], Split] = {}
    for split in out:
        kept.setdefault(_chunk_shape(d, pp, vpp, split), split)
    return list(kept.values())


def unsplittable(d: Derived, space: Space) -> tuple[int, ...]:
    """Pipeline sizes of ``space`` that no searched split of the layers serves at any of its VPP
    sizes: no candidate has them."""
    return tuple(p for p in space.pp if p > 1 and not any(splits(d, p, v) for v in space.vpp))


def _edge_stages(num_layers: int, pp: int, vpp: int) -> tuple[int, int]:
    """First/last stage sizes that lighten the edge stages: each middle stage holds the smallest
    multiple of VPP at least ``num_layers / pp``, the first stage as many of the rest as that
    (less one chunk, so that the last keeps at least one), the last what remains."""
    if pp == 2:
        first = -(-num_layers // 2) // vpp * vpp
        return first, num_layers - first
    middle = -(-num_layers // pp)
    middle = -(-middle // vpp) * vpp
    rest = num_layers - (pp - 2) * middle
    first = min(middle, (rest - vpp) // vpp * vpp)
    return first, rest - first


def _uneven_refused(d: Derived, pp: int, vpp: int, split: Split) -> bool:
    """Whether one of the gate's first/last stage rules refuses ``split`` at ``pp`` x ``vpp``."""
    from memtune.check.context import Context
    from memtune.check.registry import find_rule

    view = _view(d, pp, vpp, split)
    ctx = Context(job=view.job, d=view, mcore=view.mcore_version, torch=view.torch_version)
    rules = [find_rule(code) for code in _UNEVEN_RULES]
    return any(r is not None and r.run(ctx) is not None for r in rules)


def _view(d: Derived, pp: int, vpp: int, split: Split) -> Derived:
    knobs = replace(
        d.knobs,
        pp=pp,
        vpp=vpp,
        split=split.split,
        first_stage_layers=split.first_stage_layers,
        last_stage_layers=split.last_stage_layers,
        pipeline_layout=split.pipeline_layout,
    )
    return d.with_knobs(knobs)


def _chunk_shape(d: Derived, pp: int, vpp: int, split: Split) -> tuple[tuple[tuple[int, int], ...], ...]:
    """(decoder layers, MTP layers) of every chunk of every stage under ``split``."""
    return tuple(
        tuple((len(c.layers), c.mtp_layers) for c in chunks) for chunks in _view(d, pp, vpp, split).chunks
    )


def _largest_chunk(d: Derived, pp: int, vpp: int, split: Split) -> int:
    """Decoder layers in the largest chunk of the split (at least 1), which full recompute's
    layer counts are drawn from."""
    return max(1, *(len(c.layers) for chunks in _view(d, pp, vpp, split).chunks for c in chunks))


def layouts(d: Derived, space: Space) -> Iterator[Group]:
    """Candidates grouped by parallel layout and batch shape."""
    sizes: dict[GroupSizeKey, int] = {}
    by_stages: dict[tuple[int, int], list[tuple[Split, int]]] = {}
    for tp, pp, vpp, cp, ep, mbs in itertools.product(
        space.tp, space.pp, space.vpp, space.cp, space.ep, space.mbs
    ):
        found = by_stages.get((pp, vpp))
        if found is None:
            found = by_stages[(pp, vpp)] = [(s, _largest_chunk(d, pp, vpp, s)) for s in splits(d, pp, vpp)]
        for split, chunk_layers in found:
            etps = expert_tensor_sizes(d, tp)
            for etp, sp in itertools.product(etps, (False, True) if tp > 1 else (False,)):
                head = Knobs(
                    tp,
                    pp,
                    vpp,
                    cp,
                    ep,
                    etp,
                    mbs,
                    sp,
                    Recompute(),
                    space.sharding[0],
                    0.0,
                    0,
                    False,
                    split.split,
                    first_stage_layers=split.first_stage_layers,
                    last_stage_layers=split.last_stage_layers,
                    pipeline_layout=split.pipeline_layout,
                )
                yield Group(d, space, head, chunk_layers, sizes)


def expert_tensor_sizes(d: Derived, tp: int) -> list[int]:
    """ETP values searched at ``tp``: powers of two up to TP (an expert sharded wider than the
    dense layers would run smaller GEMMs than any of them); the arithmetic of ``pruned_layout``
    (PAR002, MOE004: the gate's rules) then keeps those Megatron accepts."""
    return _powers_of_two(tp) if d.is_moe else [tp]


def candidates(d: Derived, space: Space) -> Iterator[Knobs]:
    """Every combination of the space's values, LoRA re-gather and activation offload included
    where they can apply."""
    for group in layouts(d, space):
        yield from group.members


def changes_of(base: JobConfig, knobs: Knobs) -> list[Change]:
    """Every key a candidate's knobs set, as changes to ``base``."""
    return [Change(f"{section}.{key}", value) for section, key, value in knobs.settings(derive(base))]
