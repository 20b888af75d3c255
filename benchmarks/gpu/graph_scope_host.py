"""The host's work a per-layer CUDA graph of part of a layer takes over, by scope.

    # on the GPU machine, megatron-core 0.19 on PYTHONPATH
    python3 benchmarks/gpu/graph_scope_host.py OUT.json

Megatron-Core's per-layer graphs (``cuda_graph_impl: transformer_engine`` or ``local``) can cover
part of a layer (``cuda_graph_modules``, Bridge's ``cuda_graph_scope``; megatron-core 0.19
``transformer_config.py``): ``attn`` the attention half (``TransformerLayer._forward_attention``:
input norm, self-attention, bias-dropout-add), ``moe_router`` with ``moe_preprocess`` the MoE
block up to its dispatch (``_forward_mlp_router``: the pre-MLP norm, the router, the token
dispatcher's preprocessing), ``mlp`` a dense layer's MLP half. The graphed part's Python and
launches become one replay a pass; the rest of the layer runs eagerly. The step model keeps the
whole layer's host work under a partial scope ("a layer graphed in part keeps its host work")
until d72b36f, which took rule 1's attention share.

This times each part's host work eagerly, as ``graph_replay_host.py`` times whole layers: stacks
of 8 Megatron-Core local-spec layers at tiny shapes (hidden 256, sequence 128: the GPU waits for
the host), one process under the fake process group at world size 1, the wall time per layer of
each part's forward and backward (each part applied to its own copy of one input, its outputs
summed for the backward), the median of ``REPEATS`` passes:

- dense layers: the whole layer, its attention half;
- MoE layers (top-2, auxiliary loss 1e-2, no linear biases, ``SequentialMLP`` experts; 4 and 16
  experts under rule 1, 8 under rule 2), per dispatcher (``alltoall``, ``allgather``): the whole
  layer, its attention half, its router part (what ``_forward_mlp_router`` runs).

Rule 1, fixed before its run (results/graph-scope-host/rule1-h200.json, an H200 host,
GPU-8fc15742): per dispatcher the per-expert slope ``(L16 - L4) / 12``, the layer without its
experts ``B = L4 - 4 x slope``, and the shares ``A4 / B`` and ``R4 / B``. Not adopted: the slope
came out at 0.63 ms an expert forward under the all-to-all dispatcher (the ``hostmoe-`` runs:
0.18 ms), so ``B`` fell below its own parts (shares 1.04 and 1.38), and the attention half, the
same module in every kind, took 1.00-1.47 ms forward from one kind's stacks to the next.

Rule 2, fixed after rule 1's run and before its own: no slope, and every part measured against
the dense layer timed beside it. Kinds dense, all-to-all and all-gather with 8 experts, built
once; three passes, each timing every part of every kind in turn. Per pass, the attention half's
share ``a = A_dense / L_dense`` and per dispatcher the router part's ratio
``r = R / L_dense`` (the pre-MLP norm, the router and the dispatcher's preprocessing, in units
of a dense layer's host work), forward and backward apart; the median over the passes. At the
next model freeze a partially graphed layer's host work loses ``a`` (attention) or ``1 - a``
(a dense MLP) of the loop's layer floor and ``r`` of it for a graphed MoE router, and gains one
replay a pass (``GRAPH_REPLAY_HOST_FWD_S``/``_BWD_S``); the flex dispatcher, not measurable here,
takes the all-to-all's ``r``. A component measurement: every run is read. Torch and
megatron-core only, no memtune.

Rule 2 ran on an H200 host (results/graph-scope-host/rule2-h200.json; the model took its shares
at babdd04). A replication on another host, fixed before it runs: the same script on a lent
H100's host, reported beside rule 2 and not adopted; where a share differs from rule 2's by
more than 0.1, docs/plan.md says the shares carry that spread between hosts. Where no H100
starts, a lent H200 other than GPU-043caa40 serves (amended before any replication ran). It ran
on an H100's host (results/graph-scope-host/replication-h100.json, GPU-596cd258): the forward
shares within 0.08 of rule 2's, the backward ones 0.22-0.42 apart (docs/plan.md says so).
"""

