"""The host's work a MoE layer adds to a dense one in Megatron-Core, by token dispatcher and
local expert count.

    # on the GPU machine, megatron-core on PYTHONPATH
    python3 benchmarks/gpu/moe_host.py OUT.json

A MoE layer's forward runs the router (gating GEMM, top-k, softmax, the load-balancing loss),
the token dispatcher's bookkeeping (the all-gather dispatcher's mask and ``.cpu()`` of the
tokens per expert; the all-to-all dispatcher's split sizes, their copy to the host and its
sort of chunks), the permutation and its inverse, and the experts; Megatron-Core's local
spec runs them as ``SequentialMLP``, one module per local expert. The step model prices a MoE
layer's host work as a dense layer's plus fitted constants (``MOE_DISPATCHER_HOST_FWD_S`` where
tokens are exchanged, ``SEQUENTIAL_EXPERT_FWD_S`` per sequential expert). This times it: stacks of
8 Megatron-Core 0.19+ local-spec layers at tiny shapes (hidden 256, sequence 128, the GPU waits
for the host), one process under the fake process group at world size 1 (EP 1, TP 1: the
dispatchers' Python without exchanges), dense against MoE with 4 and 16 experts (top-2,
auxiliary loss 1e-2), all without linear biases (as MoE jobs run; Megatron-Core 0.20's
biased local experts add their bias in place on a view and fail under autograd), per dispatcher (``allgather``, ``alltoall``); each layer's forward and
backward wall time, the median of ``REPEATS`` timed passes (``graph_replay_host._per_layer``).

The rule, fixed before any run: per dispatcher, the per-expert slope is (E16 - E4) / 12 and the
MoE layer's own extra host work is (E4 - dense) - 4 x slope, forward and backward apart, from
one run. They are raw data here; at the next model freeze the slope replaces
``SEQUENTIAL_EXPERT_FWD_S`` and ``SEQUENTIAL_EXPERT_BWD_S`` (the mean of the two dispatchers)
and the extra becomes the host work every MoE layer adds at EP 1, per dispatcher, with nothing
fitted on these numbers; ``MOE_DISPATCHER_HOST_FWD_S`` is then refitted by its own rule as what
the exchanges add. Torch and megatron-core only, no memtune.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from graph_replay_host import HEADS, HIDDEN, LAYERS, SEQ, _per_layer, mcore_layers, write_results

EXPERTS = (4, 16)
DISPATCHERS = ("allgather", "alltoall")


def _layers(torch: Any, experts: int | None, dispatcher: str) -> list[Any]:
    """``LAYERS`` Megatron-Core local-spec layers, MoE with ``experts`` experts, else dense."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if not experts:
        return mcore_layers(torch, None, add_bias_linear=False)
    spec = get_gpt_layer_local_spec(num_experts=experts)
    return mcore_layers(
        torch,
        spec,
        num_moe_experts=experts,
        moe_router_topk=2,
        moe_ffn_hidden_size=HIDDEN,
        moe_token_dispatcher_type=dispatcher,
        moe_aux_loss_coeff=1e-2,
        add_bias_linear=False,
    )


def main(out: str) -> int:
    import megatron.core
    import torch

    torch.cuda.set_device(0)

    def make_input() -> Any:
        return torch.randn(SEQ, 1, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "megatron_core": megatron.core.__version__,
        "shape": {"layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "seq": SEQ, "top_k": 2},
        "dense": _per_layer(_layers(torch, None, "allgather"), make_input),
    }
    for dispatcher in DISPATCHERS:
        timed = {e: _per_layer(_layers(torch, e, dispatcher), make_input) for e in EXPERTS}
        low, high = EXPERTS
        entry: dict[str, Any] = {str(e): t for e, t in timed.items()}
        for part in ("forward_s", "backward_s"):
            slope = (timed[high][part] - timed[low][part]) / (high - low)
            entry[f"per_expert_{part}"] = slope
            entry[f"moe_extra_{part}"] = timed[low][part] - results["dense"][part] - low * slope
        results[dispatcher] = entry
    write_results(out, results)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    sys.exit(main(sys.argv[1]))
