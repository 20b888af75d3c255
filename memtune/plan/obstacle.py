"""Why a search found no layout: the constraint that refused every candidate, read from the
search's own counts (``PlanResult.counts``, ``pruned_by``, ``refused_by``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from memtune.check.registry import find_rule
from memtune.plan.search import PlanResult

# Rule families whose arithmetic a GPU count decides (memtune/plan/space.py prunes by them).
_LAYOUT_FAMILIES = ("PAR", "PIP", "MOE", "SEQ")


@dataclass(frozen=True)
class Refusal:
    code: str
    candidates: int
    summary: str  # the rule's one-line summary (docs/rules.md)


@dataclass(frozen=True)
class Obstacle:
    constraint: str  # "divisibility", "batch", "rules", "memory", "check" or "pins"
    candidates: int  # how many candidates the search considered
    refusals: tuple[Refusal, ...]  # by the most candidates refused
    remedies: tuple[str, ...]  # what would open layouts, cheapest first
    unsplittable_pp: tuple[int, ...] = ()  # pipeline sizes the model's layers cannot be split over
    num_layers: int = 0


def obstacle(result: PlanResult) -> Obstacle:
    """The constraint that left ``result`` without a layout (call only when it has none), with
    the pipeline sizes no split of the layers serves (searched at no candidate)."""
    found = _obstacle(result)
    return replace(found, unsplittable_pp=result.unsplittable_pp, num_layers=result.base.model.num_layers)


def _obstacle(result: PlanResult) -> Obstacle:
    n = result.counts
    enumerated = n.get("enumerated", 0)
    if enumerated and not n.get("estimated", 0) and result.pruned_by:
        refusals = _refusals(result.pruned_by)
        families = {r.code[:3] for r in refusals}
        remedies = []
        if families & set(_LAYOUT_FAMILIES):
            remedies.append("a GPU count with small factors (a multiple of 8)")
        if "BAT" in families:
            remedies.append("a global batch size divisible by the data-parallel size")
        if families <= {"BAT"}:
            constraint = "batch"
        elif families <= {"BAT", *_LAYOUT_FAMILIES}:
            constraint = "divisibility"
        else:
            constraint = "rules"
        return Obstacle(constraint, enumerated, refusals, tuple(remedies))
    if n.get("estimated", 0) and not n.get("fit", 0):
        return Obstacle(
            "memory",
            enumerated,
            (),
            ("more GPUs", "LoRA (--mode lora)", "a shorter sequence"),
        )
    if n.get("fit", 0) and result.refused_by:
        return Obstacle("check", enumerated, _refusals(result.refused_by), ())
    return Obstacle("pins", enumerated, (), ("fewer --pin values",))


def unsplittable_line(found: Obstacle) -> str | None:
    """One line naming the pipeline sizes the layers split over in no searched way, or None."""
    if not found.unsplittable_pp:
        return None
    sizes = ", ".join(str(p) for p in found.unsplittable_pp)
    return (
        f"PP {sizes}: the {found.num_layers} layers split over that many stages neither evenly, nor with "
        "first/last stage sizes Megatron accepts (PIP001, PIP006-008), nor with an explicit layout"
    )


def _refusals(counts: dict[str, int]) -> tuple[Refusal, ...]:
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(Refusal(code, count, _summary(code)) for code, count in ordered)


def _summary(code: str) -> str:
    rule = find_rule(code)
    return rule.summary.rstrip(".") if rule else code
