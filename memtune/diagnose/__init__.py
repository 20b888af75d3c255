"""``memtune diagnose``: why a run ran out of memory, and what to change first.

Logs are streamed through cheap triggers into detectors (:mod:`scan`, :mod:`detectors`), the
findings are classified per rank and overall (:mod:`classify`), a memory snapshot is read without
executing anything (:mod:`snapshot`), and fixes are ordered cheapest first (:mod:`advice`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memtune.diagnose.classify import Verdict, expandable_state, verdict
from memtune.diagnose.evidence import EXPLICIT, LABELS
from memtune.diagnose.logscan import ScanResult, scan, scan_text
from memtune.diagnose.snapshot import SnapshotSummary, plot, read_snapshot, summarise

if TYPE_CHECKING:
    from memtune.config import LoadedJob
    from memtune.diagnose.advice import Fix

__all__ = ["LABELS", "Diagnosis", "diagnose", "diagnose_text"]

# The config stack (pydantic, the checks, the estimator) is imported only where a diagnosis needs
# it: reading logs does not, and `memtune bisect` starts a process per commit that only reads logs.


@dataclass
class Diagnosis:
    verdict: Verdict
    scan: ScanResult
    snapshot: SnapshotSummary | None = None
    fixes: list[Fix] = field(default_factory=list)


def _config_expandable(loaded: LoadedJob | None) -> bool | None:
    if loaded is None:
        return None
    from memtune.config import derive

    return derive(loaded.job).allocator.expandable_segments


def _merge_snapshot(v: Verdict, snap: SnapshotSummary) -> None:
    """The snapshot decides when the logs could not; otherwise it adds its reasons."""
    if snap.label is None:
        return
    reasons = [f"snapshot {snap.source}: " + "; ".join(snap.reasons)]
    if v.label is None or (v.ranks and max(r.root.failure.strength for r in v.ranks) < EXPLICIT):
        v.label, v.confidence = snap.label, "high"
        v.reasons = reasons + v.reasons
    else:
        if snap.label != v.label:
            reasons[0] += f" (the snapshot reads {snap.label})"
        v.reasons.extend(reasons)


def _diagnose(
    result: ScanResult, snapshot: str | None, config: str | LoadedJob | None, plot_to: str | None
) -> Diagnosis:
    from memtune.config import load_job
    from memtune.diagnose.advice import advise

    loaded = load_job(config, []) if isinstance(config, str) else config
    snap = None
    if snapshot:
        snap_data = read_snapshot(snapshot)
        snap = summarise(snap_data, snapshot)
        if plot_to:
            plot(snap_data, plot_to, f"memory over the trace: {snapshot}")
    formats = [f.numbers.format for f in result.failures if f.numbers is not None]
    state = expandable_state(
        result.facts, _config_expandable(loaded), snap.expandable_segments if snap else None, formats
    )
    v = verdict(result.failures, result.facts, state)
    if snap is not None:
        _merge_snapshot(v, snap)
    return Diagnosis(v, result, snap, advise(v, loaded))


def diagnose(
    inputs: list[str],
    snapshot: str | None = None,
    config: str | LoadedJob | None = None,
    plot_to: str | None = None,
) -> Diagnosis:
    """Diagnose logs (files, directories or "-" for stdin), optionally with a snapshot (and a plot of
    it) and the job config (a path, or a job already loaded with its overrides)."""
    result = scan(inputs) if inputs else ScanResult()
    return _diagnose(result, snapshot, config, plot_to)


def diagnose_text(text: str, snapshot: str | None = None, config: str | None = None) -> Diagnosis:
    return _diagnose(scan_text(text), snapshot, config, None)
