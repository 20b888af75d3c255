"""From findings to a verdict: per failure, per rank, overall, with the reasoning spelled out.

The allocator-message rules are docs/allocator.md C1-C9 (R = requested, U = reserved
but unallocated, F = free, A = allocated by PyTorch, T = total capacity). Every rule is about the
numbers, never about where a message came from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from memtune.diagnose.detectors import ITERATION, RESUME_LOAD, RESUME_PHASES
from memtune.diagnose.evidence import (
    CAPACITY,
    CIRCUMSTANTIAL,
    CONFIGURATION,
    EXPLICIT,
    FRAGMENTATION,
    HOST_OOM,
    NOT_OOM,
    OUTSIDE_PYTORCH,
    Fact,
    Failure,
)
from memtune.diagnose.logscan import KEEP_PER_KIND
from memtune.diagnose.messages import AllocatorNumbers
from memtune.diagnose.sizes import GiB, MiB, gib

# Below this, reserved-but-unallocated memory is allocator noise, not a cause (docs/allocator.md C7).
FRAGMENTATION_FLOOR_BYTES = 512 * MiB
FRAGMENTATION_FLOOR_SHARE = 0.02
# Memory held by CUDA-graph pools, other processes or this process outside its allocator is named as
# the reason for a shortage from here on (beyond CUDA context + NCCL basics, ≈1 GiB; docs/allocator.md C3, O1-O4).
ATTRIBUTION_FLOOR_BYTES = 2 * GiB
ATTRIBUTION_FLOOR_SHARE = 0.1
# Fewer failing ranks than this share of the job points at imbalance, not global capacity.
MINORITY_SHARE = 0.25
HEADROOM_SHARE = 0.9

# Failures whose label is a default, not read from evidence: their verdict is never more than low confidence.
DEFAULT_READINGS = {"allocator_oom_bare", "narrative_gpu_oom", "phase_only"}

# When ranks disagree equally, report the label whose fix must come first.
_TIE_ORDER = (CONFIGURATION, NOT_OOM, HOST_OOM, OUTSIDE_PYTORCH, FRAGMENTATION, CAPACITY)


@dataclass(frozen=True)
class Reading:
    failure: Failure
    label: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class RankVerdict:
    rank: int | None  # None: lines that carry no rank (launcher, Slurm, NCCL without prefixes)
    label: str
    reasons: tuple[str, ...]
    root: Reading
    others: tuple[Reading, ...]


@dataclass(frozen=True)
class ExpandableState:
    on: bool | None
    source: str  # where memtune learnt it


@dataclass
class Verdict:
    label: str | None  # None: nothing in the input reports a failure
    confidence: str  # high | medium | low | none
    reasons: list[str] = field(default_factory=list)
    ranks: list[RankVerdict] = field(default_factory=list)
    failed_ranks: list[int] = field(default_factory=list)
    known_ranks: int | None = None
    expandable: ExpandableState = ExpandableState(None, "unknown")
    numbers: AllocatorNumbers | None = None  # of the deciding allocator message, for the advice
    phase: str | None = (
        None  # what the run was doing when it failed, where the log says (e.g. CUDA-graph capture)
    )


def read_allocator(n: AllocatorNumbers, expandable_on: bool | None) -> tuple[str, list[str]]:
    """Label one allocator OOM message from its numbers."""
    R, T, F, A, U = n.requested, n.total, n.free, n.allocated, n.unallocated
    reasons = []
    if n.backend == "cudaMallocAsync":
        reasons.append("backend cudaMallocAsync: no fragmentation figure; the driver pool decides")
        expandable_on = True  # native fragmentation rules do not apply
    floor = max(FRAGMENTATION_FLOOR_BYTES, FRAGMENTATION_FLOOR_SHARE * (T or 0))
    if U is not None and floor <= U and (R is None or U >= R):
        if expandable_on:
            reasons.append(
                f"reserved but unallocated {gib(U)} would suggest fragmentation, but expandable segments "
                "were on, which rules it out"
            )
        else:
            request = f" > requested {gib(R)}" if R is not None else ""
            return FRAGMENTATION, reasons + [
                f"reserved but unallocated {gib(U)}{request}: the memory exists but not contiguously"
            ]
    elif (
        U is not None and R is not None and F is not None and floor <= U and R <= U + F and not expandable_on
    ):
        return FRAGMENTATION, reasons + [
            f"reserved but unallocated {gib(U)} + free {gib(F)} ≥ requested {gib(R)}: enough memory, split between "
            "the cache and the device (fragmentation-assisted)"
        ]
    held = held_elsewhere(n)
    if held:
        # docs/allocator.md C3: R > U + F is a shortage whoever holds the memory; the holder decides the fix.
        return CAPACITY, reasons + held
    if R is not None and 20 * MiB >= R and (F or 0) < 64 * MiB and (U or 0) < floor:
        return CAPACITY, reasons + [
            f"a tiny request ({gib(R)}) failed with nothing free: the GPU is completely full and the failing "
            "operation is incidental; look at what grew (optimizer step, evaluation, checkpoint load)"
        ]
    if n.allowed and T and n.allowed < 0.95 * T:
        return CAPACITY, reasons + [
            f"the per-process limit is {gib(n.allowed)} of {gib(T)} "
            "(set_per_process_memory_fraction): the limit, not the GPU, is full"
        ]
    parts = []
    if A is not None and T:
        parts.append(f"allocated by PyTorch {gib(A)} = {100 * A / T:.0f}% of {gib(T)}")
    if U is not None and R is not None:
        parts.append(
            f"unallocated {gib(U)} < requested {gib(R)}"
            if U < R
            else f"unallocated {gib(U)} is below the {gib(floor)} that counts as fragmentation"
        )
    if F is not None and R is not None:
        parts.append(f"free {gib(F)}")
    return CAPACITY, reasons + [
        "; ".join(parts) + ": the memory is really in use"
        if parts
        else "the message lacks the numbers to see fragmentation; capacity is the default reading"
    ]


def significant(n: AllocatorNumbers, held: int) -> bool:
    """Whether memory held by graphs or outside the allocator is large enough to name as a cause."""
    if not n.total:
        return False
    return held >= max(ATTRIBUTION_FLOOR_BYTES, ATTRIBUTION_FLOOR_SHARE * n.total)


def held_elsewhere(n: AllocatorNumbers) -> list[str]:
    """Who holds the memory a shortage is short of, when it is not only the model's live tensors:
    CUDA-graph / MemPool private pools (inside "allocated", docs/allocator.md C5) and device memory outside
    this process's allocator (other processes, NCCL, context, workspaces; docs/allocator.md O)."""
    T, F, A, U = n.total, n.free, n.allocated, n.unallocated
    if not T:
        return []
    found: list[str] = []
    if n.private_pools and A and significant(n, n.private_pools):
        found.append(
            f"{gib(n.private_pools)} of the {gib(A)} allocated sit in private pools (CUDA graphs / MemPool), "
            "held for the graphs' lifetime"
        )
    outside = n.outside_allocator  # not None only when total, free and allocated are known
    if outside is not None and F is not None and A is not None and significant(n, outside):
        found.append(
            f"total {gib(T)} − free {gib(F)} − allocated {gib(A)} − unallocated {gib(U or 0)} = {gib(outside)} "
            f"held outside PyTorch's allocator{_outside_detail(n, outside)}"
        )
    return found


