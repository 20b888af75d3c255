"""cuDNN's fused attention with a learnable softmax offset (attention sinks) and with a sliding
window, against plain causal attention at the same shapes, forward and backward.

    python3 benchmarks/gpu/sink_window_attention.py OUT.json

GPT-OSS (Megatron-Core ``softmax_type: learnable``, ``window_size: [128, 0]`` on every other
layer) runs under Transformer Engine as cuDNN's fused attention: FlashAttention refuses a softmax
offset, and TE prefers cuDNN on Hopper and later (TransformerEngine d0067d0,
``pytorch/attention/dot_product_attention/utils.py``, ``get_attention_backend``). The step model
prices a sink as the vanilla softmax and a windowed layer as its share of the causal kernel's
work at the causal kernel's rate, both unmeasured. This times cuDNN's bf16 SDPA graphs through
the cuDNN frontend (``nvidia-cudnn-frontend``, carried as a wheel; the cuDNN library is
torch's), the heuristics' first plan as Transformer Engine runs it, BSHD memory, GQA: plain
causal, causal with a sink token per head (``sink_token``, ``dSink_token``), causal within a
window of 128 keys before each query (``diagonal_band_left_bound`` 129,
``diagonal_band_right_bound`` 0), and both. Each
graph: CUDA events over ``CALLS`` calls after a warm-up, the median of ``REPEATS``; two passes.

The rule, fixed before the first run: per shape, the sink's factor (sink over plain) forward and
backward, and the window's rate, the window kernel's time over the causal kernel's times the
model's share of the work (``ShapePricer.window_share``: a query sees itself and 128 keys
before it); each the median over the shapes of both passes. Adopted as measured, for the cuDNN
kernel only (``SINK_ATTENTION_FACTOR``, ``WINDOW_ATTENTION_RATE``), where the two passes'
medians agree within 10%; otherwise written down and not adopted. Raw data; torch only.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

# (name, batch, query heads, key-value heads, sequence, head dim): GPT-OSS 120B and 20B at TP 1
# (micro-batches 1 and 4) and TP 2, and a Llama 3 8B-like shape at head dim 128
SHAPES = [
    ("gpt-oss tp1 mbs1 s4096", 1, 64, 8, 4096, 64),
    ("gpt-oss tp1 mbs4 s4096", 4, 64, 8, 4096, 64),
    ("gpt-oss tp2 mbs1 s4096", 1, 32, 4, 4096, 64),
    ("gpt-oss tp1 mbs1 s8192", 1, 64, 8, 8192, 64),
    ("llama3-8b-like tp1 mbs1 s4096", 1, 32, 8, 4096, 128),
]
WINDOW = 128
VARIANTS = {"plain": (False, False), "sink": (True, False), "window": (False, True), "both": (True, True)}
CALLS = 10
REPEATS = 5
PASSES = 2


def timed_ms(torch: Any, fn: Any) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs: list[float] = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS):
            fn()
        end.record()
        torch.cuda.synchronize()
        runs.append(float(start.elapsed_time(end)) / CALLS)
    return statistics.median(runs)


class Attention:
    """One shape and variant's cuDNN forward and backward graphs, bf16."""

    def __init__(self, cudnn: Any, torch: Any, shape: tuple[int, ...], sink: bool, window: bool) -> None:
        self.cudnn, self.torch, self.sink, self.window = cudnn, torch, sink, window
        b, hq, hkv, s, d = shape
        self.head_dim = d
        self.dims = {"q": (b, hq, s, d), "k": (b, hkv, s, d), "v": (b, hkv, s, d), "o": (b, hq, s, d)}
        # BSHD memory (what Megatron hands Transformer Engine), viewed as BHSD
        self.strides = {n: (dim[2] * dim[1] * d, d, dim[1] * d, 1) for n, dim in self.dims.items()}
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        self.data = {
            n: (torch.randn(dim[0], dim[2], dim[1], d, device="cuda") * 0.5)
            .to(torch.bfloat16)
            .permute(0, 2, 1, 3)
            for n, dim in self.dims.items()
        }
        self.data["dO"] = (torch.randn_like(self.data["o"], dtype=torch.float) * 0.1).to(torch.bfloat16)
        self.data["stats"] = torch.zeros(b, hq, s, 1, device="cuda", dtype=torch.float)
        self.data["sink"] = torch.zeros(1, hq, 1, 1, device="cuda", dtype=torch.float)
        self.data["dsink"] = torch.zeros(1, hq, 1, 1, device="cuda", dtype=torch.float)
        self.data["o_fwd"] = torch.empty_like(self.data["o"])
        for grad, of in (("dQ", "q"), ("dK", "k"), ("dV", "v")):
            self.data[grad] = torch.empty_like(self.data[of])
        self.forward = self.build(backward=False)
        self.backward = self.build(backward=True)

    def masks(self) -> dict[str, Any]:
        """Causal, and where the variant has a window within ``WINDOW`` keys before each query: the
        pybind's band bounds, a key ``j`` seen by query ``i`` where ``0 <= i - j < left``, so
        ``WINDOW + 1`` (Transformer Engine passes ``window_size[0] + 1``)."""
        out: dict[str, Any] = {
            "diagonal_alignment": self.cudnn.diagonal_alignment.TOP_LEFT,
            "diagonal_band_right_bound": 0,
        }
        if self.window:
            out["diagonal_band_left_bound"] = WINDOW + 1
        return out

    def build(self, backward: bool) -> tuple[Any, dict[Any, Any], Any]:
        cudnn, torch = self.cudnn, self.torch
        bf16, fp32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
        graph = cudnn.pygraph(
            io_data_type=bf16, intermediate_data_type=fp32, compute_data_type=fp32, handle=self.handle
        )
        pack: dict[Any, Any] = {}

        def tensor(name: str, data: str, dtype: Any = bf16) -> Any:
            ref = self.data[data]
            t = graph.tensor(name=name, dim=list(ref.shape), stride=list(ref.stride()), data_type=dtype)
            pack[t] = ref
            return t

        def output(t: Any, data: str, dtype: Any) -> None:
            ref = self.data[data]
            t.set_output(True).set_dim(list(ref.shape)).set_stride(list(ref.stride())).set_data_type(dtype)
            pack[t] = ref

        q, k, v = tensor("q", "q"), tensor("k", "k"), tensor("v", "v")
        scale = 1.0 / self.head_dim**0.5
        extra: dict[str, Any] = self.masks()
        if self.sink:
            extra["sink_token"] = tensor("sink", "sink", fp32)
        if not backward:
            o, stats = graph.sdpa(name="sdpa", q=q, k=k, v=v, attn_scale=scale, generate_stats=True, **extra)
            output(o, "o_fwd", bf16)
            output(stats, "stats", fp32)
        else:
            o, d_o = tensor("o", "o"), tensor("dO", "dO")
            stats = tensor("stats", "stats", fp32)
            if self.sink:
                d_sink = graph.tensor(
                    name="dsink",
                    dim=[1, self.dims["q"][1], 1, 1],
                    stride=[self.dims["q"][1], 1, 1, 1],
                    data_type=fp32,
                )
                pack[d_sink] = self.data["dsink"]
                extra["dSink_token"] = d_sink
            dq, dk, dv = graph.sdpa_backward(
                name="sdpa_backward", q=q, k=k, v=v, o=o, dO=d_o, stats=stats, attn_scale=scale, **extra
            )
            for t, name in ((dq, "dQ"), (dk, "dK"), (dv, "dV")):
                output(t, name, bf16)
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans(cudnn.build_plan_policy.HEURISTICS_CHOICE)
        workspace = torch.empty(max(graph.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        return graph, pack, workspace

    def time(self, which: Any) -> float:
        graph, pack, workspace = which
        return timed_ms(self.torch, lambda: graph.execute(pack, workspace, handle=self.handle))


def window_share(s: int) -> float:
    """A windowed causal layer's scores against a full causal layer's (``window_share``)."""
    w = min(WINDOW + 1, s)
    return (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2)


def one_pass(cudnn: Any, torch: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, *shape in SHAPES:
        times: dict[str, Any] = {}
        for variant, (sink, window) in VARIANTS.items():
            try:
                attention = Attention(cudnn, torch, tuple(shape), sink, window)
                times[variant] = {
                    "fwd_ms": attention.time(attention.forward),
                    "bwd_ms": attention.time(attention.backward),
                }
            except Exception as exc:  # an unsupported graph is a finding, not a crash
                times[variant] = {"error": str(exc).splitlines()[0][:300]}
            torch.cuda.empty_cache()
        plain = times["plain"]
        if "error" not in plain:
            share = window_share(shape[3])
            if "error" not in times["sink"]:
                times["sink_factor"] = {
                    p: times["sink"][f"{p}_ms"] / plain[f"{p}_ms"] for p in ("fwd", "bwd")
                }
            if "error" not in times["window"]:
                times["window_rate"] = {
                    p: times["window"][f"{p}_ms"] / (plain[f"{p}_ms"] * share) for p in ("fwd", "bwd")
                }
        out[name] = times
    return out


def summary(passes: list[dict[str, Any]], key: str) -> dict[str, Any]:
    per_pass = [
        {p: statistics.median(s[key][p] for s in one.values() if key in s) for p in ("fwd", "bwd")}
        for one in passes
        if any(key in s for s in one.values())
    ]
    if len(per_pass) < len(passes):
        return {"adopted": False, "why": "a pass has no shape with this variant"}
    both = {
        p: statistics.median(s[key][p] for one in passes for s in one.values() if key in s)
        for p in ("fwd", "bwd")
    }
    agree = all(max(x[p] for x in per_pass) <= 1.1 * min(x[p] for x in per_pass) for p in ("fwd", "bwd"))
    return {"median": both, "per_pass": per_pass, "adopted": agree}


def main() -> int:
    import cudnn
    import torch

    if len(sys.argv) != 2:
        sys.exit("usage: sink_window_attention.py OUT.json")
    passes = [one_pass(cudnn, torch) for _ in range(PASSES)]
    result = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "cudnn_frontend": getattr(cudnn, "__version__", None),
        "window": WINDOW,
        "passes": passes,
        "sink_factor": summary(passes, "sink_factor"),
        "window_rate": summary(passes, "window_rate"),
    }
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "passes"}, indent=1))
    for one in passes:
        for name, times in one.items():
            cells = "  ".join(
                f"{v} {t['fwd_ms'] * 1e3:7.1f}/{t['bwd_ms'] * 1e3:7.1f}" if "error" not in t else f"{v} ERR"
                for v, t in times.items()
                if v in VARIANTS
            )
            print(f"{name:30s} {cells}")
            for v, t in times.items():
                if v in VARIANTS and "error" in t:
                    print(f"   {v}: {t['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
