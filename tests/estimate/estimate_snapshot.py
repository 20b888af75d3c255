"""Every measured and published run's estimate, component by component, as committed figures.

``python -m tests.estimate.estimate_snapshot`` rewrites ``fixtures/estimate_snapshot.json`` from
the current estimator; ``test_estimate_snapshot.py`` asserts the estimator still gives exactly
those numbers. Regenerate it only in a change that means to move an estimate, and say so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memtune.bench.accuracy import read_runs
from memtune.bench.published import read_published
from memtune.check import gate
from memtune.config import validate
from memtune.estimate import estimate

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "benchmarks" / "measured" / "h200-mcore0.19.2.jsonl"
PUBLISHED = ROOT / "benchmarks" / "published" / "memory"
SNAPSHOT = Path(__file__).resolve().parent / "fixtures" / "estimate_snapshot.json"


def runs() -> list[tuple[str, int, dict[str, Any]]]:
    """(id, measured or published global rank, config) of every run, measured ones first."""
    out = [(f"measured/{r['id']}", int(r["rank"]), r["config"]) for r in read_runs([MEASURED])]
    out += [(f"published/{r['id']}", int(r["rank"]), r["config"]) for r in read_published([PUBLISHED])]
    return out


def figures(rank: int, config: dict[str, Any]) -> dict[str, Any]:
    """The estimate of one run: the measured rank's peak and every pipeline rank's components.
    Floats are kept as JSON writes them (``repr``), which reads back to the same value."""
    est = estimate(gate(validate(config)))
    return {
        "rank_peak_bytes": est.rank(rank).peak_bytes,
        "non_pytorch_bytes": est.non_pytorch_bytes,
        "margin": est.margin,
        "pipeline_ranks": [
            {
                "peak_bytes": r.peak_bytes,
                "weights": r.state.weights,
                "grads": r.state.grads,
                "optimizer": r.state.optimizer,
                "optimizer_step_transient": r.state.optimizer_step_transient,
                "host": r.state.host,
                "activations": r.activations,
                "transient": r.transient,
                "activation_host_pinned": r.activation_host_pinned,
                "peak_phase": r.peak_phase,
                "in_flight": {str(k): v for k, v in sorted(r.in_flight.items())},
            }
            for r in est.ranks
        ],
    }


def snapshot() -> dict[str, Any]:
    return {run_id: figures(rank, config) for run_id, rank, config in runs()}


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}")