def _outside_detail(n: AllocatorNumbers, outside: int) -> str:
    if n.nvml_unreliable:
        return " (NVML reports 0 bytes for this process: a container PID mismatch, so per-process figures are unusable)"
    parts = []
    others = sum(n.other_processes.values())
    if others:
        parts.append(f"other processes {gib(others)}")
    if n.this_process and n.allocated is not None:
        parts.append(
            f"this process's non-PyTorch memory {gib(max(0, n.this_process - n.allocated - (n.unallocated or 0)))}"
        )
    return f" ({', '.join(parts)})" if parts else ""


def read_failure(f: Failure, expandable_on: bool | None) -> Reading:
    if f.numbers is not None and f.label is None:
        label, reasons = read_allocator(f.numbers, expandable_on)
        return Reading(f, label, tuple(reasons))
    reasons = [f.note] if f.note else []
    if f.label == FRAGMENTATION and expandable_on:
        return Reading(
            f, CAPACITY, tuple(reasons + ["but expandable segments were on, which rules fragmentation out"])
        )
    return Reading(f, f.label or CAPACITY, tuple(reasons))


# Message formats printed by a torch that predates 2.11 (messages._format_of).
_FORMATS_BEFORE_211 = {"2.9-2.10", "2.2-2.8", "2.1", "1.5-2.0", "1.4 or older"}


