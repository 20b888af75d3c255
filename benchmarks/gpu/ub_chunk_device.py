"""The GPU's own cost of splitting a GEMM into the chunks of Transformer Engine's userbuffer ring
exchange, mimicked in torch on one GPU (no Transformer Engine, no second GPU on the lent
machines).

    python3 benchmarks/gpu/ub_chunk_device.py OUT.json

Transformer Engine's ``CommOverlapP2PBase::split_overlap_ag`` (TransformerEngine d0067d0,
``common/comm_gemm_overlap/comm_gemm_overlap.cpp``) runs an overlapped GEMM of ``M`` rows as
``T`` GEMMs of ``M / T`` rows: chunk ``i``'s GEMM runs on one of up to three compute streams
(``num_max_streams``) once an event says chunk ``i`` has arrived, while the next chunk is
received on a side stream. The step model prices those chunks as ``T`` GEMMs of ``M / T`` rows
at the rate measured back to back on one stream (``gemm-small-m-*.json``), plus the exchange's
bytes beyond them; what the chunk boundaries cost the GPU itself (each chunk's GEMM waits for an
event on another stream and starts cold, where back-to-back kernels overlap one's tail with the
next one's start) it does not price. This times, per shape, CUDA events around ``CALLS``
repetitions, the median of ``REPEATS``:

- ``whole``: one GEMM of ``M`` rows;
- ``back_to_back``: ``T`` GEMMs of ``M / T`` rows on one stream (what the model prices);
- ``ring``: the ring exchange's structure on one GPU: a receive stream copies each next chunk's
  input (``M / T`` x ``K`` bytes, device to device) and records an event per chunk; chunk
  ``i``'s GEMM waits for its event on compute stream ``i mod 3``, writing its slice of the
  output; the main stream waits for the compute streams at the end;
- ``ring_events``: the same without the copies (the events and stream switches alone).

The copies here run within one GPU's memory, faster than NVLink's, so a chunk never waits for its
bytes: what is left is the boundaries' own cost. FP8 GEMMs through ``torch._scaled_mm``
(cuBLASLt, as Transformer Engine's) where the GPU has them, and bf16 for two shapes.

The first rule, fixed before the first run: per FP8 shape, the cost per extra GEMM call
``G = (ring - back_to_back) / (T - 1)``; ``UB_CHUNK_DEVICE_S`` is the median of ``G`` over the FP8
shapes of both passes (two passes in one call), adopted as measured, as device time per extra
GEMM call of the overlap (``ShapePricer.userbuffer_chunks``: ring exchanges and pipelined
reduce-scatters alike), if the two passes' medians agree within a factor of two and the median is
at least 2 us; otherwise nothing is adopted and the figure is written down. Run once on an H100
(GPU-fc87adfd; ``results/ub-chunk-device-h100-rule1.json``): 87 us, and not adopted: the timing
measured the host, not the GPU. The events were recorded as the host issued the work, and an
FP8 chunk (``_scaled_mm`` and the copy into the output's slice) costs the host more than the GPU
(eight chunks of 512 rows took 382 us back to back where one GEMM of 4,096 rows took 71 us), so
the GPU waited for the host in every variant, and the ring's stream switches and events are
host work, which ``UB_CHUNK_HOST_S`` already prices. Hence the second rule, fixed before its
run: every timed repetition is issued behind a ``torch.cuda._sleep`` long enough that the host
has queued all of it before the GPU reaches it (``SLEEP_CYCLES``), so the events time the
GPU alone; the same ``G``, median and adoption test.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

# (name, M, N, K, T) of the ring-exchanged GEMMs (the gathered input's forward GEMMs and the
# output side's data gradients): Llama 3 70B at 4,096 tokens, TP 8 and TP 4, and GPT-3 175B
# at 2,048 tokens, TP 4
SHAPES = [
    ("llama3-70b tp8 qkv fprop", 4096, 1280, 8192, 8),
    ("llama3-70b tp8 fc1 fprop", 4096, 7168, 8192, 8),
    ("llama3-70b tp8 proj dgrad", 4096, 1024, 8192, 8),
    ("llama3-70b tp8 fc2 dgrad", 4096, 3584, 8192, 8),
    ("llama3-70b tp4 qkv fprop", 4096, 2560, 8192, 4),
    ("llama3-70b tp4 fc1 fprop", 4096, 14336, 8192, 4),
    ("llama3-70b tp4 proj dgrad", 4096, 2048, 8192, 4),
    ("llama3-70b tp4 fc2 dgrad", 4096, 7168, 8192, 4),
    ("gpt3-175b tp4 qkv fprop", 2048, 9216, 12288, 4),
    ("gpt3-175b tp4 fc1 fprop", 2048, 12288, 12288, 4),
    ("gpt3-175b tp4 proj dgrad", 2048, 3072, 12288, 4),
    ("gpt3-175b tp4 fc2 dgrad", 2048, 12288, 12288, 4),
]
BF16_SHAPES = ("llama3-70b tp8 fc1 fprop", "llama3-70b tp4 fc1 fprop")
COMPUTE_STREAMS = 3  # Transformer Engine's num_max_streams default
CALLS = 20
REPEATS = 9
PASSES = 2
# The GPU's head start: about 0.1 s at H100 clocks, several times what the host takes to issue
# CALLS repetitions of the ring (about 1 ms each when host-bound, rule 1's run)
SLEEP_CYCLES = 200_000_000


def gemm_call(torch: Any, fp8: bool, m: int, n: int, k: int) -> Any:
    """``f(start, rows, out)``: the GEMM of rows ``start:start + rows`` into ``out``'s slice."""
    if fp8:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
        scale = torch.ones((), device="cuda")

        def fp8_gemm(start: int, rows: int, out: Any) -> None:
            out[start : start + rows] = torch._scaled_mm(
                a[start : start + rows], b, scale, scale, out_dtype=torch.bfloat16
            )

        return fp8_gemm
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)

    def bf16_gemm(start: int, rows: int, out: Any) -> None:
        torch.matmul(a[start : start + rows], b, out=out[start : start + rows])

    return bf16_gemm


