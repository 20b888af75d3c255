"""Produce real CUDA out-of-memory messages on a GPU machine, for `memtune diagnose` fixtures.

Run:  python3 benchmarks/gpu/oom_fixtures.py OUTDIR
Each scenario runs in its own process (the allocator settings are read once, at CUDA start)
and writes OUTDIR/<scenario>.log holding the exception text exactly as Python prints it,
and, for the fragmentation case, OUTDIR/fragmentation-snapshot.pickle.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback

GiB = 1 << 30


def capacity() -> None:
    import torch

    blocks = []
    while True:
        blocks.append(torch.empty(4 * GiB, dtype=torch.uint8, device="cuda"))


def fragmentation(record: str | None = None) -> None:
    import torch

    if record:
        torch.cuda.memory._record_memory_history(max_entries=20000)
    free, _ = torch.cuda.mem_get_info()
    # Carve one large cached segment into 1 GiB tensors, fill the rest of the card, then free
    # every other tensor: half the segment is free but in 1 GiB holes, so a 2 GiB request
    # fails although tens of GiB are "reserved but unallocated". With expandable segments the
    # allocator remaps the holes and the same program only runs into capacity later.
    count = int(free // GiB) - 4
    segment = torch.empty(count * GiB, dtype=torch.uint8, device="cuda")
    del segment
    blocks = [torch.empty(GiB, dtype=torch.uint8, device="cuda") for _ in range(count)]
    filler = []
    try:
        while True:
            filler.append(torch.empty(GiB // 4, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        pass
    del blocks[::2]
    try:
        while True:
            filler.append(torch.empty(2 * GiB, dtype=torch.uint8, device="cuda"))
    finally:
        if record:
            torch.cuda.memory._dump_snapshot(record)


SCENARIOS = {
    "capacity": ({}, capacity),
    "fragmentation": ({}, fragmentation),
    "fragmentation-expandable": ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, fragmentation),
    "capacity-cudamallocasync": ({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, capacity),
}


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--scenario":
        name = sys.argv[2]
        env, fn = SCENARIOS[name]
        try:
            if name == "fragmentation":
                fn(os.environ["MEMTUNE_SNAPSHOT"])
            else:
                fn()
        except Exception:
            traceback.print_exc()
            return 1
        return 0
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for name, (env, _) in SCENARIOS.items():
        run_env = dict(
            os.environ, **env, MEMTUNE_SNAPSHOT=os.path.join(outdir, "fragmentation-snapshot.pickle")
        )
        proc = subprocess.run(
            [sys.executable, __file__, "--scenario", name],
            check=False,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        with open(os.path.join(outdir, f"{name}.log"), "w") as fh:
            fh.write(proc.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