def _torch_before_211(facts: list[Fact], formats: Sequence[str]) -> tuple[bool | None, str]:
    versions = [f for f in facts if f.kind == "torch_version"]
    if versions:
        major_minor = tuple(int(x) for x in str(versions[-1].value).split(".")[:2])
        return major_minor < (2, 11), f"torch {versions[-1].value}"
    old = [f for f in formats if f in _FORMATS_BEFORE_211]
    if old:
        return True, f"an OOM message in the torch {old[0]} format"
    return (False, "an OOM message in the torch 2.11+ format") if "2.11+" in formats else (None, "")


def expandable_state(
    facts: list[Fact], from_config: bool | None, from_snapshot: bool | None, formats: Sequence[str] = ()
) -> ExpandableState:
    """What the allocator really ran with: the snapshot knows, a log line says, the config intends.
    ``formats`` are the allocator messages' formats, which date the torch that printed them."""
    if from_snapshot is not None:
        return ExpandableState(from_snapshot, "snapshot allocator_settings")
    said = [f for f in facts if f.kind in ("expandable_on", "expandable_off")]
    if any(f.kind == "expandable_off" and "not supported" in str(f.value) for f in said):
        return ExpandableState(False, "log: expandable_segments not supported on this platform")
    if said:
        last = said[-1]
        if (
            last.kind == "expandable_on"
            and str(last.value).startswith("PYTORCH_ALLOC_CONF=")
            and not any(
                f.kind == "expandable_on" and not str(f.value).startswith("PYTORCH_ALLOC_CONF=") for f in said
            )
        ):
            before, evidence = _torch_before_211(facts, formats)
            if before:
                # docs/allocator.md S1: torch 2.9.1 ignores the new name for CUDA, older ones never read it
                return ExpandableState(
                    False,
                    f"log {last.where}: PYTORCH_ALLOC_CONF is not applied before torch "
                    f"2.11 and {evidence} was logged",
                )
        return ExpandableState(last.kind == "expandable_on", f"log {last.where}")
    if from_config is not None:
        return ExpandableState(from_config, "config env")
    return ExpandableState(None, "unknown")


def resume_phase(failure: Failure, facts: list[Fact]) -> str | None:
    """The resume phase ``failure`` happened in, from the facts before it in its file and rank: a
    checkpoint-load frame, or a "loaded checkpoint" line not yet followed by an iteration line.
    None also where the rank's iteration lines reached the scan's cap (later ones are not kept)."""
    at = failure.where
    phase, iterations = None, 0
    for fact in facts:
        where = fact.where
        if where.source != at.source or where.line >= at.line:
            continue
        if where.rank is not None and at.rank is not None and where.rank != at.rank:
            continue
        if fact.kind == "phase" and fact.value in RESUME_PHASES:
            phase = fact.value if isinstance(fact.value, str) else None
        elif fact.kind == ITERATION:
            phase, iterations = None, iterations + 1
    return None if iterations >= KEEP_PER_KIND else phase


def _rank_verdict(rank: int | None, readings: list[Reading]) -> RankVerdict:
    root = max(readings, key=lambda r: r.failure.strength)  # max keeps the earliest among equals
    others = tuple(r for r in readings if r is not root)
    reasons = list(root.reasons)
    extra = Counter(
        r.label for r in others if r.label != root.label and r.failure.strength >= root.failure.strength - 1
    )
    if extra:
        reasons.append("also seen: " + ", ".join(f"{label} ×{n}" for label, n in extra.items()))
    return RankVerdict(rank, root.label, tuple(reasons), root, others)


def _known_ranks(scan_failures: list[Failure], facts: list[Fact]) -> int | None:
    sizes = [
        int(f.value) for f in facts if f.kind == "world_size" and isinstance(f.value, int) and f.value > 0
    ]
    seen = {f.where.rank for f in scan_failures if f.where.rank is not None}
    seen |= {f.where.rank for f in facts if f.where.rank is not None}
    seen |= {f.value[0] for f in facts if f.kind == "rank_memory" and isinstance(f.value, tuple)}
    return max(sizes + [len(seen)]) if (sizes or seen) else None


_KILL_EXIT_CODES = {-9, 137}


def _without_refuted_kills(failures: list[Failure], facts: list[Fact]) -> list[Failure]:
    """A launcher that kills its other workers only says one worker died; the exit code it reports
    says how. A code other than -9/137 is a Python error, not the OOM killer."""
    codes = {f.value for f in facts if f.kind == "exit_code"}
    if codes and not codes & _KILL_EXIT_CODES:
        return [f for f in failures if f.kind != "launcher_sigkill"]
    return failures


