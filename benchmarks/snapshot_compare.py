"""What comparing two memory snapshots costs, against reading one file once.

Writes a synthetic snapshot of about SIZE_MB (default 1024) shaped like a Megatron training
step's: 48 layers' forward allocations, their backward, the optimizer step, each event with a
distinct list of frame dicts (as ``torch.cuda.memory._dump_snapshot`` writes them), half of the
blocks still live in the segments. Then, each in a fresh process, so peak RSS is that task's
own:

- ``read``: ``read_snapshot`` of the file twice (the safe unpickler), the floor any comparison
  of two files pays, after importing what the command imports;
- ``compare``: ``memtune diff --snapshots FILE FILE --json`` (both files read and profiled).

Prints CPU seconds and peak RSS of each, and their ratio.

Run:  python benchmarks/snapshot_compare.py [SIZE_MB]
"""

from __future__ import annotations

import os
import pickle
import resource
import subprocess
import sys
import tempfile

FRAMES = [
    ("/opt/megatron/core/transformer/attention.py", 88, "forward"),
    ("/opt/megatron/core/transformer/mlp.py", 120, "forward"),
    ("/opt/megatron/core/transformer/moe/experts.py", 230, "forward"),
    ("/opt/megatron/core/tensor_parallel/layers.py", 600, "forward"),
]
STEP = [
    ("/opt/megatron/core/pipeline_parallel/schedules.py", 400, "forward_step"),
    ("/opt/megatron/core/pipeline_parallel/schedules.py", 500, "forward_backward_no_pipelining"),
    ("/opt/megatron/training/training.py", 800, "train_step"),
    ("/opt/megatron/training/training.py", 1500, "train"),
    ("pretrain_gpt.py", 300, "<module>"),
]
BACKWARD = [("/usr/lib/python3/site-packages/torch/autograd/__init__.py", 340, "backward")]


def _frames(top: list[tuple[str, int, str]]) -> list[dict[str, object]]:
    return [{"filename": f, "line": line, "name": n} for f, line, n in top + STEP]


def synthetic(size_mb: int) -> dict[str, object]:
    sample = len(pickle.dumps(_events(1000), protocol=4)) / 1000  # pickled bytes per event
    return _events(int(size_mb * (1 << 20) / sample))


def _events(count: int) -> dict[str, object]:
    events, blocks = [], []
    address, t = 1 << 40, 0
    for i in range(count):
        address += 1 << 21
        t += 3
        top = [FRAMES[i % len(FRAMES)]] if i % 3 else BACKWARD
        event = {"action": "alloc", "addr": address, "size": 1 << 21, "stream": 0, "time_us": t,
                 "frames": _frames(top)}  # fmt: skip
        events.append(event)
        if i % 2:
            events.append({**event, "action": "free_completed", "time_us": t + 1, "frames": []})
        else:
            blocks.append({"address": address, "size": 1 << 21, "state": "active_allocated",
                           "frames": _frames(top)})  # fmt: skip
    segment = {
        "device": 0,
        "address": 1 << 40,
        "total_size": address,
        "segment_pool_id": (0, 0),
        "blocks": blocks,
    }
    return {"segments": [segment], "device_traces": [events], "allocator_settings": {}}


def _measure(code: str) -> tuple[float, float]:
    """CPU seconds and peak RSS (GiB) of a fresh Python process running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return cpu, after.ru_maxrss / (1 << 20)  # ru_maxrss is in KiB on Linux


def main() -> int:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "snapshot.pickle")
        with open(path, "wb") as fh:
            pickle.dump(synthetic(size_mb), fh, protocol=4)
        size = os.path.getsize(path) / (1 << 20)
        read_cpu, read_rss = _measure(
            "from memtune.cli import main; from memtune.diagnose.snapshot import read_snapshot; "
            f"read_snapshot({path!r}); read_snapshot({path!r})"
        )
        cmp_cpu, cmp_rss = _measure(
            f"from memtune.cli import main; main(['diff', '--snapshots', {path!r}, {path!r}, '--json'])"
        )
    print(f"snapshot {size:.0f} MiB")
    print(f"read twice: {read_cpu:6.1f} CPU s  peak RSS {read_rss:5.2f} GiB")
    print(f"compare:    {cmp_cpu:6.1f} CPU s  peak RSS {cmp_rss:5.2f} GiB")
    print(f"ratio: {cmp_cpu / read_cpu:.2f}x CPU, {cmp_rss / read_rss:.2f}x RSS")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
