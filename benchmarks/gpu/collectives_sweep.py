"""Collectives on one multi-GPU host, timed as Megatron issues them, beside memtune's prediction.

Issue 40, run 1: all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over 2, 4 or 8
GPUs of one host, 4 KiB to 1 GiB, with NCCL's choice of algorithm and protocol recorded
(``NCCL_DEBUG=INFO`` with ``NCCL_DEBUG_SUBSYS=TUNING``: the log lines name them). Keep NVLink
multicast off (the device README: ``NCCL_NVLS_ENABLE=0``), which NCCL's NVLS algorithm needs.

    # on the GPU host (torch only; one process per GPU):
    NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING \\
        torchrun --nproc-per-node 8 benchmarks/gpu/collectives_sweep.py run OUT.json 2> nccl.log
    # here, with memtune installed: memtune's prediction for every measured call, side by side
    python benchmarks/gpu/collectives_sweep.py compare OUT.json --gpu H100-80GB

Each figure is the median of ``REPEATS`` timed calls after ``WARMUP`` untimed ones, CUDA events
around each call on rank 0, with a barrier before each; bytes are the message size as memtune's
``collective`` takes it (the full buffer of an all-gather's output, a reduce-scatter's input, an
all-reduce's buffer; an all-to-all's send buffer; one send of a send/recv pair).
"""

from __future__ import annotations

import json
import statistics
import sys

SIZES = [4 << 10 << (2 * i) for i in range(9)] + [1 << 30]  # 4 KiB, 16 KiB, ... 256 MiB, 1 GiB
WARMUP = 3
REPEATS = 10


def _timed(fn, torch) -> float:  # type: ignore[no-untyped-def]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.distributed.barrier()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000


def _calls(dist, full, part, rank: int, world: int) -> dict:  # type: ignore[no-untyped-def]
    """Each collective on these buffers, as a call of no arguments."""
    peer = rank ^ 1

    def pair() -> None:
        ops = [dist.P2POp(dist.isend, full, peer), dist.P2POp(dist.irecv, full.clone(), peer)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()

    calls = {
        "all-reduce": lambda: dist.all_reduce(full),
        "all-gather": lambda: dist.all_gather_into_tensor(full, part),
        "reduce-scatter": lambda: dist.reduce_scatter_tensor(part, full),
        "all-to-all": lambda: dist.all_to_all_single(full, full.clone()),
    }
    if world >= 2:
        calls["send/recv"] = pair
    return calls


def run(out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    rows = []
    for size in SIZES:
        n = size // 2  # bf16 elements
        full = torch.empty(n, dtype=torch.bfloat16, device="cuda")
        part = torch.empty(n // world, dtype=torch.bfloat16, device="cuda")
        for op, call in _calls(dist, full, part, rank, world).items():
            for _ in range(WARMUP):
                call()
            seconds = statistics.median(_timed(call, torch) for _ in range(REPEATS))
            rows.append({"op": op, "bytes": size, "ranks": world, "seconds": seconds})
    if rank == 0:
        doc = {
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "rows": rows,
        }
        with open(out, "w") as handle:
            json.dump(doc, handle, indent=1)
    dist.destroy_process_group()


def compare(path: str, gpu: str) -> None:
    from memtune.catalog.network import network_of
    from memtune.config.schema import ClusterConfig
    from memtune.perf.collectives import Group, Op, collective, send_recv

    with open(path) as handle:
        doc = json.load(handle)
    ops = {"all-reduce": Op.ALL_REDUCE, "all-gather": Op.ALL_GATHER, "reduce-scatter": Op.REDUCE_SCATTER}
    print(f"{'op':<15}{'ranks':>6}{'bytes':>12}{'measured s':>13}{'memtune s':>13}{'ratio':>8}")
    for row in doc["rows"]:
        network = network_of(ClusterConfig(num_gpus=row["ranks"], gpus_per_node=8, gpu=gpu))
        if row["op"] in ops:
            predicted = collective(ops[row["op"]], row["bytes"], Group(row["ranks"]), network, gpu).seconds
        elif row["op"] == "send/recv":
            predicted = send_recv(row["bytes"], False, network)
        else:
            continue  # all-to-all: memtune/perf/moe.py prices dispatch, not a bare all-to-all
        ratio = row["seconds"] / predicted
        print(
            f"{row['op']:<15}{row['ranks']:>6}{row['bytes']:>12}{row['seconds']:>13.6f}{predicted:>13.6f}{ratio:>8.2f}"
        )


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        run(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[sys.argv.index("--gpu") + 1] if "--gpu" in sys.argv else "H100-80GB")
    else:
        sys.exit(__doc__)