def verdict(failures: list[Failure], facts: list[Fact], expandable: ExpandableState) -> Verdict:
    failures = _without_refuted_kills(failures, facts)
    if not failures:
        phases = [f for f in facts if f.kind == "phase" and f.value not in RESUME_PHASES]
        if not phases:
            return Verdict(
                None,
                "none",
                ["no out-of-memory or related failure found in the input"],
                expandable=expandable,
            )
        failures = [
            Failure(
                "phase_only",
                CAPACITY,
                CIRCUMSTANTIAL,
                phases[-1].where,
                phases[-1].text,
                None,
                f"the log stops inside {phases[-1].value} without an error line; capture pins static "
                "buffers and private pools, so capacity is the likely cause",
            )
        ]
    by_rank: dict[int | None, list[Reading]] = {}
    for f in failures:
        by_rank.setdefault(f.where.rank, []).append(read_failure(f, expandable.on))
    ranks = [_rank_verdict(rank, readings) for rank, readings in by_rank.items()]
    ranks.sort(key=lambda v: (v.rank is None, v.rank if v.rank is not None else 0))

    strongest = max(v.root.failure.strength for v in ranks)
    deciding = [v for v in ranks if v.root.failure.strength == strongest]
    counts = Counter(v.label for v in deciding)
    label = max(counts, key=lambda lab: (counts[lab], -_TIE_ORDER.index(lab)))
    lead = next(v for v in deciding if v.label == label)

    confidence = {EXPLICIT: "high", EXPLICIT - 1: "medium"}.get(strongest, "low")
    if lead.root.failure.kind in DEFAULT_READINGS:
        confidence = "low"
    result = Verdict(label, confidence, expandable=expandable)
    result.ranks = ranks
    result.failed_ranks = sorted(v.rank for v in ranks if v.rank is not None)
    result.known_ranks = _known_ranks(failures, facts)
    result.numbers = lead.root.failure.numbers
    phase_names = [
        f.value
        for f in facts
        if f.kind == "phase" and isinstance(f.value, str) and f.value not in RESUME_PHASES
    ]
    resume = resume_phase(lead.root.failure, facts)
    result.phase = resume or (phase_names[-1] if phase_names else None)
    result.reasons.append(f"{lead.root.failure.where}: " + "; ".join(lead.reasons))
    if resume:
        result.reasons.append(
            "it failed while loading the checkpoint (a load_checkpoint frame precedes it)"
            if resume == RESUME_LOAD
            else "it failed in the first iteration after loading the checkpoint (no iteration was logged since)"
        )
    if len(counts) > 1:
        result.reasons.append(
            "ranks disagree: " + ", ".join(f"{n} × {lab}" for lab, n in counts.most_common())
        )
    _reason_about_rank_spread(result, facts)
    if label == HOST_OOM:
        peaks = [
            f.value for f in facts if f.kind == "host_memory_percent" and isinstance(f.value, (int, float))
        ]
        if peaks:
            result.reasons.append(f"host memory reached {max(peaks):.1f}% before the kill")
    if expandable.on is not None:
        result.reasons.append(f"expandable segments {'on' if expandable.on else 'off'} ({expandable.source})")
    return result


def _reason_about_rank_spread(result: Verdict, facts: list[Fact]) -> None:
    failed, known = result.failed_ranks, result.known_ranks
    if not failed or not known or known < 4 or len(failed) > MINORITY_SHARE * known:
        if failed and known and known > 1:
            result.reasons.append(f"{len(failed)} of {known} ranks failed")
        return
    total = (result.numbers.total if result.numbers else None) or 0
    others = {
        f.value[0]: f.value[1]
        for f in facts
        if f.kind == "rank_memory" and isinstance(f.value, tuple) and f.value[0] not in failed
    }
    headroom = bool(others and total and max(others.values()) <= HEADROOM_SHARE * total)
    sentence = f"only {len(failed)} of {known} ranks failed"
    if result.label != CAPACITY:
        result.reasons.append(sentence)
    elif headroom:
        # docs/allocator.md C8: a shortage on few ranks is an uneven load on those ranks, not the job's capacity.
        result.reasons.append(
            f"{sentence} and the others had headroom (max reserved {gib(max(others.values()))} of "
            f"{gib(total)}): the load is uneven (first/last pipeline stage, MoE routing), so fix "
            "that rank rather than the whole job"
        )
    else:
        result.reasons.append(
            f"{sentence}: unless the launcher stopped the others first, the load is uneven "
            "(first/last pipeline stage, MoE routing)"
        )
