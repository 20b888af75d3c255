"""``memtune report``'s computation: measured peak against the estimate per rank, and the
detectors run over each rank's recorded series. Pure of torch; rendering is in :mod:`render`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memtune.errors import InputError
from memtune.runtime import detectors
from memtune.runtime.records import MonitorRun, RankRecords, Segment
from memtune.units import human

if TYPE_CHECKING:
    from memtune.estimate import Estimate


@dataclass(frozen=True)
class RankEstimateRef:
    pp_rank: int | None
    estimate_bytes: int | None


@dataclass
class RankRow:
    rank: int
    pp_rank: int | None
    steps: int
    peak_allocated_bytes: int | None  # steady state: each process's first step left out
    peak_reserved_bytes: int | None
    device_used_bytes: int | None
    num_alloc_retries: int | None
    estimate_bytes: int | None

    @property
    def difference_bytes(self) -> int | None:
        if self.peak_allocated_bytes is None or self.estimate_bytes is None:
            return None
        return self.peak_allocated_bytes - self.estimate_bytes

    @property
    def difference_fraction(self) -> float | None:
        if self.difference_bytes is None or not self.estimate_bytes:
            return None
        return self.difference_bytes / self.estimate_bytes


@dataclass(frozen=True)
class Finding:
    kind: str  # growth | resume_jump | alloc_retries | rank_outlier
    rank: int
    message: str
    steps: tuple[int, ...] = ()


@dataclass
class Report:
    rows: list[RankRow]
    findings: list[Finding] = field(default_factory=list)
    estimate_source: str | None = None  # "config FILE", "monitor records" or None


def _series(steps: list[dict[str, Any]], key: str) -> detectors.Series:
    return [(s["step"], s[key]) for s in steps if s.get(key) is not None]


def _steady(segment: Segment) -> list[dict[str, Any]]:
    """A process's steps without its first one (optimizer state and caches are allocated then)."""
    return segment.steps[1:] if len(segment.steps) > 1 else segment.steps


def _max(steps: list[dict[str, Any]], key: str) -> int | None:
    values = [s[key] for s in steps if s.get(key) is not None]
    return max(values) if values else None


def rank_row(records: RankRecords, ref: RankEstimateRef | None) -> RankRow:
    steady = [s for seg in records.segments for s in _steady(seg)]
    last = records.steps[-1] if records.steps else {}
    return RankRow(
        rank=records.rank,
        pp_rank=ref.pp_rank if ref is not None else records.pp_rank,
        steps=len(records.steps),
        peak_allocated_bytes=_max(steady, "peak_allocated_bytes"),
        peak_reserved_bytes=_max(steady, "peak_reserved_bytes"),
        device_used_bytes=_max(steady, "device_used_bytes"),
        num_alloc_retries=last.get("num_alloc_retries"),
        estimate_bytes=ref.estimate_bytes if ref is not None else records.estimate_bytes,
    )


def _steps_text(steps: tuple[int, ...], limit: int = 8) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (f" and {len(steps) - limit} more" if len(steps) > limit else "")


def rank_findings(records: RankRecords) -> list[Finding]:
    found: list[Finding] = []
    r = records.rank
    for segment in records.segments:
        for key, what in (("allocated_bytes", "allocated"), ("reserved_bytes", "reserved")):
            g = detectors.growth(_series(segment.steps, key))
            if g is not None:
                found.append(
                    Finding(
                        "growth",
                        r,
                        f"rank {r}: {what} memory kept growing from step {g.first_step} to {g.last_step} "
                        f"(+{human(g.grown_bytes)}, never given back); it rose at steps {_steps_text(g.steps)}: "
                        "look for tensors kept across steps (losses kept with their graph, growing lists, caches)",
                        g.steps,
                    )
                )
        rises = detectors.counter_rises(_series(segment.steps, "num_alloc_retries"))
        if rises:
            found.append(
                Finding(
                    "alloc_retries",
                    r,
                    f"rank {r}: num_alloc_retries rose at steps {_steps_text(rises)}: the allocator flushed its "
                    "cache to satisfy a request (fragmentation ahead; expandable_segments:True is the first fix)",
                    rises,
                )
            )
    for before, after in zip(records.segments, records.segments[1:]):
        if after.resumed_at is None:
            continue
        for key, what in (
            ("peak_allocated_bytes", "peak allocated"),
            ("peak_reserved_bytes", "peak reserved"),
        ):
            j = detectors.resume_jump(_series(before.steps, key), _series(after.steps, key), after.resumed_at)
            if j is not None:
                found.append(
                    Finding(
                        "resume_jump",
                        r,
                        f"rank {r}: {what} after the resume at step {j.resume_step} is {human(j.after_bytes)}, "
                        f"{human(j.jump_bytes)} above the steady state before it ({human(j.before_bytes)}): "
                        "checkpoint-load temporaries left in the cache or an extra copy of the weights "
                        "(free the loaded state dict; torch.cuda.empty_cache() after loading)",
                        (j.resume_step,),
                    )
                )
    return found


