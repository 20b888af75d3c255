"""The eager kernels' own GPU time at small sizes, beside the event timing the kernel table uses.

    python3 benchmarks/gpu/elementwise_trace.py OUT.json

``kernel_calibration.py``'s ``elementwise`` section times each call between CUDA events over
repeated calls. Where a call's kernels are shorter than the host's launches of them, that
measures the host's launch rate, not the GPU (docs/plan.md, "GEMMs below the tables' smallest
M": at 2 M elements RMSNorm's backward reads 66.7 us for 8 MB). This script times the same cases
(the same functions, imported) at 0.25-64 M elements in two ways:

- ``event_ms``: as the table does (``kernel_calibration.time_ms``);
- ``kernel_ms``: the summed duration of the CUDA kernels one call runs, read from a
  ``torch.profiler`` trace of 20 calls after warm-up (memcpy and memset included), per call.

Torch only, no memtune: it runs on the lent GPU machine. Each size's tensor is ``[tokens,
hidden]`` in bf16 with hidden 2,048, 4,096 or 8,192. The step model prices a GPU's eager
kernels from its ``kernel_ms`` where this ran on it (``memtune/perf/kernels.py``
``ELEMENTWISE_TRACES``; the raw files, copied byte for byte into ``memtune/perf/data/``).
"""

from __future__ import annotations

import json
import sys
from functools import partial
from typing import Any

import kernel_calibration  # benchmarks/gpu/ is on sys.path when this runs as a script

SHAPES = [
    (128, 2048),
    (256, 2048),
    (512, 2048),
    (1024, 2048),
    (1024, 4096),
    (2048, 4096),
    (4096, 4096),
    (8192, 8192),
]
CALLS = 20


def cases(torch: Any, tokens: int, h: int) -> dict[str, Any]:
    """The table's elementwise cases at one size (kernel_calibration.elementwise)."""
    import torch.nn.functional as F

    x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = F.rms_norm(x, (h,), w)
    g = torch.randn_like(y)
    return {
        "rmsnorm fwd": partial(F.rms_norm, x, (h,), w),
        "rmsnorm bwd": partial(torch.autograd.grad, y, (x, w), g, retain_graph=True),
        "layernorm fwd": partial(F.layer_norm, x, (h,), w),
        "swiglu fwd": partial(kernel_calibration.swiglu, x),
        "bias dropout add": partial(kernel_calibration.bias_dropout_add, x, w),
        "rope": partial(kernel_calibration.rope_like, x, w),
    }


def kernel_ms(fn: Any, torch: Any) -> float:
    """The GPU time of one call: its kernels' summed durations in a profiler trace."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    # self time: a kernel's own duration; an operator's self device time is none of its kernels'
    device_us = sum(e.self_device_time_total for e in trace.key_averages())
    return device_us / 1e3 / CALLS


def main() -> int:
    import torch

    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = []
    for tokens, h in SHAPES:
        for name, fn in cases(torch, tokens, h).items():
            rows.append(
                {
                    "name": name,
                    "tokens": tokens,
                    "hidden": h,
                    "elements": tokens * h,
                    "event_ms": kernel_calibration.time_ms(fn, torch),
                    "kernel_ms": kernel_ms(fn, torch),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "elementwise": rows}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
