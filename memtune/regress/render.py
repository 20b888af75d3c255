"""Text and JSON for ``memtune diff`` and ``memtune bisect``; formatting only."""

from __future__ import annotations

from typing import Any

from memtune.estimate.effect import COMPONENTS, JUDGED, NEEDED, PEAK, compared
from memtune.regress.attribution import ConfigDiff, attributions
from memtune.regress.gitbisect import BisectResult
from memtune.regress.logs import (
    ALLOCATED,
    NOISE_BYTES,
    NOISE_SHARE,
    RESERVED_ONLY,
    SHRANK,
    LogDiff,
    StepChange,
    changed_most,
)
from memtune.regress.walk import Probe, Walk
from memtune.units import MiB, human

SCHEMA_VERSION = 1
UNREAD_SHOWN = 12
SHOWN_FROM = MiB  # smaller differences are the rounding of components to whole bytes


def signed(nbytes: int) -> str:
    return ("+" if nbytes >= 0 else "-") + human(abs(nbytes))


# --- memtune diff A B -----------------------------------------------------------------------


def diff_lines(diff: ConfigDiff, everything: bool = False) -> list[str]:
    """The peaks and what each rank needs before and after; then one line per changed key with
    what it does alone to the rank B's verdict judges, largest first, and the interactions after
    them; ``everything`` lists every component of every rank instead."""
    a, b = diff.a, diff.b
    lines = [f"A: {a.source} ({a.format})", f"B: {b.source} ({b.format})"]
    if not diff.per_rank:
        wa, wb = diff.before.worst, diff.after.worst
        lines.append(
            f"A has {len(diff.before.ranks)} pipeline ranks and B {len(diff.after.ranks)}: comparing the "
            f"most-loaded rank of each (A pp_rank {wa.pp_rank}, B pp_rank {wb.pp_rank})"
        )
    lines.append(
        "Per rank, before -> after (needs: peak, memory outside PyTorch and margins; docs/verdict.md):"
    )
    starts = compared(diff.before, diff.per_rank)
    for label, start, total in zip(diff.labels, starts, diff.total):
        lines.append(
            f"  {label}: peak {human(start[PEAK])} -> {human(start[PEAK] + total[PEAK])} ({signed(total[PEAK])}), "
            f"needs {human(start[NEEDED])} -> {human(start[NEEDED] + total[NEEDED])} ({signed(total[NEEDED])})"
        )
    lines.append(
        f"Verdict: {diff.before.verdict()} -> {diff.after.verdict()} "
        f"(most-loaded rank, {diff.after.gpu.name} {human(diff.after.capacity_bytes)})"
    )
    phases = {r.peak_phase for r in diff.before.ranks} | {r.peak_phase for r in diff.after.ranks}
    if len(phases) > 1:
        lines.append(
            "Some peaks fall in the optimizer step, others in forward/backward: there activations are "
            "freed and the step's temporaries count as transient, so memory moves between the two."
        )
    lines += _every_part(diff) if everything else _each_key(diff)
    quiet = [k for k in diff.keys if k.alone is not None and not any(any(p.values()) for p in k.alone)]
    if quiet:
        lines.append("No effect on the estimate:")
        lines += [f"  {k}" for k in quiet]
    refused = [k for k in diff.keys if k.alone is None]
    if refused:
        lines.append("Refused alone by memtune check (their effect is inside the interactions):")
        lines += [f"  {k}: {k.refused}" for k in refused]
    if diff.unread:
        lines.append(f"Not read by memtune ({len(diff.unread)}; no effect on the estimate):")
        for u in diff.unread[:UNREAD_SHOWN]:
            lines.append(f"  {u.name} {_maybe(u.before)} -> {_maybe(u.after)}")
        if len(diff.unread) > UNREAD_SHOWN:
            lines.append(f"  ... {len(diff.unread) - UNREAD_SHOWN} more (--json lists all)")
    if not diff.keys and not diff.unread:
        lines.append("The two configs describe the same job.")
    elif not everything and diff.keys:
        lines.append("--all lists every component of every rank, each change alone and the interactions.")
    return lines


def _judged(diff: ConfigDiff) -> int:
    """The compared rank B's verdict judges: B's most-loaded pipeline rank (the only one compared
    when the pipeline sizes differ)."""
    return diff.after.worst.pp_rank if diff.per_rank else 0


