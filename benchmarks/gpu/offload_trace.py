"""Where a fine-grained offload step loses its time: trace one ``aoffm-`` run (CUDA kernels and
copies with their streams) and split the compute stream's idle gaps by what ended just before
each (a copy on the device-to-host or host-to-device stream, or nothing: the host was late).

    # on the GPU machine, megatron-core on PYTHONPATH (three iterations, all traced)
    python3 benchmarks/gpu/offload_trace.py run aoffm-l8w-all PLANS.jsonl OUT_DIR
    # here, on the last iteration's forward and backward (between the last two optimizer steps)
    python3 benchmarks/gpu/offload_trace.py read OUT_DIR/aoffm-l8w-all.trace.json.gz

The traces behind docs/plan.md ("What fine-grained activation offload shows of its copies") were
taken on a lent H200 of ``aoffm-l8w-none``, ``aoffm-l8w-all`` and ``aoffm-l8w-all-one-queue``
(about 3 MB each compressed, not committed).
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import sys
from typing import Any

MAIN_STREAM = 7  # PyTorch's default stream as CUPTI numbers it
COPY_END_US = 25  # a gap ends "as a copy ends" within this many microseconds of its end


def run(run_id: str, plans: str, out: str) -> None:
    with open(plans, encoding="utf-8") as f:
        item = next(plan for plan in map(json.loads, f) if plan["id"] == run_id)
    os.environ.update(item["plan"]["env"])
    import torch

    from memtune.measure import runner

    activities = [torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        result = runner.measure(dict(item["plan"], iterations=3))
    path = os.path.join(out, run_id + ".trace.json")
    prof.export_chrome_trace(path)
    with open(path, "rb") as raw, gzip.open(path + ".gz", "wb") as packed:
        packed.write(raw.read())
    os.remove(path)
    print(run_id, [it["forward_backward_seconds"] for it in result["measured"]["iterations"]])


def read(path: str) -> dict[str, Any]:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = sorted((e for e in events if e.get("cat") == "gpu_user_annotation"), key=lambda e: e["ts"])
    start, stop = steps[-2]["ts"] + steps[-2]["dur"], steps[-1]["ts"]
    gpu = sorted(
        (
            e
            for e in events
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and start <= e["ts"] < stop
        ),
        key=lambda e: e["ts"],
    )
    by_stream: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for e in gpu:
        by_stream[e["args"]["stream"]].append(e)
    main = by_stream.pop(MAIN_STREAM)
    copy_ends = {stream: [e["ts"] + e["dur"] for e in es] for stream, es in by_stream.items()}
    gaps: collections.Counter[str] = collections.Counter()
    end = main[0]["ts"] + main[0]["dur"]
    for e in main[1:]:
        if e["ts"] > end:
            after = next(
                (
                    f"stream {s}"
                    for s, ends in copy_ends.items()
                    if any(-3 < e["ts"] - t < COPY_END_US for t in ends)
                ),
                "host",
            )
            gaps[after] += e["ts"] - end
        end = max(end, e["ts"] + e["dur"])
    return {
        "window_ms": round((stop - start) / 1e3, 2),
        "compute_stream_busy_ms": round(sum(e["dur"] for e in main) / 1e3, 2),
        "copy_streams_busy_ms": {
            f"stream {s}": round(sum(e["dur"] for e in es) / 1e3, 2) for s, es in by_stream.items()
        },
        "compute_stream_gaps_ms": {k: round(v / 1e3, 2) for k, v in gaps.items()},
    }


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(*sys.argv[2:5])
    else:
        print(json.dumps(read(sys.argv[2]), indent=1))
