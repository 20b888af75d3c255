"""The host's work per collective call under PyTorch's fake process group, as a single-rank run
makes it.

    PYTHONPATH=.out/mcore019 python3 benchmarks/gpu/fake_collective_host.py OUT.json [--passes 3]

memtune's single-rank runs (``memtune measure``, ``benchmarks/gpu/compute_relations.py``) build a
rank under ``init_process_group("fake", ...)``: no collective moves data, but each call still
costs the host its Python, c10d dispatch and the output tensor it allocates. The step model's
single-rank price (``perf/step.py _alone``) drops the collectives whole, launches included. This
times, per call, on the host (``time.perf_counter`` over ``CALLS`` calls after ``WARMUP``; the
fake backend completes every call at once, so no GPU wait is in it):

- ``raw``: ``torch.distributed``'s ``all_gather_into_tensor``, ``reduce_scatter_tensor`` and
  ``all_reduce`` on bf16 tensors of one layer's activation (4,096 tokens x 4,096 wide, TP 8);
- ``mappings``: Megatron-Core's sequence-parallel mappings as a layer calls them
  (``gather_from_sequence_parallel_region``, ``reduce_scatter_to_sequence_parallel_region``,
  and without SP ``reduce_from_tensor_model_parallel_region``), each call's forward and, apart,
  its backward (through a one-op graph: the mapping's output summed; the sum's own forward and
  backward timed alone and taken off);
- ``launch``: one small CUDA kernel's launch (``torch.add`` on 1,024 elements), for scale.

Rule, fixed before the first run: ``FAKE_PG_COLLECTIVE_HOST_S`` is the median over the passes of
the mean of the gather's and the reduce-scatter's forward+backward seconds per call (the
``mappings`` section), divided by two (a call is one side: the forward's collective or the
backward's); it prices a single-rank run's TP collective calls on the host, nothing else.
Torch and megatron-core only; nothing here changes a price by itself.

Found (a lent H100, GPU-9af4f2d7, ``results/fake-collective-host-h100.json``): 70.7 us a call
(passes 53.5, 70.7, 74.8). Priced into a rank run alone (4 calls a pass with SP, 2 without) and
``MEASURE_RUNNER`` refitted alone by ``benchmarks/fit_step_constants.py``'s objective (its layer
floor 1.6 -> 1.4 ms), the tune runs fit slightly worse (objective 0.538 against 0.529; the shared
half's median 3.2% against 2.2%), so the constant was not taken (docs/plan.md).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

WORLD = 8
TOKENS, HIDDEN = 4096, 4096
WARMUP, CALLS = 200, 2000


def per_call(fn: Any, calls: int = CALLS) -> float:
    for _ in range(WARMUP):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def raw_calls(torch: Any, dist: Any) -> dict[str, float]:
    shard = torch.randn(TOKENS // WORLD, HIDDEN, device="cuda", dtype=torch.bfloat16)
    full = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16)

    def gather() -> None:
        out = torch.empty(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16)
        dist.all_gather_into_tensor(out, shard)

    def scatter() -> None:
        out = torch.empty(TOKENS // WORLD, HIDDEN, device="cuda", dtype=torch.bfloat16)
        dist.reduce_scatter_tensor(out, full)

    return {
        "all_gather_into_tensor": per_call(gather),
        "reduce_scatter_tensor": per_call(scatter),
        "all_reduce": per_call(lambda: dist.all_reduce(full)),
    }


def mapping_calls(torch: Any) -> dict[str, dict[str, float]]:
    from megatron.core.tensor_parallel import mappings

    shard = torch.randn(TOKENS // WORLD, 1, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    full = torch.randn(TOKENS, 1, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    cases = {
        "gather_from_sequence_parallel_region": (mappings.gather_from_sequence_parallel_region, shard),
        "reduce_scatter_to_sequence_parallel_region": (
            mappings.reduce_scatter_to_sequence_parallel_region,
            full,
        ),
        "reduce_from_tensor_model_parallel_region": (mappings.reduce_from_tensor_model_parallel_region, full),
    }
    baseline_fwd = per_call(full.sum)
    baseline_both = per_call(lambda: full.sum().backward())
    found = {}
    for name, (fn, x) in cases.items():
        forward = per_call(lambda fn=fn, x=x: fn(x))
        both = per_call(lambda fn=fn, x=x: fn(x).sum().backward())
        found[name] = {
            "forward_s": forward,
            "backward_s": both - forward - (baseline_both - baseline_fwd),
        }
    return found


def one_pass(torch: Any, dist: Any) -> dict[str, Any]:
    small = torch.randn(1024, device="cuda")
    launch = per_call(lambda: torch.add(small, 1.0))
    torch.cuda.synchronize()
    return {"launch_s": launch, "raw": raw_calls(torch, dist), "mappings": mapping_calls(torch)}


def main() -> int:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from torch.testing._internal.distributed.fake_pg import FakeStore

    out = sys.argv[1]
    passes = int(sys.argv[sys.argv.index("--passes") + 1]) if "--passes" in sys.argv else 3
    torch.cuda.set_device(0)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=WORLD, create_gloo_process_groups=False
    )
    runs = [one_pass(torch, dist) for _ in range(passes)]
    per_side = [
        statistics.mean(
            run["mappings"][name]["forward_s"] + run["mappings"][name]["backward_s"]
            for name in ("gather_from_sequence_parallel_region", "reduce_scatter_to_sequence_parallel_region")
        )
        / 2
        for run in runs
    ]
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "passes": runs,
        "fake_pg_collective_host_s": statistics.median(per_side),
    }
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps({"fake_pg_collective_host_s": result["fake_pg_collective_host_s"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