from __future__ import annotations

import os
import sys
import time
from statistics import median
from typing import Any

from graph_replay_host import HIDDEN, REPEATS, SEQ, WARMUP, mcore_layers, write_results
from moe_host import _layers

EXPERTS_RULE2 = 8
DISPATCHERS = ("alltoall", "allgather")
PASSES = 3


def _part_times(torch: Any, parts: list[Any]) -> dict[str, float]:
    """Forward and backward wall seconds per layer of ``parts`` (callables of one tensor, each
    returning a tuple of tensors), each applied to its own copy of one input."""
    state: dict[str, Any] = {}

    def forward() -> None:
        x = torch.randn(SEQ, 1, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        outs = [o for part in parts for o in part(x.clone()) if o is not None and o.requires_grad]
        state["loss"] = sum(o.float().sum() for o in outs)

    def backward() -> None:
        state["loss"].backward()

    def timed(fn: Any) -> float:
        for _ in range(WARMUP):
            fn()
            torch.cuda.synchronize()
        times = []
        for _ in range(REPEATS):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return median(times)

    fwd = timed(forward)
    both = timed(lambda: (forward(), backward()))
    return {"forward_s": fwd / len(parts), "backward_s": (both - fwd) / len(parts)}


def _parts(layers: list[Any], moe: bool) -> dict[str, list[Any]]:
    """Each measured part of ``layers`` (``mcore_layers``' wrappers) as a callable."""
    found = {
        "layer": [lambda x, w=w: (w(x),) for w in layers],
        "attention": [
            lambda x, w=w: (w.layer._forward_attention(x, attention_mask=None)[0],) for w in layers
        ],
    }
    if moe:
        found["router"] = [lambda x, w=w: _router_part(w.layer, x) for w in layers]
    return found


def _router_part(layer: Any, x: Any) -> tuple[Any, Any]:
    """What ``moe_router`` with ``moe_preprocess`` captures (megatron-core 0.19
    ``MoETransformerLayer._forward_mlp_router``, which the local spec's ``TransformerLayer``
    lacks): the pre-MLP norm, then the MoE layer's forward up to its dispatch (its execution map
    at ``route``, intermediate tensors asked for): the tokens to dispatch and their
    probabilities. The layer's own execution map is put back after, because the next pass times
    the whole layer through the same module."""
    whole = layer.mlp.fwd_execution_map
    layer.mlp.fwd_execution_map = "route"
    try:
        hidden, probs, _ = layer.mlp(layer.pre_mlp_layernorm(x), intermediate_tensors=())
    finally:
        layer.mlp.fwd_execution_map = whole
    return hidden, probs


def main(out: str) -> int:
    import megatron.core
    import torch

    torch.cuda.set_device(0)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "megatron_core": megatron.core.__version__,
        "shape": {"hidden": HIDDEN, "seq": SEQ, "micro_batch": 1, "layers": 8, "experts": EXPERTS_RULE2},
        "repeats": REPEATS,
        "passes": [],
    }
    kinds = {"dense": (mcore_layers(torch, None, add_bias_linear=False), False)}
    for d in DISPATCHERS:
        kinds[d] = (_layers(torch, EXPERTS_RULE2, d), True)
    for _ in range(PASSES):
        found = {}
        for name, (layers, moe) in kinds.items():
            found[name] = {part: _part_times(torch, fns) for part, fns in _parts(layers, moe).items()}
        results["passes"].append(found)
    results["shares"] = shares(results["passes"])
    write_results(out, results)
    return 0


def shares(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """Rule 2's ``a`` and ``r`` per dispatcher (module docstring), forward and backward apart:
    the median over the passes of each pass's ratios to its own dense layer."""
    found: dict[str, Any] = {}
    for p in ("forward_s", "backward_s"):
        dense = [run["dense"] for run in passes]
        found[p] = {"attention": median(x["attention"][p] / x["layer"][p] for x in dense)}
        for d in DISPATCHERS:
            found[p][d] = median(run[d]["router"][p] / run["dense"]["layer"][p] for run in passes)
    return found


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    sys.exit(main(sys.argv[1]))
