"""How fast `memtune diagnose` reads a big multi-rank log.

Generates a synthetic ~1 GB log in a temporary directory (32 ranks with torchrun-style
`[rankN]:` prefixes, Megatron-style iteration lines, a few warnings, and one fragmentation OOM
near the end), times the scan on one core, and prints the figure. The bar is 30 s per GB.

Run:  python benchmarks/diagnose_speed.py [SIZE_MB]
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time

from memtune.diagnose import diagnose

OOM = (
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {d} has a total capacity "
    "of 139.80 GiB of which 3.12 MiB is free. Including non-PyTorch memory, this process has 139.79 GiB memory in use. "
    "Of the allocated memory 89.28 GiB is allocated by PyTorch, and 50.00 GiB is reserved by PyTorch but unallocated. "
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)\n"
)


def write_log(path: str, size_bytes: int, ranks: int = 32) -> int:
    line = (
        "[rank{r}]: [2026-11-29 12:{m:02d}:{s:02d}] iteration {i:>8}/ 1000000 | consumed samples: {c:>12} | "
        "elapsed time per iteration (ms): 1234.5 | learning rate: 1.000000E-04 | global batch size: 1024 | "
        "lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.987 | number of skipped iterations: 0 |\n"
    )
    block = "".join(
        line.format(r=i % ranks, m=(i // 60) % 60, s=i % 60, i=i, c=i * 1024) for i in range(20000)
    )
    block += "[rank3]: UserWarning: TORCH_NCCL_AVOID_RECORD_STREAMS is set, using a slower path\n"
    data = block.encode()
    written = 0
    with open(path, "wb") as fh:
        while written + len(data) < size_bytes:
            fh.write(data)
            written += len(data)
        tail = OOM.format(r=7, d=7).encode()
        fh.write(tail)
        written += len(tail)
    return written


def main() -> int:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "job.log")
        size = write_log(path, size_mb << 20)
        start = time.perf_counter()
        result = diagnose([path])
        elapsed = time.perf_counter() - start
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(
        f"scanned {size / (1 << 30):.2f} GiB in {elapsed:.1f} s "
        f"({size / (1 << 20) / elapsed:.0f} MiB/s) on one core; peak RSS {peak_rss:.0f} MiB; "
        f"verdict: {result.verdict.label}, failed ranks {result.verdict.failed_ranks}"
    )
    return 0 if result.verdict.label == "fragmentation" else 1


if __name__ == "__main__":
    raise SystemExit(main())
