"""Measure shrunk versions of layouts ``memtune plan`` proposes, on one GPU.

    # here: plan Llama-3 8B on 8 H200s, keep the three best layouts with distinct (TP, PP),
    # shrink each to 8 layers (same layout, same micro-batches) on the local spec with flash
    # attention (what `memtune measure` runs), and write measurement plans with the predictions
    python benchmarks/gpu/plan_layouts.py prepare PLANS.jsonl
    # on the GPU machine, one run at a time so the timings are the rank's own
    python3 benchmarks/gpu/run_matrix.py run PLANS.jsonl RESULTS.jsonl --logs LOGS --jobs 1
    # here: did each fit, how close are the peak and the compute time of the rank
    python benchmarks/gpu/plan_layouts.py compare PLANS.jsonl RESULTS.jsonl

A rank measured under the fake process group runs its own stage's forward, backward and
optimizer step with collectives that move no data, so its iteration time is the compute part of
the step that the step model predicts for that stage in ``memtune measure``'s own loop
(``Simulated.stage_compute_s`` under ``MEASURE_RUNNER``, as ``benchmarks/compute_accuracy.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

GiB = 2**30
LAYERS = 8  # at least; rounded up to whole chunks


def prepare(out: str) -> int:
    from memtune.check import gate
    from memtune.config.changes import Change, job_data, with_changes
    from memtune.estimate import estimate
    from memtune.measure.plan import plan_measurement
    from memtune.plan.query import Query, base_job
    from memtune.plan.search import search

    base = base_job(Query("llama3-8b", 8, "H200", 8, 4096, 32, "pretrain"))
    result = search(base, top=200)
    seen = set()
    written = 0
    with open(out, "w") as fh:
        for p in result.layouts:
            key = (p.candidate.tp, p.candidate.pp)
            # memtune measure runs Megatron DDP (with or without the distributed optimizer).
            if key in seen or p.candidate.sharding == "fsdp" or p.candidate.offload or written == 3:
                continue
            c = p.candidate
            unit = c.pp * c.vpp
            layers = -(-LAYERS // unit) * unit - (2 if c.split == "accounted" else 0)
            shrunk = with_changes(
                p.checked.job,
                [
                    Change("model.num_layers", layers),
                    Change("model.transformer_impl", "local"),
                    Change("model.attention_backend", "flash"),
                ],
            )
            checked = gate(shrunk)
            est = estimate(checked)
            worst = est.worst
            rank = worst.pp_rank * (checked.derived.world_size // checked.derived.pp)
            line = {
                "id": f"plan-{p.candidate.label().replace(' ', '-').lower()}",
                "split": "plan",
                "layout": p.candidate.label(),
                "recompute": p.candidate.recompute.label(),
                "config": job_data(shrunk),
                "rank": rank,
                "solo": True,
                "need_gib": round(worst.peak_bytes / GiB * 1.25 + 1, 1),
                "estimated_peak_bytes": worst.peak_bytes,
                "capacity_bytes": est.capacity_bytes,
                "non_pytorch_bytes": est.non_pytorch_bytes,
                "predicted_compute_s": stage_compute_s(checked.derived, worst.pp_rank),
                "plan": plan_measurement(checked, rank, 4).to_json(),
            }
            fh.write(json.dumps(line) + "\n")
            seen.add(key)
            written += 1
            print(
                f"{line['id']}: rank {rank}, estimate {worst.peak_bytes / GiB:.2f} GiB, "
                f"compute {line['predicted_compute_s']:.3f} s"
            )
    return 0


def stage_compute_s(d: object, pp_rank: int) -> float:
    """The step model's compute time of one stage (forward, backward, optimizer) in
    ``memtune measure``'s loop."""
    from memtune.perf.constants import MEASURE_RUNNER
    from memtune.perf.step import predict_step

    return predict_step(d, floor=MEASURE_RUNNER).simulated.stage_compute_s[pp_rank]  # type: ignore[arg-type]


def predicted_compute_s(config: dict) -> float:
    """The step model's compute time of the measured rank's stage, with today's constants."""
    from memtune.check import gate
    from memtune.config import validate
    from memtune.estimate import estimate

    checked = gate(validate(config))
    return stage_compute_s(checked.derived, estimate(checked).worst.pp_rank)


def compare(plans_path: str, results_path: str) -> int:
    """Measured against predicted; the prediction is recomputed from each plan's config so that a
    recalibrated model is compared with the same measurements."""
    plans = {p["id"]: p for p in map(json.loads, Path(plans_path).read_text().splitlines())}
    print(
        f"{'layout':28} {'fits':>5} {'peak GiB':>9} {'est GiB':>8} {'err':>7} {'meas s':>7} {'pred s':>7} {'err':>7}"
    )
    for line in Path(results_path).read_text().splitlines():
        r = json.loads(line)
        p = plans[r["id"]]
        if "measured" not in r:
            print(f"{p['layout']:28} error: {r.get('error')}")
            continue
        m = r["measured"]
        peak = m["peak_allocated_bytes"]
        fits = peak + p["non_pytorch_bytes"] <= p["capacity_bytes"]
        seconds = min(it["seconds"] for it in m["iterations"] if it["iteration"] >= 2)
        pred = predicted_compute_s(p["config"])
        print(
            f"{p['layout']:28} {'yes' if fits else 'NO':>5} {peak / GiB:9.2f} {p['estimated_peak_bytes'] / GiB:8.2f} "
            f"{p['estimated_peak_bytes'] / peak - 1:+7.1%} {seconds:7.3f} {pred:7.3f} {pred / seconds - 1:+7.1%}"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "prepare":
        raise SystemExit(prepare(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        raise SystemExit(compare(sys.argv[2], sys.argv[3]))
    print(__doc__)
    raise SystemExit(2)
