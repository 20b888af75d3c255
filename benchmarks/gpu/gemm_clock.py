"""One GEMM's kernel time back to back, as the tables time it, and between memory-bound kernels.

    python3 benchmarks/gpu/gemm_clock.py OUT.json

``benchmarks/kernel_classes.py`` finds the GEMMs of traced single-rank steps a median 19%
faster than the GEMM tables price them, and the other kernels slower. One reading: a table
times one GEMM back to back, which holds the GPU at its power limit, while inside a step the
GEMMs alternate with memory-bound kernels and the clock stays higher. This times the same
bf16 GEMMs (``torch.matmul``) two ways, each GEMM's own kernel time from a ``torch.profiler``
trace (so the elementwise work between them is not counted):

- ``back_to_back``: the GEMM alone, ``CALLS`` times in a row (after a second of warm-up at it);
- ``interleaved``: each GEMM followed by an fp32 add over a buffer sized so that it takes about
  as long as the GEMM (HBM-bound), ``CALLS`` times.

``nvidia-smi`` samples the SM clock and the board's power every 50 ms during each mode.
Torch only, no memtune: it runs on the lent GPU machine. Raw data; nothing here changes a price.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from typing import Any

SHAPES = [(4096, 28672, 4096), (4096, 4096, 14336), (4096, 4096, 4096), (8192, 8192, 8192)]
CALLS = 200
GEMM_KERNEL = re.compile(r"nvjet|gemm|xmma", re.IGNORECASE)


def sampled(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def clocks_while(fn: Any, torch: Any) -> tuple[list[float], list[float]]:
    """SM clock (MHz) and power (W) samples while ``fn`` runs on the GPU."""
    probe = sampled(
        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"]
    )
    time.sleep(0.2)
    fn()
    torch.cuda.synchronize()
    probe.terminate()
    out, _ = probe.communicate()
    mhz, watts = [], []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and all(p.replace(".", "", 1).isdigit() for p in parts):
            mhz.append(float(parts[0]))
            watts.append(float(parts[1]))
    return mhz, watts


def gemm_kernel_us(fn: Any, torch: Any) -> float:
    """Mean GEMM kernel duration (us) over one traced run of ``fn``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        fn()
        torch.cuda.synchronize()
    durations = [
        e.device_time_total
        for e in trace.events()
        if e.device_type == DeviceType.CUDA and GEMM_KERNEL.search(e.name)
    ]
    return statistics.fmean(durations) if durations else float("nan")


def one_shape(torch: Any, m: int, n: int, k: int) -> dict[str, Any]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    flops = 2 * m * n * k

    def gemms(count: int) -> None:
        for _ in range(count):
            torch.matmul(a, b)

    # the fp32 add that takes about one GEMM's time: GEMM seconds x HBM bytes/s over 12 B an element
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gemms(20)
    start.record()
    gemms(50)
    stop.record()
    torch.cuda.synchronize()
    gemm_s = start.elapsed_time(stop) / 1e3 / 50
    props = torch.cuda.get_device_properties(0)
    hbm = 4.8e12 if "H200" in props.name else 3.35e12
    elements = max(1, int(gemm_s * hbm * 0.8 / 12))
    x = torch.zeros(elements, device="cuda", dtype=torch.float32)
    y = torch.ones(elements, device="cuda", dtype=torch.float32)

    def interleaved(count: int) -> None:
        for _ in range(count):
            torch.matmul(a, b)
            x.add_(y)

    result: dict[str, Any] = {"m": m, "n": n, "k": k, "add_elements": elements}
    for mode, fn in (("back_to_back", gemms), ("interleaved", interleaved)):
        warm_until = time.time() + 1.0
        while time.time() < warm_until:
            fn(20)
        torch.cuda.synchronize()
        mhz, watts = clocks_while(lambda fn=fn: fn(CALLS * 3), torch)
        us = gemm_kernel_us(lambda fn=fn: fn(CALLS), torch)
        result[mode] = {
            "gemm_kernel_us": us,
            "tflops": flops / (us * 1e-6) / 1e12,
            "sm_mhz_median": statistics.median(mhz) if mhz else None,
            "power_w_median": statistics.median(watts) if watts else None,
            "samples": len(mhz),
        }
        print(json.dumps({"shape": [m, n, k], mode: result[mode]}), file=sys.stderr)
    return result


def main() -> int:
    import torch

    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = [one_shape(torch, *shape) for shape in SHAPES]
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "gemms": rows}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
