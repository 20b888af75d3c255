"""Does ``CUDA_DEVICE_MAX_CONNECTIONS`` decide whether activation offload's copies hide behind
compute? Megatron-Core's fine-grained offload (``fine_grained_activation_offload.py``) copies
each group's tensors to pinned host memory on a side stream after ``d2h_stream.wait_stream``
of the compute stream, and in the backward reloads the next group on another stream while the
compute stream works, waiting for that reload's event before the group's backward. Megatron
jobs often set ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (one hardware work queue for every stream).

    python3 benchmarks/gpu/offload_connections.py OUT.json

Times, in a fresh process per setting (the variable is read when CUDA starts), the same
pattern with the variable at 1 and unset: ``groups`` rounds of compute (bf16 GEMMs) with one
64 MiB copy each, forward (device to host) and backward (host to device, one group ahead),
against the compute alone and the copies alone. Needs torch and a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

GROUPS = 16
COPY_MIB = 64
SIDE = 8192  # the GEMMs' side: about 1.1 TFLOP each
GEMMS_PER_GROUP = (1, 2, 4)  # compute per group against one copy: short, even, long
REPEATS = 5


def _probe() -> dict[str, object]:
    import torch

    torch.cuda.init()
    main = torch.cuda.current_stream()
    d2h, h2d = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.randn(SIDE, SIDE, device="cuda", dtype=torch.bfloat16)
    elements = COPY_MIB * 2**20 // 2
    device = [torch.randn(elements, device="cuda", dtype=torch.bfloat16) for _ in range(GROUPS)]
    host = [torch.empty(elements, dtype=torch.bfloat16, pin_memory=True) for _ in range(GROUPS)]

    def compute(gemms: int) -> None:
        for _ in range(gemms):
            torch.mm(a, a)

    def forward(gemms: int, copies: bool, work: bool) -> None:
        for g in range(GROUPS):
            if work:
                compute(gemms)
            if copies:
                d2h.wait_stream(main)
                with torch.cuda.stream(d2h):
                    host[g].copy_(device[g], non_blocking=True)

    def backward(gemms: int, copies: bool, work: bool) -> None:
        events = []
        for g in range(GROUPS):
            if copies:
                h2d.wait_stream(main)
                with torch.cuda.stream(h2d):
                    device[g].copy_(host[g], non_blocking=True)
                    event = torch.cuda.Event()
                    event.record(h2d)
                events.append(event)
                if g > 0:
                    main.wait_event(events[g - 1])  # the group reloaded one ahead
            if work:
                compute(gemms)

    def timed(fn, *args: object) -> float:
        times = []
        for _ in range(REPEATS):
            torch.cuda.synchronize()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            torch.cuda.synchronize()
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        return sorted(times)[len(times) // 2]

    rows = []
    for gemms in GEMMS_PER_GROUP:
        for name, fn in (("forward", forward), ("backward", backward)):
            timed(fn, gemms, True, True)  # warm-up
            rows.append(
                {
                    "pass": name,
                    "gemms_per_group": gemms,
                    "compute_s": timed(fn, gemms, False, True),
                    "copies_s": timed(fn, gemms, True, False),
                    "both_s": timed(fn, gemms, True, True),
                }
            )
    return {
        "device": torch.cuda.get_device_name(),
        "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
        "groups": GROUPS,
        "copy_mib": COPY_MIB,
        "rows": rows,
    }


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--probe":
        print(json.dumps(_probe()))
        return 0
    results = []
    for value in ("1", None):
        env = dict(os.environ)
        env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        if value is not None:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = value
        out = subprocess.run(
            [sys.executable, __file__, "--probe"], env=env, capture_output=True, text=True, check=True
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    with open(argv[0], "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    for r in results:
        print("CUDA_DEVICE_MAX_CONNECTIONS =", r["CUDA_DEVICE_MAX_CONNECTIONS"])
        for row in r["rows"]:
            print(
                f"  {row['pass']:8} gemms/group {row['gemms_per_group']}: compute {row['compute_s'] * 1e3:7.2f} ms"
                f"  copies {row['copies_s'] * 1e3:7.2f} ms  both {row['both_s'] * 1e3:7.2f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
