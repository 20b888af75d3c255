"""Whether the GEMMs under 1,024 rows are priced right inside a step: the ``smallm-`` runs
(benchmarks/measured/matrix.py ``small_m_kernels``, every one traced on a lent H100; raw
``benchmarks/gpu/results/smallm-h100.results.jsonl``).

    python benchmarks/small_m_check.py

The rule, fixed before the runs were measured: per run, the traced kernels' time outside
attention over the step model's price for them at the tables' own machine, with the small-M
ratios of ``memtune/perf/data/gemm-small-m-h100.json`` and without them (each shape under 1,024
rows at its 1,024-row rate, as before commit fd3ae07); the ratios are right if the small-M runs'
median quotient sits closer to the 1,024- and 2,048-row controls' median with them than without.

Then, chosen after the rule's answer was seen (so a diagnostic, not a check): the same quotient
for the GEMM kernels alone (``nvjet``/``gemm`` by name in the trace) over the step model's price
for the layers' GEMMs and the output layer's (forward, data and weight gradient each at the
forward's rate), since the traces show the non-GEMM kernels of these small ranks (the fp32
gradient accumulation above all) outweighing their GEMMs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))
RESULTS = ROOT / "benchmarks" / "gpu" / "results" / "smallm-h100.results.jsonl"


def quotients() -> dict[str, float]:
    """Run id -> traced kernels outside attention over the model's price for them."""
    from compute_accuracy import predicted_device_s, timed_runs

    from memtune.perf.layer import Machine

    out = {}
    for run in timed_runs(RESULTS):
        at_one = predicted_device_s(replace(run, machine=Machine()))
        flash = predicted_device_s(replace(run, machine=Machine(1.0, 2.0))) - at_one
        out[run.id] = (run.device_s - run.attention_s) / (at_one - flash)
    return out


def gemm_quotients() -> dict[str, float]:
    """Run id -> traced GEMM kernels over the step model's price for the GEMMs alone."""
    from memtune.catalog.gpus import get_gpu
    from memtune.config import derive, validate
    from memtune.perf import constants as K
    from memtune.perf.layer import ShapePricer

    out = {}
    for line in RESULTS.read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        kernels = run["measured"]["profile"]["kernels"]
        traced = sum(k["us"] for k in kernels if k["name"].startswith("nvjet") or "gemm" in k["name"].lower())
        d = derive(validate(run["config"]))
        pricer = ShapePricer(d, get_gpu(d.job.cluster.gpu), K.MEASURE_RUNNER)
        layer = pricer.attention_gemms()[0] + pricer.mlp(False)[0]
        output = pricer.gemm(pricer.tokens, d.padded_vocab_size / d.tp, d.model.hidden_size)
        priced = d.num_microbatches * 3 * (d.model.num_layers * layer + output)
        out[run["id"]] = traced / 1e6 / priced
    return out


def apart(name: str, qs: dict[str, float]) -> None:
    """The small-M runs' median quotient against the controls'."""

    def small(run_id: str) -> bool:
        return run_id.rsplit("-s", 1)[1].startswith(("256", "512"))

    smalls = statistics.median(q for r, q in qs.items() if small(r))
    controls = statistics.median(q for r, q in qs.items() if not small(r))
    print(
        f"{name}: small-M runs {smalls:.3f}, controls {controls:.3f}, apart {abs(smalls / controls - 1):.1%}"
    )


def main() -> int:
    if "--without-small-m" in sys.argv:  # the child: the tables as they were before fd3ae07
        import memtune.perf.kernels as kernels

        kernels.small_m_ratios = lambda kind: {}  # type: ignore[assignment]
        for kind, qs in (("all", quotients()), ("gemm", gemm_quotients())):
            for run_id, q in qs.items():
                print(kind, run_id, q)
        return 0
    child = subprocess.run(
        [sys.executable, __file__, "--without-small-m"], check=True, capture_output=True, text=True
    ).stdout
    without: dict[str, dict[str, float]] = {"all": {}, "gemm": {}}
    for line in child.splitlines():
        kind, run_id, q = line.split()
        without[kind][run_id] = float(q)
    for kind, with_ratios in (("all", quotients()), ("gemm", gemm_quotients())):
        label = "kernels outside attention (the rule)" if kind == "all" else "GEMMs alone (diagnostic)"
        print(f"{label}\n{'run':32s} {'with':>6s} {'without':>8s}")
        for run_id, q in with_ratios.items():
            print(f"{run_id:32s} {q:6.3f} {without[kind][run_id]:8.3f}")
        apart("with the small-M ratios", with_ratios)
        apart("without them", without[kind])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
