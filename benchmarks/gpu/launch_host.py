"""The host's work for one chunk of Transformer Engine's userbuffer ring exchange, and for a
collective of a few bytes, mimicked in torch (no Transformer Engine on the lent machines).

    python3 benchmarks/gpu/launch_host.py OUT.json

Transformer Engine's ``CommOverlapP2PBase::split_overlap_ag`` (TransformerEngine d0067d0,
``common/comm_gemm_overlap/comm_gemm_overlap.cpp``) runs an overlapped GEMM as TP chunks; per
chunk its C++ loop calls ``nvte_cublas_gemm`` (cuBLASLt descriptors, the heuristic query, the
launch), launches a userbuffers send and a receive kernel on side streams, records an event and
makes two streams wait on it. This times the same sequence of CUDA work from torch:

- ``chunked``: one GEMM of ``M`` rows as ``T`` GEMMs of ``M / T`` rows, each followed by a copy
  kernel of the chunk's bytes on a send stream and one on a receive stream, an event recorded on
  the receive stream and waited on by the compute and send streams;
- ``whole``: the same GEMM in one call.

The host's work per extra chunk is (chunked - whole) / (T - 1), the GPU held busy by a long
``torch.cuda._sleep`` so that the host never waits for it (every call is issued ahead). torch
adds its Python and dispatcher work per call, which Transformer Engine's C++ loop does not pay:
an upper bound. FP8 GEMMs through ``torch._scaled_mm`` (cuBLASLt, as Transformer Engine's) where
the GPU has them, else bf16.

A second measurement: the host's work for ``torch.distributed.all_reduce`` of one fp32 value in a
one-rank NCCL group (an FP8 amax reduction's launch path, c10d's ``ProcessGroupNCCL``).

The first rule, fixed before the first run: ``UB_CHUNK_HOST_S`` is the median over the shapes
of the per-extra-chunk host seconds, FP8 where available, at T = 8, adopted as measured. Run
once on an H200 (``results/launch-host-h200.json``: 117 us) and not adopted: the same run times
a whole GEMM call at 28-40 us, so most of the mimic's chunk is torch's Python around the stream
switches, copies and events, which Transformer Engine's C++ loop does not pay (docs/plan.md,
userbuffer overlap). Hence ``gemm_calls``: the same GEMM as T calls of M / T rows against one
call, nothing else in the loop, whose per-extra-call host seconds keep torch's dispatch of a
GEMM (a few us) and drop the Python the C++ loop does not run. The second rule, fixed before its
run: ``UB_CHUNK_HOST_S`` is the median over the shapes of ``gemm_calls``' per-extra-call host
seconds, FP8 where available, at T = 8, adopted as measured (the sends, receives and events,
C++ calls of a few us each, left out). Run on an H100 (``results/launch-host-h100.json``): 19.3
us, ``UB_CHUNK_HOST_S``. Raw data; torch only, no memtune.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

# (M, N, K) of Llama 3 70B's userbuffer GEMMs at TP 8, 4,096 tokens: qkv and fc1 forward
# (gathered input), proj and fc2 data gradients
SHAPES = [(4096, 1280, 8192), (4096, 7168, 8192), (4096, 8192, 1024), (4096, 8192, 3584)]
CHUNKS = 8
CALLS = 40  # chunked GEMMs issued per timing (T chunks each), well under the launch queue's depth
REPEATS = 15


def host_seconds(torch: Any, issue: Any) -> float:
    """Median host seconds of ``issue()`` with the GPU held busy, so no call waits for it."""
    times = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        torch.cuda._sleep(400_000_000)  # about 0.2 s at H100 clocks: the queue never drains
        start = time.perf_counter()
        issue()
        times.append(time.perf_counter() - start)
        torch.cuda.synchronize()
    return statistics.median(times)


def gemm_call(torch: Any, fp8: bool, m: int, n: int, k: int) -> Any:
    """A function computing one (m, n, k) GEMM: ``_scaled_mm`` in e4m3 or a bf16 ``matmul``."""
    if fp8:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
        scale = torch.ones((), device="cuda")
        return lambda rows: torch._scaled_mm(a[:rows], b, scale, scale, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    return lambda rows: a[:rows] @ b


def chunk_host(torch: Any, fp8: bool, shape: tuple[int, int, int]) -> dict[str, float]:
    m, n, k = shape
    gemm = gemm_call(torch, fp8, m, n, k)
    rows = m // CHUNKS
    payload = torch.empty(rows * k, device="cuda", dtype=torch.uint8)
    sent, received = torch.empty_like(payload), torch.empty_like(payload)
    send, recv = torch.cuda.Stream(), torch.cuda.Stream()
    main = torch.cuda.current_stream()

    def chunked() -> None:
        for _ in range(CALLS):
            for _ in range(CHUNKS):
                gemm(rows)
                with torch.cuda.stream(send):
                    sent.copy_(payload)
                with torch.cuda.stream(recv):
                    received.copy_(payload)
                    done = torch.cuda.Event()
                    done.record(recv)
                send.wait_event(done)
                main.wait_event(done)

    def whole() -> None:
        for _ in range(CALLS):
            gemm(m)

    def gemm_calls() -> None:
        for _ in range(CALLS):
            for _ in range(CHUNKS):
                gemm(rows)

    for fn in (chunked, whole, gemm_calls):  # warm-up: cuBLASLt's heuristics, the caching allocator
        fn()
    torch.cuda.synchronize()
    chunked_s, whole_s = host_seconds(torch, chunked) / CALLS, host_seconds(torch, whole) / CALLS
    calls_s = host_seconds(torch, gemm_calls) / CALLS
    return {
        "chunked_s": chunked_s,
        "whole_s": whole_s,
        "gemm_calls_s": calls_s,
        "per_extra_chunk_s": (chunked_s - whole_s) / (CHUNKS - 1),
        "per_extra_gemm_call_s": (calls_s - whole_s) / (CHUNKS - 1),
    }


def allreduce_host(torch: Any) -> float:
    """Host seconds per ``all_reduce`` of one fp32 value in a one-rank NCCL group."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    value = torch.ones(1, device="cuda")
    for _ in range(20):
        dist.all_reduce(value)
    torch.cuda.synchronize()
    calls = 200

    def issue() -> None:
        for _ in range(calls):
            dist.all_reduce(value)

    seconds = host_seconds(torch, issue) / calls
    dist.destroy_process_group()
    return seconds


def main() -> int:
    import torch

    if len(sys.argv) != 2:
        sys.exit("usage: launch_host.py OUT.json")
    fp8 = torch.cuda.get_device_capability() >= (8, 9)
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "fp8": fp8,
        "chunks": CHUNKS,
        "shapes": {},
    }
    for shape in SHAPES:
        result["shapes"]["x".join(map(str, shape))] = chunk_host(torch, fp8, shape)
    per_chunk = [s["per_extra_chunk_s"] for s in result["shapes"].values()]
    result["ub_chunk_host_s"] = statistics.median(per_chunk)
    result["ub_gemm_call_host_s"] = statistics.median(
        s["per_extra_gemm_call_s"] for s in result["shapes"].values()
    )
    result["allreduce_host_s"] = allreduce_host(torch)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "shapes"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
