"""The figures docs/plan.md quotes from two GEMM measurements on lent H100s
(``kernel_calibration.py --sections gemm_small_m`` and ``--sections gemm,gemm_backward``).

    python benchmarks/gemm_tables_check.py

- ``results/gemm-small-m-h100.json``: each shape's rate at 256 and 512 rows over its rate at
  1,024 rows, how far the two passes' ratios differ (median), and the ratios of Llama 3 70B's
  TP 8 shapes; ``results/gemm-small-m-h100-grid.json``: the same machine's grid against the
  H100 table's (``kernels-h100.json``), the median time ratio; ``results/gemm-small-m-h100-machine2.json``
  and ``results/gemm-small-m-h200.json``: the ratios again on a second H100 and on an H200, against
  the packaged ones.
- ``results/gemm-backward-h100.json``: each data- and weight-gradient GEMM's time over its
  forward's on the same machine: median and 10th/90th percentiles by kind, and the extremes.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "results"
KINDS = ("bf16", "fp8_tensorwise")


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def small_m_ratios(name: str, kind: str) -> list[dict[tuple[str, int], float]]:
    """Each pass's rate of every shape at 256 and 512 rows over its rate at 1,024 rows."""
    passes = [{(g["name"], g["m"]): g["tflops"] for g in one[kind]} for one in load(name)["passes"]]
    return [{key: rows[key] / rows[key[0], 1024] for key in rows if key[1] < 1024} for rows in passes]


def small_m() -> None:
    for kind in KINDS:
        ratios = small_m_ratios("gemm-small-m-h100.json", kind)
        spread = statistics.median(abs(ratios[0][key] / ratios[1][key] - 1) for key in ratios[0])
        print(f"{kind}: the passes' small-M ratios differ by a median {spread:.1%}")
        for name in ("llama3-70b tp8 qkv", "llama3-70b tp8 proj"):
            mean = [statistics.mean(r[name, m] for r in ratios) for m in (256, 512)]
            print(f"  {name}: 256 rows {mean[0]:.2f}, 512 rows {mean[1]:.2f} of the 1,024-row rate")
    grid, table = load("gemm-small-m-h100-grid.json")["gemm"], load("kernels-h100.json")["gemm"]
    for kind in KINDS:
        ours = {(g["name"], g["m"]): g["tflops"] for g in grid[kind]}
        ratio = statistics.median(ours[g["name"], g["m"]] / g["tflops"] for g in table[kind])
        print(f"{kind}: this machine's grid ran at {ratio:.3f}x the H100 table's rate (median)")


def small_m_elsewhere(name: str, machine: str) -> None:
    """The ratios again on another machine (``results/<name>``), against the packaged ones (the
    first H100's): the median and the 10th-90th percentiles of the quotient, per kind and rows."""
    for kind in KINDS:
        first, second = (
            {key: statistics.mean(r[key] for r in rs) for key in rs[0]}
            for rs in (small_m_ratios("gemm-small-m-h100.json", kind), small_m_ratios(name, kind))
        )
        for rows in (256, 512):
            q = sorted(second[key] / first[key] for key in first if key[1] == rows)
            print(
                f"{kind} at {rows} rows: {machine}'s ratios are a median {statistics.median(q):.3f}x the "
                f"packaged ones, {q[len(q) // 10]:.2f}-{q[9 * len(q) // 10]:.2f}x between the 10th and 90th percentiles"
            )


def backward() -> None:
    raw = load("gemm-backward-h100.json")
    for kind in KINDS:
        forward = {(g["name"], g["m"]): g["ms"] for g in raw["gemm"][kind]}
        for role in ("dgrad", "wgrad"):
            ratios = sorted(
                g["ms"] / forward[g["name"], g["tokens"]]
                for g in raw["gemm_backward"][kind]
                if g["role"] == role
            )
            tenth, ninetieth = ratios[len(ratios) // 10], ratios[9 * len(ratios) // 10]
            print(
                f"{kind} {role}: a median {statistics.median(ratios):.2f}x the forward's time, "
                f"{tenth:.2f}-{ninetieth:.2f}x between the 10th and 90th percentiles, {ratios[0]:.2f}-{ratios[-1]:.2f}x"
            )


if __name__ == "__main__":
    small_m()
    small_m_elsewhere("gemm-small-m-h100-machine2.json", "a second H100")
    small_m_elsewhere("gemm-small-m-h200.json", "an H200")
    backward()