def timed_ms(torch: Any, fn: Any) -> float:
    """Median milliseconds of one ``fn()`` on the GPU (CUDA events on the current stream), the
    repetitions queued behind a sleep so that the GPU never waits for the host."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs: list[float] = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        for _ in range(CALLS):
            fn()
        end.record()
        torch.cuda.synchronize()
        runs.append(float(start.elapsed_time(end)) / CALLS)
    return statistics.median(runs)


def shape_times(torch: Any, fp8: bool, m: int, n: int, k: int, t: int) -> dict[str, float]:
    gemm = gemm_call(torch, fp8, m, n, k)
    rows = m // t
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    source = torch.empty(rows * k, device="cuda", dtype=torch.uint8)
    received = torch.empty(t, rows * k, device="cuda", dtype=torch.uint8)
    main = torch.cuda.current_stream()
    recv = torch.cuda.Stream()
    compute = [torch.cuda.Stream() for _ in range(min(COMPUTE_STREAMS, t))]

    def whole() -> None:
        gemm(0, m, out)

    def back_to_back() -> None:
        for i in range(t):
            gemm(i * rows, rows, out)

    def ring(copies: bool) -> Any:
        def issue() -> None:
            arrived = []
            recv.wait_stream(main)
            for s in compute:
                s.wait_stream(main)
            for i in range(t):
                with torch.cuda.stream(recv):
                    if copies and i > 0:  # chunk 0 is the rank's own
                        received[i].copy_(source)
                    event = torch.cuda.Event()
                    event.record(recv)
                    arrived.append(event)
            for i in range(t):
                stream = compute[i % len(compute)]
                stream.wait_event(arrived[i])
                with torch.cuda.stream(stream):
                    gemm(i * rows, rows, out)
            for s in compute:
                main.wait_stream(s)

        return issue

    return {
        "whole_ms": timed_ms(torch, whole),
        "back_to_back_ms": timed_ms(torch, back_to_back),
        "ring_ms": timed_ms(torch, ring(copies=True)),
        "ring_events_ms": timed_ms(torch, ring(copies=False)),
    }


def one_pass(torch: Any, fp8: bool) -> dict[str, Any]:
    shapes: dict[str, Any] = {}
    for name, m, n, k, t in SHAPES:
        kinds = (["fp8"] if fp8 else []) + (["bf16"] if name in BF16_SHAPES or not fp8 else [])
        for kind in kinds:
            times = shape_times(torch, kind == "fp8", m, n, k, t)
            times["extra_call_us"] = (times["ring_ms"] - times["back_to_back_ms"]) / (t - 1) * 1e3
            shapes[f"{name} {kind}"] = {"m": m, "n": n, "k": k, "t": t, **times}
    gaps = [s["extra_call_us"] for key, s in shapes.items() if key.endswith(" fp8")]
    return {"shapes": shapes, "median_extra_call_us": statistics.median(gaps) if gaps else None}


def main() -> int:
    import torch

    if len(sys.argv) != 2:
        sys.exit("usage: ub_chunk_device.py OUT.json")
    fp8 = torch.cuda.get_device_capability() >= (8, 9)
    passes = [one_pass(torch, fp8) for _ in range(PASSES)]
    medians = [p["median_extra_call_us"] for p in passes]
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "fp8": fp8,
        "passes": passes,
    }
    if all(v is not None for v in medians):
        both = [s["extra_call_us"] for p in passes for k, s in p["shapes"].items() if k.endswith(" fp8")]
        value = statistics.median(both)
        agree = max(medians) <= 2 * min(medians) if min(medians) > 0 else False
        result["ub_chunk_device_us"] = value
        result["adopted"] = agree and value >= 2.0
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "passes"}, indent=1))
    for p in passes:
        for key, s in p["shapes"].items():
            print(
                f"{key:32s} whole {s['whole_ms'] * 1e3:7.1f} us  b2b {s['back_to_back_ms'] * 1e3:7.1f}"
                f"  ring {s['ring_ms'] * 1e3:7.1f}  events {s['ring_events_ms'] * 1e3:7.1f}"
                f"  G {s['extra_call_us']:6.1f} us"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
