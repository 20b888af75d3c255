"""The runtime monitor's overhead on a real Megatron-Core training loop, and a real OOM captured.

Runs on the GPU machine (torch with CUDA, megatron-core, pydantic; memtune importable):

    python3 benchmarks/gpu/runtime_overhead.py --out DIR            # overhead + OOM capture
    python3 -m memtune run --out DIR/run -- python3 benchmarks/gpu/runtime_overhead.py --oom-only

The model is Megatron-Core's GPTModel built by memtune measure's runner (local layer spec,
SDPA attention) from ``runtime_overhead.yaml``, trained with Megatron's forward-backward
schedule and optimizer in one process over a real NCCL group of world size 1. Step time is
taken with the GPU synchronised at each step's end, in three blocks: without the monitor, with
it (gathering every ``--gather-every`` steps), and without it again; the overhead is the
median with the monitor against the median of both blocks without it. Then, under
``capture_oom``, blocks are allocated until the allocator fails; the snapshot written is read
back with memtune diagnose. DIR gets ``results.json``, the monitor's JSONL and the snapshot.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CONFIG = Path(__file__).with_name("runtime_overhead.yaml")
OOM_BLOCK_GIB = 8
SNAPSHOT_ENTRIES = 20_000


def allocate_until_oom() -> None:
    import torch

    blocks = []
    while True:
        blocks.append(torch.empty(OOM_BLOCK_GIB << 30, dtype=torch.uint8, device="cuda"))


def build(plan: dict):
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.module import Float16Module

    from memtune.measure import runner

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29531", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(**plan["parallel_state"], create_gloo_process_groups=False)
    model_parallel_cuda_manual_seed(1234)
    config = runner._transformer_config(plan)
    chunks = runner._build_chunks(plan, config)
    if config.bf16 or config.fp16:
        chunks = [Float16Module(config, chunk) for chunk in chunks]
    ddp_config = DistributedDataParallelConfig(**plan["ddp"])
    model = [DistributedDataParallel(config=config, ddp_config=ddp_config, module=chunk) for chunk in chunks]
    opt_kwargs = dict(plan["optimizer"])
    opt_kwargs["params_dtype"] = getattr(torch, opt_kwargs["params_dtype"])
    optimizer = get_megatron_optimizer(OptimizerConfig(**opt_kwargs), model, use_gloo_process_groups=False)
    runner._wire_grad_sync(config, model, plan["ddp"], optimizer)
    return model, optimizer


def make_train_step(plan: dict, model, optimizer):
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from memtune.measure import runner

    schedule = plan["schedule"]
    batches = runner._RandomBatches(
        plan["model"]["vocab_size"], schedule["micro_batch_size"], schedule["seq_length"]
    )
    forward_backward = get_forward_backward_func()

    def train_step() -> None:
        model[0].zero_grad_buffer()
        optimizer.zero_grad()
        forward_backward(
            forward_step_func=runner._forward_step,
            data_iterator=batches,
            model=model[0],
            num_microbatches=schedule["num_microbatches"],
            seq_length=schedule["seq_length"],
            micro_batch_size=schedule["micro_batch_size"],
            decoder_seq_length=schedule["seq_length"],
            forward_only=False,
        )
        optimizer.step()

    return train_step


def timed_block(train_step, steps: int, monitor=None) -> tuple[list[float], list[float]]:
    """Step times (GPU synchronised at each end) and, with a monitor, the time in monitor.step()."""
    import torch

    step_times, monitor_times = [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        train_step()
        torch.cuda.synchronize()
        if monitor is not None:
            tick = time.perf_counter()
            monitor.step()
            monitor_times.append(time.perf_counter() - tick)
        step_times.append(time.perf_counter() - start)
    return step_times, monitor_times


def overhead(args) -> dict:
    from memtune.check import gate
    from memtune.config import load_job
    from memtune.measure.plan import plan_measurement
    from memtune.runtime import MemoryMonitor, capture_oom, check_allocator, configure_allocator

    setup = configure_allocator(expandable_segments=True)  # before torch touches CUDA
    job = load_job(str(CONFIG), []).job
    plan = plan_measurement(gate(job), rank=0).to_json()  # its iteration count is unused here
    model, optimizer = build(plan)
    train_step = make_train_step(plan, model, optimizer)
    allocator = check_allocator()

    timed_block(train_step, args.warmup)
    off_before, _ = timed_block(train_step, args.steps)
    monitor = MemoryMonitor(args.out / "monitor", config=CONFIG, gather_every=args.gather_every)
    with monitor:
        on, in_monitor = timed_block(train_step, args.steps, monitor)
    off_after, _ = timed_block(train_step, args.steps)

    gather_steps = [t for i, t in enumerate(in_monitor, 1) if i % args.gather_every == 0]
    plain_steps = [t for i, t in enumerate(in_monitor, 1) if i % args.gather_every != 0]
    off = off_before + off_after
    median_off, median_on = statistics.median(off), statistics.median(on)
    records = [
        json.loads(line)
        for line in (args.out / "monitor" / "memtune-monitor-rank0.jsonl").read_text().splitlines()
    ]
    steps = [r for r in records if r["kind"] == "step"]
    result = {
        "config": str(CONFIG.name),
        "allocator_setup": setup.value,
        "allocator_in_effect": allocator.in_effect,
        "allocator_problems": allocator.problems,
        "steps_per_block": args.steps,
        "gather_every": args.gather_every,
        "median_step_s_without": median_off,
        "median_step_s_without_before": statistics.median(off_before),
        "median_step_s_without_after": statistics.median(off_after),
        "median_step_s_with": median_on,
        "overhead_fraction_of_medians": (median_on - median_off) / median_off,
        "monitor_step_s_median": statistics.median(in_monitor),
        "monitor_step_s_median_without_gather": statistics.median(plain_steps),
        "monitor_step_s_median_gather_steps": statistics.median(gather_steps),
        "monitor_step_s_max": max(in_monitor),
        "monitor_share_of_step": sum(in_monitor) / sum(on),
        "measured_peak_allocated_bytes": max(s["peak_allocated_bytes"] for s in steps),
        "measured_peak_reserved_bytes": max(s["peak_reserved_bytes"] for s in steps),
        "device_used_bytes": max(s["device_used_bytes"] or 0 for s in steps),
        "estimate_bytes": steps[-1]["estimate_bytes"],
    }
    result["oom"] = capture(args.out / "oom", capture_oom)
    return result


def capture(directory: Path, capture_oom) -> dict:
    import torch

    from memtune.diagnose import diagnose_text

    message = None
    try:
        with capture_oom(directory, max_entries=SNAPSHOT_ENTRIES) as hook:
            allocate_until_oom()
    except torch.OutOfMemoryError as exc:
        message = str(exc)
    written = hook.written
    found = diagnose_text(f"torch.OutOfMemoryError: {message}", snapshot=str(written)) if written else None
    return {
        "propagated": message is not None,
        "message": message,
        "snapshot": str(written) if written else None,
        "snapshot_bytes": written.stat().st_size if written else None,
        "diagnosis": found.verdict.label if found else None,
        "reasons": found.verdict.reasons if found else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runtime-overhead"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--gather-every", type=int, default=10)
    parser.add_argument(
        "--oom-only", action="store_true", help="allocate until OOM under capture_oom and fail"
    )
    args = parser.parse_args()
    if args.oom_only:
        from memtune.runtime import capture_oom

        with capture_oom(max_entries=SNAPSHOT_ENTRIES):
            allocate_until_oom()
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    result = overhead(args)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
