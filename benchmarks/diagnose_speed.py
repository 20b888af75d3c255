"""How fast `memtune diagnose` reads big multi-rank logs, against `grep -E` over the same file.

Three synthetic logs of SIZE_MB each (default 1024) in a temporary directory:

- ``megatron``: 32 ranks with torchrun-style ``[rankN]:`` prefixes, Megatron iteration lines, and
  every 20 lines Megatron's own ``[Rank N] (after K iterations) memory (MB) | ...`` report (a
  triggered line that must not be the slow path), a few warnings, one fragmentation OOM at the end;
- ``rank-heavy``: the memory report from 200,000 distinct ranks, then the OOM;
- ``trigger-dense``: every line an allocator OOM message of a different rank.

For each, the scan's CPU time is measured (one core), ``diagnose --json`` is rendered (it must finish), and
``grep -E`` with the detector trigger words is timed (CPU) over the same file for comparison. The
speed goal is the ``megatron`` log within 3x of grep; the other two are bounded by the per-kind
finding caps and reported as they are.

Run:  python benchmarks/diagnose_speed.py [SIZE_MB] [KIND ...]

Measured (256 MiB each, CPU seconds of one core, two runs; before the search by line shape in
brackets): ``megatron`` 3.6-3.8 s/GiB, 2.3x grep -E (14-15 s/GiB, 9.2-9.4x); ``rank-heavy``
7.4 s/GiB (103-112 s/GiB); ``trigger-dense`` about 220 s/GiB, unchanged: every line is read in
full there.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

from memtune.diagnose import diagnose
from memtune.diagnose.detectors import TRIGGERS
from memtune.diagnose.report import to_json

OOM = (
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {d} has a total capacity "
    "of 139.80 GiB of which 3.12 MiB is free. Including non-PyTorch memory, this process has 139.79 GiB memory in use. "
    "Of the allocated memory 89.28 GiB is allocated by PyTorch, and 50.00 GiB is reserved by PyTorch but unallocated. "
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)\n"
)
ITERATION = (
    "[rank{r}]: [2026-11-29 12:{m:02d}:{s:02d}] iteration {i:>8}/ 1000000 | consumed samples: {c:>12} | "
    "elapsed time per iteration (ms): 1234.5 | learning rate: 1.000000E-04 | global batch size: 1024 | "
    "lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.987 | number of skipped iterations: 0 |\n"
)
RANK_MEMORY = (
    "[Rank {r}] (after {i} iterations) memory (MB) | allocated: 61234.5 | max allocated: 72345.6 | "
    "reserved: 80123.4 | max reserved: 80123.4\n"
)


def _block(kind: str, n: int = 20000) -> str:
    if kind == "megatron":
        lines = []
        for i in range(n):
            r = i % 32
            lines.append(ITERATION.format(r=r, m=(i // 60) % 60, s=i % 60, i=i, c=i * 1024))
            if i % 20 == 0:
                lines.append(RANK_MEMORY.format(r=r, i=i))
        lines.append("[rank3]: UserWarning: TORCH_NCCL_AVOID_RECORD_STREAMS is set, using a slower path\n")
        return "".join(lines)
    if kind == "rank-heavy":
        return "".join(RANK_MEMORY.format(r=r, i=10) for r in range(200_000))
    if kind == "trigger-dense":
        return "".join(OOM.format(r=r, d=r % 8) for r in range(n))
    raise SystemExit(f"unknown kind {kind!r}; known: megatron, rank-heavy, trigger-dense")


def write_log(path: str, size_bytes: int, kind: str) -> int:
    data = _block(kind).encode()
    written = 0
    with open(path, "wb") as fh:
        while written + len(data) < size_bytes:
            fh.write(data)
            written += len(data)
        tail = OOM.format(r=7, d=7).encode()
        fh.write(tail)
        written += len(tail)
    return written


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grep_seconds(path: str) -> float | None:
    """CPU seconds of ``grep -E`` with the trigger words, counting matching lines; the best of two
    runs (the file is then in the page cache for both tools). CPU time rather than wall time keeps
    the comparison fair on a loaded machine."""
    pattern = "|".join(re.sub(r"([.*+?()\[\]{}|^$\\])", r"\\\1", t.decode()) for t in TRIGGERS)
    best = None
    for _ in range(2):
        try:
            before = _children_cpu()
            done = subprocess.run(["grep", "-cE", pattern, path], capture_output=True, check=False)
            elapsed = _children_cpu() - before
        except FileNotFoundError:
            return None
        if done.returncode > 1:
            raise SystemExit(f"grep failed: {done.stderr.decode().strip()}")
        best = elapsed if best is None else min(best, elapsed)
    return best


def measure(kind: str, size_mb: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{kind}.log")
        size = write_log(path, size_mb << 20, kind)
        grep = grep_seconds(path)
        start = time.process_time()
        result = diagnose([path])
        scan_s = time.process_time() - start
        start = time.perf_counter()
        json_chars = len(json.dumps(to_json(result)))
        json_s = time.perf_counter() - start
    return {
        "kind": kind,
        "gib": size / (1 << 30),
        "scan_s": scan_s,
        "json_s": json_s,
        "json_chars": json_chars,
        "grep_s": grep,
        "label": result.verdict.label,
        "suppressed": sum(result.scan.suppressed.values()),
    }


def main() -> int:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    kinds = sys.argv[2:] or ["megatron", "rank-heavy", "trigger-dense"]
    ok = True
    for kind in kinds:
        m = measure(kind, size_mb)
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ratio = (
            f"{m['scan_s'] / m['grep_s']:.1f}x grep -E ({m['grep_s']:.2f} s)"
            if m["grep_s"]
            else "grep not found"
        )
        print(
            f"{kind:>13}: {m['gib']:.2f} GiB in {m['scan_s']:.1f} s ({m['gib'] * 1024 / m['scan_s']:.0f} MiB/s, "
            f"{m['scan_s'] / m['gib']:.1f} s/GiB), {ratio}; --json {m['json_s']:.2f} s, {m['json_chars']} chars; "
            f"findings summarised {m['suppressed']}; peak RSS so far {peak_rss:.0f} MiB; verdict {m['label']}"
        )
        if kind == "megatron":
            ok = (
                ok
                and m["label"] == "fragmentation"
                and (m["grep_s"] is None or m["scan_s"] <= 3 * m["grep_s"])
            )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