MOVED_SHOWN = 3  # components named per change; --all lists every one


def _moved(part: dict[str, int]) -> str:
    """The components a change moved most, largest first: "activations +2.00 GiB, transient
    +0.10 GiB"."""
    moved = sorted((c for c in COMPONENTS if abs(part[c]) >= SHOWN_FROM), key=lambda c: -abs(part[c]))
    more = len(moved) - MOVED_SHOWN
    return ", ".join(f"{c} {signed(part[c])}" for c in moved[:MOVED_SHOWN]) + (
        f" and {more} more" if more > 0 else ""
    )


def _each_key(diff: ConfigDiff) -> list[str]:
    """One line per changed key: what it alone does to what the judged rank needs, largest first;
    then the interactions, said as such."""
    i = _judged(diff)
    effects = sorted(
        (k for k in diff.keys if k.alone is not None and abs(k.alone[i][NEEDED]) >= SHOWN_FROM),
        key=lambda k: -abs(k.alone[i][NEEDED] if k.alone else 0),
    )
    lines = []
    if effects:
        lines.append(f"Each change alone on A, largest first (what {diff.labels[i]} needs):")
        for k in effects:
            assert k.alone is not None
            lines.append(f"  {signed(k.alone[i][NEEDED])}  {k}  ({_moved(k.alone[i])})")
    rest = diff.interactions[i]
    if abs(rest[NEEDED]) >= SHOWN_FROM or _moved(rest):
        lines.append(
            f"Interactions between the changes (the total less the changes alone): {signed(rest[NEEDED])}"
            + (f" ({_moved(rest)})" if _moved(rest) else "")
        )
    return lines


def _every_part(diff: ConfigDiff) -> list[str]:
    found = [x for x in attributions(diff) if abs(x.delta) >= SHOWN_FROM]
    if not found:
        return []
    return [
        "Attributed (each change alone on A; interactions = total minus the singles; under 1 MiB not shown):",
        *(f"  {x.what}: {signed(x.delta)} {x.component} on {x.rank}" for x in found),
    ]


def _maybe(value: str | None) -> str:
    return "(absent)" if value is None else value


def diff_json(diff: ConfigDiff) -> dict[str, Any]:
    def ranks(values: list[dict[str, int]]) -> list[dict[str, Any]]:
        return [{"rank": label, **v} for label, v in zip(diff.labels, values)]

    def side(est: Any) -> dict[str, Any]:
        return {
            "pp_ranks": len(est.ranks),
            "worst_pp_rank": est.worst.pp_rank,
            "verdict": est.verdict(),
            "peak_bytes": [r.peak_bytes for r in est.ranks],
        }

    return {
        "schema_version": SCHEMA_VERSION,
        "a": {"source": diff.a.source, "format": diff.a.format, **side(diff.before)},
        "b": {"source": diff.b.source, "format": diff.b.format, **side(diff.after)},
        "compared": "per_pp_rank" if diff.per_rank else "most_loaded_rank",
        "components": [*COMPONENTS, PEAK, JUDGED, NEEDED],
        "total": ranks(diff.total),
        "changes": [
            {
                "key": k.change.key,
                "before": k.change.before,
                "after": k.change.change.value,
                "alone": ranks(k.alone) if k.alone is not None else None,
                "refused_alone": k.refused,
                "together_with": [
                    {"key": t.key, "before": t.before, "after": t.change.value} for t in k.together
                ],
            }
            for k in diff.keys
        ],
        "interactions": ranks(diff.interactions),
        "not_read": [{"name": u.name, "before": u.before, "after": u.after} for u in diff.unread],
    }


# --- memtune diff --logs --------------------------------------------------------------------


WIDTH = 80  # diff --logs fits a terminal of 80 columns
RANKS_SHOWN = 32  # ranks in the summary; --all lists every rank and step
_WHY = {
    ALLOCATED: "the allocated peak grew: the job's tensors need more (config, model, library)",
    RESERVED_ONLY: "only the reserved peak grew: the allocator caches more (fragmentation)",
    SHRANK: "B needs less than A",
}


def _fit(head: str, tail: str) -> list[str]:
    """``head tail`` on one line when it fits, else ``tail`` indented on the next."""
    return [f"{head} {tail}"] if len(head) + 1 + len(tail) <= WIDTH else [head, f"  {tail}"]


