"""The host link of one GPU, measured: pinned host <-> device copies as the offloads make them.

Megatron-Core's activation offloads and the CPU-offloading optimizer copy between the device and
pinned host tensors on a side stream. This times such copies of 64 MiB to 2 GiB, one direction at
a time and both at once (the link is full duplex), and writes the medians as JSON:

    python3 benchmarks/gpu/host_link.py OUT.json

memtune's host-link figures (``host_link_gb_per_s`` in memtune/catalog/data/networks.yaml) take
the measured share of the PCIe line rate from here.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

MiB = 1 << 20
SIZES_MIB = (64, 256, 1024, 2048)
REPEATS = 5


def _timed(copies: list[tuple[torch.Tensor, torch.Tensor, torch.cuda.Stream]]) -> float:
    """Seconds for every (destination, source, stream) copy, issued together."""
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for dst, src, stream in copies:
        stream.wait_event(start)
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
    for _, _, stream in copies:
        torch.cuda.current_stream().wait_stream(stream)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000


def measure() -> dict:
    to_device, to_host = torch.cuda.Stream(), torch.cuda.Stream()
    rows = []
    for size in SIZES_MIB:
        n = size * MiB
        host_a = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        host_b = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dev_a = torch.empty(n, dtype=torch.uint8, device="cuda")
        dev_b = torch.empty(n, dtype=torch.uint8, device="cuda")
        cases = {
            "h2d": [(dev_a, host_a, to_device)],
            "d2h": [(host_b, dev_b, to_host)],
            "both": [(dev_a, host_a, to_device), (host_b, dev_b, to_host)],
        }
        row = {"bytes": n}
        for name, copies in cases.items():
            _timed(copies)  # warm-up
            seconds = statistics.median(_timed(copies) for _ in range(REPEATS))
            row[f"{name}_gb_per_s"] = round(n / seconds / 1e9, 2)  # per direction
        rows.append(row)
        del host_a, host_b, dev_a, dev_b
    return {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "pinned_copies": rows,
    }


if __name__ == "__main__":
    result = measure()
    text = json.dumps(result, indent=2)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as handle:
            handle.write(text + "\n")
