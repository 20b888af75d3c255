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
whole layer's host work under a partial scope ("a layer graphed in part keeps its host work").

This times each part's host work eagerly, as ``graph_replay_host.py`` times whole layers: stacks
of 8 Megatron-Core local-spec layers at tiny shapes (hidden 256, sequence 128: the GPU waits for
the host), one process under the fake process group at world size 1, the wall time per layer of
each part's forward and backward (each part applied to its own copy of one input, its outputs
summed for the backward), the median of ``REPEATS`` passes:

- dense layers: the whole layer, its attention half;
- MoE layers (top-2, auxiliary loss 1e-2, no linear biases, ``SequentialMLP`` experts) with 4 and
  16 experts, per dispatcher (``alltoall``, ``allgather``): the whole layer, its attention half,
  its router part (``_forward_mlp_router``).

The rule, fixed before any run. Dense: the attention half's share of the layer, ``A / L``,
forward and backward apart (the MLP half's is the rest). MoE, per dispatcher: the per-expert
slope ``(L16 - L4) / 12``, the layer without its experts ``B = L4 - 4 x slope``, and the shares
``A4 / B`` (attention) and ``R4 / B`` (router part), forward and backward apart; the same at 16
experts is printed as a check, not used. At the next model freeze a partially graphed layer's
host work loses those shares of its host work at EP 1 without experts (the loop's layer floor
and the MoE block's measured own work; not the exchanges' nor the sequential experts') and gains
one replay a pass (``GRAPH_REPLAY_HOST_FWD_S``/``_BWD_S``); the flex dispatcher, not measurable
here, takes the all-to-all's shares. A component measurement: every run is read. Torch and
megatron-core only, no memtune.
"""

from __future__ import annotations

import os
import sys
import time
from statistics import median
from typing import Any

from graph_replay_host import HIDDEN, REPEATS, SEQ, WARMUP, mcore_layers, write_results
from moe_host import _layers

EXPERTS = (4, 16)
DISPATCHERS = ("alltoall", "allgather")


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
    probabilities."""
    layer.mlp.fwd_execution_map = "route"
    hidden, probs, _ = layer.mlp(layer.pre_mlp_layernorm(x), intermediate_tensors=())
    return hidden, probs


def main(out: str) -> int:
    import megatron.core
    import torch

    torch.cuda.set_device(0)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "megatron_core": megatron.core.__version__,
        "shape": {"hidden": HIDDEN, "seq": SEQ, "micro_batch": 1, "layers": 8},
        "repeats": REPEATS,
        "runs": {},
    }
    kinds: list[tuple[str, Any, bool]] = [
        ("dense", lambda: mcore_layers(torch, None, add_bias_linear=False), False)
    ]
    kinds += [
        (f"{d}-e{e}", lambda d=d, e=e: _layers(torch, e, d), True) for d in DISPATCHERS for e in EXPERTS
    ]
    for name, build, moe in kinds:
        try:
            layers = build()
            results["runs"][name] = {
                part: _part_times(torch, fns) for part, fns in _parts(layers, moe).items()
            }
        except Exception as exc:  # recorded: the other kinds still run
            import traceback

            traceback.print_exc()
            results["runs"][name] = {"error": f"{type(exc).__name__}: {exc}"}
    results["shares"] = shares(results["runs"])
    write_results(out, results)
    return 0


def shares(runs: dict[str, Any]) -> dict[str, Any]:
    """The rule's shares from ``runs`` (module docstring), forward and backward apart."""
    found: dict[str, Any] = {}
    passes = ("forward_s", "backward_s")
    dense = runs.get("dense", {})
    if "layer" in dense:
        found["dense"] = {p: {"attention": dense["attention"][p] / dense["layer"][p]} for p in passes}
    for d in DISPATCHERS:
        e4, e16 = runs.get(f"{d}-e4", {}), runs.get(f"{d}-e16", {})
        if "layer" not in e4 or "layer" not in e16:
            continue
        found[d] = {}
        for p in passes:
            slope = (e16["layer"][p] - e4["layer"][p]) / 12
            base4, base16 = e4["layer"][p] - 4 * slope, e16["layer"][p] - 16 * slope
            found[d][p] = {
                "expert_slope_s": slope,
                "base_s": base4,
                "attention": e4["attention"][p] / base4,
                "router": e4["router"][p] / base4,
                "check_e16": {"attention": e16["attention"][p] / base16, "router": e16["router"][p] / base16},
            }
    return found


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    sys.exit(main(sys.argv[1]))
