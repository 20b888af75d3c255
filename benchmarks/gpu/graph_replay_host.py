"""Time the host's work per layer pass with and without a CUDA graph of each layer
(``GRAPH_REPLAY_HOST_S``, memtune/perf/constants.py).

    # on the GPU machine, megatron-core on PYTHONPATH
    python3 benchmarks/gpu/graph_replay_host.py OUT.json

A per-layer CUDA graph (Megatron-Core's ``cuda_graph_impl: local`` or ``transformer_engine``
without a scope) replaces a layer's Python and kernel launches by one graph replay a pass. Both
implementations wrap the layer in an autograd function whose forward copies the inputs into the
graph's static buffers and replays the forward graph, and whose backward replays the backward
graph (megatron-core 0.19.2 ``transformer/cuda_graphs.py`` ``_CudagraphReplayNode``; Transformer
Engine's ``make_graphed_callables``, modelled on torch's). This script measures that mechanism
with torch's ``torch.cuda.make_graphed_callables`` on two layers:

- ``mcore``: Megatron-Core 0.19.2's local-spec ``TransformerLayer`` (the modules
  ``memtune measure`` builds; one process, the fake process group at world size 1);
- ``torch``: a plain torch layer of the same structure (norm, QKV, flash attention, projection,
  norm, MLP), a check that the replay's cost does not depend on what was captured.

Shapes are tiny (hidden 256, sequence 128, 8 layers) so the GPU waits on the host: a pass's
wall time per layer is the host's work for it. Eager and graphed passes are timed alike
(``REPEATS`` timed passes after warm-up, the median kept), forward and backward apart.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

LAYERS = 8
HIDDEN = 256
HEADS = 4
SEQ = 128
REPEATS = 50
WARMUP = 5


def _timed(fn, sync) -> float:
    """Median wall seconds of ``fn`` over ``REPEATS`` calls after ``WARMUP``."""
    for _ in range(WARMUP):
        fn()
        sync()
    times = []
    for _ in range(REPEATS):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _per_layer(layers, make_input) -> dict[str, float]:
    """Forward and backward wall seconds per layer of a stack of ``layers`` (host-bound)."""
    import torch

    sync = torch.cuda.synchronize
    state: dict[str, torch.Tensor] = {}

    def forward() -> None:
        x = make_input()
        for layer in layers:
            x = layer(x)
        state["out"] = x

    def backward() -> None:
        state["out"].sum().backward()

    def forward_backward() -> None:
        forward()
        backward()

    fwd = _timed(forward, sync)
    both = _timed(forward_backward, sync)
    return {"forward_s": fwd / len(layers), "backward_s": (both - fwd) / len(layers)}


def _torch_layer(torch):
    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = torch.nn.LayerNorm(HIDDEN)
            self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
            self.proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.norm2 = torch.nn.LayerNorm(HIDDEN)
            self.fc1 = torch.nn.Linear(HIDDEN, 4 * HIDDEN, bias=False)
            self.fc2 = torch.nn.Linear(4 * HIDDEN, HIDDEN, bias=False)

        def forward(self, x):
            s, b, h = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(s, b, 3, HEADS, h // HEADS).permute(2, 1, 3, 0, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.permute(2, 0, 1, 3).reshape(s, b, h))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))

    return Layer


def write_results(out: str, results: dict[str, Any]) -> None:
    """Write ``results`` to ``out`` as JSON and print them."""
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    print(json.dumps(results, indent=1))


def mcore_layers(torch, spec=None, **moe):
    """``LAYERS`` Megatron-Core decoder layers (the local spec unless ``spec``; ``moe``: MoE
    fields of the config), each wrapped to take and return one tensor; the fake process group at
    world size 1 set up on the first call."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.transformer_layer import TransformerLayer
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
        parallel_state.initialize_model_parallel(create_gloo_process_groups=False)
        model_parallel_cuda_manual_seed(1234, use_cudagraphable_rng=True)  # as under cuda graphs
    config = TransformerConfig(
        num_layers=LAYERS,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        ffn_hidden_size=4 * HIDDEN,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bf16=True,
        params_dtype=torch.bfloat16,
        **moe,
    )
    spec = spec or get_gpt_layer_local_spec()

    class OneTensor(torch.nn.Module):
        def __init__(self, number: int) -> None:
            super().__init__()
            self.layer = TransformerLayer(config, spec.submodules, layer_number=number)

        def forward(self, x):
            out = self.layer(x, attention_mask=None)
            return out[0] if isinstance(out, tuple) else out

    return [OneTensor(i + 1).cuda().to(torch.bfloat16) for i in range(LAYERS)]


def _measure(layers, found: dict[str, dict[str, float]]) -> None:
    """Fill ``found`` with the eager and the graphed passes' figures (the eager ones kept if
    capturing fails)."""
    import torch

    dtype = torch.bfloat16

    def make_input():
        return torch.randn(SEQ, 1, HIDDEN, device="cuda", dtype=dtype, requires_grad=True)

    found["eager"] = _per_layer(layers, make_input)
    sample = tuple((make_input(),) for _ in layers)
    graphed = torch.cuda.make_graphed_callables(tuple(layers), sample)
    found["graphed"] = _per_layer(list(graphed), make_input)


def main(out: str) -> int:
    import torch

    torch.cuda.set_device(0)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "shape": {"layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "seq": SEQ, "micro_batch": 1},
        "repeats": REPEATS,
    }
    layer = _torch_layer(torch)
    results["torch"] = {}
    _measure([layer().cuda().to(torch.bfloat16) for _ in range(LAYERS)], results["torch"])
    try:
        import megatron.core

        results["megatron_core"] = megatron.core.__version__
        results["mcore"] = {}
        _measure(mcore_layers(torch), results["mcore"])
    except Exception as exc:  # recorded, not fatal: the torch layer's figures still stand
        import traceback

        results["mcore_error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    write_results(out, results)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    sys.exit(main(sys.argv[1]))