def _change(title: str, s: StepChange) -> list[str]:
    head = f"{title}: step {s.step}, rank {s.rank}: {s.component} {signed(s.component_delta)}"
    return [*_fit(head, f"({_pair(*s.component_peaks)})"), f"  {_WHY[s.kind]}"]


def logs_lines(diff: LogDiff, every_step: bool = False) -> list[str]:
    ranks = diff.ranks()
    diverged = diff.diverged
    lines = [
        f"A: {diff.a}",
        f"B: {diff.b}",
        f"{len(ranks)} ranks, {len(diff.steps)} (rank, step) pairs; {len(diverged)} differ beyond noise "
        f"({NOISE_BYTES // MiB} MiB or {NOISE_SHARE:.0%}).",
    ]
    first, largest = diff.first_divergence, diff.largest
    if first is None or largest is None:
        lines.append("The runs do not diverge.")
    else:
        lines += _change("First divergence", first)
        if largest is not first:
            lines += _change("Largest difference", largest)
    shown = changed_most(ranks, RANKS_SHOWN)
    if len(shown) < len(ranks):
        lines.append(f"The {RANKS_SHOWN} of {len(ranks)} ranks that changed most (largest change, A -> B):")
    else:
        lines.append("Per rank (largest change of each peak, A -> B):")
    lines.append(
        f"  {'rank':>6} {'steps':>6} {'differ':>6} {'first':>7} {'allocated':>11} {'reserved':>11}  change"
    )
    for r in shown:
        first_step = "-" if r.first_step is None else str(r.first_step)
        lines.append(
            f"  {r.rank:>6} {r.steps:>6} {r.diverged:>6} {first_step:>7} {signed(r.allocated_delta):>11} "
            f"{signed(r.reserved_delta):>11}  {r.kind}"
        )
    if every_step:
        lines.append("Peak allocated / reserved per rank and step (A -> B):")
        lines.append(f"  {'rank':>5} {'step':>6}  {'allocated':>22}  {'reserved':>22}  change")
        for s in diff.steps:
            lines.append(
                f"  {s.rank:>5} {s.step:>6}  {_pair(s.before.allocated, s.after.allocated):>22}"
                f"  {_pair(s.before.reserved, s.after.reserved):>22}  {s.kind}"
            )
    for name, only in (("A", diff.only_a), ("B", diff.only_b)):
        if only:
            pairs = ", ".join(f"{r}/{s}" for r, s in only[:10])
            lines += _fit(
                f"only in {name} (rank/step):",
                pairs + (f" and {len(only) - 10} more" if len(only) > 10 else ""),
            )
    lines += [f"note: {note}" for note in diff.notes]
    if not every_step:
        lines.append("--all lists every rank and step.")
    return lines


def _pair(before: int, after: int) -> str:
    return f"{human(before)} -> {human(after)}"


def logs_json(diff: LogDiff) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "a": diff.a,
        "b": diff.b,
        "steps": [
            {
                "rank": s.rank,
                "step": s.step,
                "peak_allocated_bytes": [s.before.allocated, s.after.allocated],
                "peak_reserved_bytes": [s.before.reserved, s.after.reserved],
                "change": s.kind,
            }
            for s in diff.steps
        ],
        "grown": [{"rank": s.rank, "step": s.step, "change": s.kind} for s in diff.grown],
        "first_divergence": _change_json(diff.first_divergence),
        "largest": _change_json(diff.largest),
        "ranks": [
            {
                "rank": r.rank,
                "steps": r.steps,
                "diverged": r.diverged,
                "first_step": r.first_step,
                "allocated_delta_bytes": r.allocated_delta,
                "reserved_delta_bytes": r.reserved_delta,
                "change": r.kind,
            }
            for r in diff.ranks()
        ],
        "only_a": [list(p) for p in diff.only_a],
        "only_b": [list(p) for p in diff.only_b],
        "notes": diff.notes,
        "kinds": {ALLOCATED: "the allocated peak grew", RESERVED_ONLY: "only the reserved peak grew"},
    }


def _change_json(s: StepChange | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"rank": s.rank, "step": s.step, "component": s.component, "delta_bytes": s.component_delta}