def outlier_findings(rows: list[RankRow]) -> list[Finding]:
    peaks = {
        row.rank: float(row.peak_allocated_bytes) for row in rows if row.peak_allocated_bytes is not None
    }
    groups = {row.rank: row.pp_rank for row in rows}
    found = []
    for o in detectors.outliers(peaks, groups):
        peers = (
            f"pipeline stage {groups[o.rank]}"
            if groups[o.rank] is not None
            else "all ranks (no pipeline layout known)"
        )
        found.append(
            Finding(
                "rank_outlier",
                o.rank,
                f"rank {o.rank}: peak allocated {human(o.peak_bytes)} is {human(o.excess_bytes)} above its peers "
                f"({peers}: ranks {', '.join(map(str, o.peers))}, median {human(o.peers_bytes)}): "
                "uneven work (MoE routing imbalance, uneven sequence lengths) or something only this rank keeps",
            )
        )
    return found


def rank_estimates(run: MonitorRun, est: Estimate, config: str) -> dict[int, RankEstimateRef]:
    """Each recorded rank's estimate from ``config``; a rank the config's world does not have
    means the records and the config are of different jobs."""
    world = est.derived.world_size
    outside = sorted(rank for rank in run.ranks if rank >= world)
    if outside:
        raise InputError(
            f"--config {config}: its world size is {world}, but {run.directory} has records of rank "
            f"{', '.join(map(str, outside[:5]))}{' ...' if len(outside) > 5 else ''} (records of another job?)"
        )
    refs = {}
    for rank in run.ranks:
        rank_estimate = est.rank(rank)
        refs[rank] = RankEstimateRef(rank_estimate.pp_rank, rank_estimate.peak_bytes)
    return refs


def build_report(run: MonitorRun, estimates: dict[int, RankEstimateRef] | None, source: str | None) -> Report:
    rows = [rank_row(records, (estimates or {}).get(rank)) for rank, records in sorted(run.ranks.items())]
    findings = [f for records in run.ranks.values() for f in rank_findings(records)]
    findings += outlier_findings(rows)
    if source is None and any(row.estimate_bytes is not None for row in rows):
        source = "monitor records"
    return Report(rows, findings, source)


def split_of(run_id: str) -> str:
    """The measured set's tune/holdout rule (benchmarks/measured/README.md)."""
    return "holdout" if int(hashlib.sha1(run_id.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


def measured_records(
    run: MonitorRun, config: dict[str, Any], run_name: str, rows: list[RankRow]
) -> list[dict[str, Any]]:
    """One record per rank in the format ``memtune bench accuracy`` reads."""
    out = []
    for row in rows:
        if row.peak_allocated_bytes is None:
            continue
        records = run.ranks[row.rank]
        steps = records.steps
        run_id = f"{run_name}-rank{row.rank}"
        start = records.starts[-1] if records.starts else {}
        out.append(
            {
                "id": run_id,
                "split": split_of(run_id),
                "config": config,
                "rank": row.rank,
                "pp_rank": row.pp_rank,
                "wall_seconds": sum(s.get("step_seconds") or 0.0 for s in steps),
                "measured": {
                    "peak_allocated_bytes": row.peak_allocated_bytes,
                    "peak_reserved_bytes": row.peak_reserved_bytes,
                    "num_alloc_retries": row.num_alloc_retries,
                    "iterations": [
                        {
                            "iteration": s["step"],
                            "peak_allocated_bytes": s.get("peak_allocated_bytes"),
                            "peak_reserved_bytes": s.get("peak_reserved_bytes"),
                            "allocated_after_step": s.get("allocated_bytes"),
                            "reserved_after_step": s.get("reserved_bytes"),
                            "num_alloc_retries": s.get("num_alloc_retries"),
                            "seconds": s.get("step_seconds"),
                        }
                        for s in steps
                    ],
                },
                "environment": {
                    "torch": start.get("torch"),
                    "allocator_conf": start.get("allocator_settings"),
                    "source": "memtune.runtime.MemoryMonitor",
                },
            }
        )
    return out
