"""How long one estimate takes (the planner will call it many times).

Run: python benchmarks/estimate_speed.py
Prints the median wall and CPU time of ``estimate(checked)`` (checks excluded) and of the
full ``estimate(gate(job))`` for the bundled examples and a 405B-shaped job. On a loaded machine
the CPU time is the figure to compare: wall time there includes waiting for a core.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from memtune.check import gate
from memtune.config import load_job
from memtune.estimate import estimate

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("examples/llama3-70b-sft.yaml", []),
    ("examples/qwen3-30b-a3b-ep8.yaml", []),
    (
        "examples/llama3-70b-sft.yaml",
        [
            "model.num_layers=126",
            "model.hidden_size=16384",
            "model.ffn_hidden_size=53248",
            "model.num_attention_heads=128",
            "model.tensor_model_parallel_size=8",
            "model.pipeline_model_parallel_size=7",
            "model.virtual_pipeline_model_parallel_size=3",
            "cluster.num_gpus=112",
            "train.global_batch_size=112",
        ],
    ),
]


def median_ms(fn, repeats: int = 30) -> tuple[float, float]:
    """Median wall and median CPU milliseconds of one call."""
    wall, cpu = [], []
    for _ in range(repeats):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - wall0) * 1000)
        cpu.append((time.process_time() - cpu0) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    for path, overrides in CASES:
        job = load_job(ROOT / path, overrides).job
        label = path + (" (405B shape, TP8 PP7 VPP3)" if overrides else "")
        checked = gate(job)
        bare_wall, bare_cpu = median_ms(lambda checked=checked: estimate(checked))
        full_wall, full_cpu = median_ms(lambda job=job: estimate(gate(job)))
        print(label)
        print(
            f"  estimate {bare_cpu:6.2f} ms CPU ({bare_wall:6.2f} wall)   "
            f"with checks {full_cpu:6.2f} ms CPU ({full_wall:6.2f} wall)"
        )


if __name__ == "__main__":
    main()