# --- memtune bisect --configs ---------------------------------------------------------------


def _probe(p: Probe) -> str:
    return f"peak {human(p.peak_bytes)} on pp_rank {p.pp_rank}, {p.verdict}"


def walk_lines(w: Walk, a: str, b: str) -> list[str]:
    how = "measured" if w.measured else "estimated"
    lines = [f"A: {a}: {_probe(w.start)}", f"B: {b}: {_probe(w.end)}"]
    if not w.start.fits:
        lines.append(f"A already does not fit ({how}): there is no change to blame between A and B.")
        return lines
    if w.end.fits:
        lines.append(f"B fits ({how}): no change between A and B makes it stop fitting.")
        return lines
    lines.append(
        f"Order tried ({len(w.order)} changes, by what each alone does to what the rank needs: savings "
        f"first, then growth smallest first; "
        f"{len(w.probes)} {how} prefixes):"
    )
    for i, (change, effect) in enumerate(zip(w.order, w.single_effects), 1):
        alone = {None: "refused alone", 0: "no effect alone"}.get(
            effect
        ) or f"needs {signed(effect or 0)} alone"
        lines.append(f"  {i:>2}. {change} ({alone})")
    assert w.before is not None and w.after is not None
    if len(w.culprits) == 1:
        lines.append(f"First change that stops it fitting: {w.culprits[0]}")
    else:
        lines.append("First changes that stop it fitting (memtune check refuses each without the others):")
        lines += [f"  {c}" for c in w.culprits]
    lines.append(f"  with {w.before.applied} changes applied: {_probe(w.before)}")
    lines.append(f"  with {w.after.applied} changes applied: {_probe(w.after)}")
    return lines


def walk_json(w: Walk, a: str, b: str) -> dict[str, Any]:
    def probe(p: Probe | None) -> dict[str, Any] | None:
        return (
            None
            if p is None
            else {
                "changes_applied": p.applied,
                "peak_bytes": p.peak_bytes,
                "pp_rank": p.pp_rank,
                "verdict": p.verdict,
            }
        )

    return {
        "schema_version": SCHEMA_VERSION,
        "a": {"source": a, **(probe(w.start) or {})},
        "b": {"source": b, **(probe(w.end) or {})},
        "evaluated_by": "measure" if w.measured else "estimate",
        "order": [
            {"key": c.key, "before": c.before, "after": c.change.value, "needed_delta_alone_bytes": e}
            for c, e in zip(w.order, w.single_effects)
        ],
        "culprits": [{"key": c.key, "before": c.before, "after": c.change.value} for c in w.culprits],
        "last_fitting": probe(w.before),
        "first_not_fitting": probe(w.after),
        "probes": [probe(p) for p in w.probes],
        "refused_prefixes": [{"changes_applied": n, "reason": r} for n, r in w.refused],
    }


# --- memtune bisect --good --bad ------------------------------------------------------------


def bisect_lines(result: BisectResult, kind: str) -> list[str]:
    from memtune.regress.classify import describe

    lines = [f"tested {len(result.tested)} commits:"]
    lines += [f"  {commit[:12]} {describe(outcome)}" for commit, outcome in result.tested]
    if result.first_bad is None:
        lines.append(
            "Only skipped commits were left: the first bad commit is one of "
            + ", ".join(c[:12] for c in result.candidates)
        )
        return lines
    lines.append(f"First bad commit ({kind} OOM): {result.first_bad} {result.subject.partition(' ')[2]}")
    if result.outcome is not None:
        lines.append(f"  {describe(result.outcome)}")
        lines += [f"  {reason}" for reason in result.outcome.reasons]
        if result.outcome.outcome != "bad":
            lines.append(f"  the command does not fail with a {kind} OOM here: is --bad really bad?")
    return lines


def bisect_json(result: BisectResult, kind: str) -> dict[str, Any]:
    outcome = result.outcome
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "first_bad": result.first_bad,
        "subject": result.subject.partition(" ")[2],
        "candidates": result.candidates,
        "diagnosis": None
        if outcome is None
        else {"exit_status": outcome.exit_status, "label": outcome.label, "reasons": list(outcome.reasons)},
        "tested": [
            {"commit": c, "outcome": o.outcome, "exit_status": o.exit_status, "label": o.label}
            for c, o in result.tested
        ],
    }
