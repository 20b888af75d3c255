"""Time Megatron-Core's Sinkhorn router on one GPU (``moe_router_load_balancing_type: sinkhorn``).

    python3 benchmarks/gpu/sinkhorn_router.py OUT.json   # megatron-core on PYTHONPATH

In training, ``TopKRouter.sinkhorn_load_balancing`` (megatron-core 0.19.2,
``transformer/moe/router.py``) runs ``moe_utils.sinkhorn`` on the fp32 logits of every MoE
layer's forward: a loop of row and column normalisations until the mean change of the column
scale is below 1e-4, and ``while error > tol`` reads that error on the host, so every
iteration waits for the GPU. How many iterations it takes depends on the logits; here they are
those of a freshly initialised router (weights normal with std 0.02, Megatron's
``init_method_std`` default) over layer-normed random hidden states, the state of the
Megatron-LM functional tests that use it (100 iterations from initialisation). Per shape
(tokens per router call, experts, hidden size): the iterations, and the wall time of one call
with the host's waits, the median of 20 after 3 warm-up calls.
"""

from __future__ import annotations

import json
import sys
import time

# (tokens per router call, experts, hidden): the sinkhorn cases of the Megatron-LM functional
# tests (benchmarks/published/layouts/megatron-lm-ci) and around them
SHAPES = [(1024, 4, 512), (2048, 4, 512), (2048, 8, 512), (4096, 8, 512), (8192, 8, 512), (4096, 16, 1024)]


def iterations(cost, tol: float = 0.0001) -> int:  # type: ignore[no-untyped-def]
    """The loop count of ``moe_utils.sinkhorn`` on ``cost`` (its loop, counted)."""
    import torch

    cost = torch.exp(cost)
    d0 = torch.ones(cost.size(0), device=cost.device, dtype=cost.dtype)
    d1 = torch.ones(cost.size(1), device=cost.device, dtype=cost.dtype)
    error, d1_old, count = 1e9, d1, 0
    while error > tol:
        d0 = (1 / d0.size(0)) * 1 / (torch.sum(d1 * cost, 1) + 1e-8)
        d1 = (1 / d1.size(0)) * 1 / (torch.sum(d0.unsqueeze(1) * cost, 0) + 1e-8)
        error = torch.mean(torch.abs(d1_old - d1))
        d1_old = d1
        count += 1
    return count


def main() -> int:
    import torch
    from megatron.core.transformer.moe.moe_utils import sinkhorn

    torch.manual_seed(1234)
    rows = []
    for tokens, experts, hidden in SHAPES:
        hidden_states = torch.nn.functional.layer_norm(torch.randn(tokens, hidden, device="cuda"), (hidden,))
        weight = torch.randn(experts, hidden, device="cuda") * 0.02
        logits = (hidden_states @ weight.t()).float()
        for _ in range(3):
            sinkhorn(logits)
        times = []
        for _ in range(20):
            torch.cuda.synchronize()
            tick = time.perf_counter()
            sinkhorn(logits)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - tick)
        rows.append(
            {
                "tokens": tokens,
                "experts": experts,
                "hidden": hidden,
                "iterations": iterations(logits),
                "call_ms": round(sorted(times)[len(times) // 2] * 1e3, 4),
            }
        )
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "sinkhorn": rows}
    with open(sys.argv[1], "w") as out:
        json.dump(result, out, indent=1)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
