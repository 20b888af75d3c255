"""One rank of the two-process Gloo test (a module of its own so spawned children import it)."""

from __future__ import annotations

from memtune.runtime import MemoryMonitor
from memtune.units import GiB
from tests.runtime.runtime_fakes import FixedDevice, SeriesStats, step_values


def monitored_rank(rank: int, init_file: str, out_dir: str, config: str | None) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        # Rank r peaks at (step + 4 r) GiB: rank 1 is the most loaded, 4 GiB above rank 0.
        steps = [step_values((s + 4 * rank) * GiB, GiB, (s + 4 * rank + 1) * GiB) for s in range(1, 7)]
        monitor = MemoryMonitor(
            out_dir, gather_every=3, config=config, stats=SeriesStats(steps), device=FixedDevice(None, None)
        )
        with monitor:
            for _ in steps:
                monitor.step()
        if rank == 0:
            assert [s["step"] for s in monitor.summaries] == [3, 6]
    finally:
        dist.destroy_process_group()
