"""cuDNN's fused attention in FP8 against the same kernel in bf16, forward and backward.

    python3 benchmarks/gpu/fp8_attention.py OUT.json

Transformer Engine runs ``fp8_dot_product_attention`` (Megatron-Bridge's
``mixed_precision.fp8_dot_product_attention``, MLPerf's ``FP8_DPA=1``) as cuDNN's FP8 fused
attention (``sdpa_fp8`` and ``sdpa_fp8_backward`` of the cuDNN graph API), and bf16 attention,
when it picks the fused backend, as cuDNN's bf16 kernel. This times both through the
cuDNN frontend's Python graphs (``nvidia-cudnn-frontend``, carried as a wheel; the cuDNN
library is torch's), causal, head dim 128, at the query heads, key-value groups and sequence
lengths of Llama-style ranks, and torch SDPA's flash and cuDNN kernels (what
``kernels-*.json`` prices bf16 attention with) beside them. Each kernel: CUDA events over
``CALLS`` calls after a warm-up, the median of ``REPEATS``; the cuDNN graphs twice, with the
heuristics' first plan (cuDNN's own choice) and with the fastest of every plan they offer
(``*_best_ms``). On Hopper the FP8 backward writes FP8 gradients (E5M2): bf16 ones are
Blackwell's only.

Raw data: nothing here changes a price (docs/plan.md says what the step model does with it).
"""

from __future__ import annotations

import json
import statistics
import sys
import traceback
from typing import Any

# (batch, query heads, key-value heads, sequence): Llama 2/3 70B at TP 1, 2, 4, 8 and 8B
SHAPES = [
    (1, 64, 8, 8192),
    (1, 64, 8, 4096),
    (1, 32, 4, 8192),
    (1, 16, 2, 8192),
    (1, 8, 1, 8192),
    (2, 32, 8, 4096),
    (4, 32, 8, 2048),
]
HEAD_DIM = 128
CALLS = 20
REPEATS = 5


def timed_ms(fn: Any, torch: Any) -> float:
    """Median milliseconds per call of ``fn`` (CUDA events), after a warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS):
            fn()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) / CALLS)
    return statistics.median(runs)


class CudnnAttention:
    """One shape's cuDNN forward and backward graphs, in bf16 or FP8."""

    def __init__(self, cudnn: Any, torch: Any, shape: tuple[int, int, int, int], fp8: bool) -> None:
        self.cudnn, self.torch, self.fp8 = cudnn, torch, fp8
        b, hq, hkv, s = shape
        d = HEAD_DIM
        self.dims = {"q": (b, hq, s, d), "k": (b, hkv, s, d), "v": (b, hkv, s, d), "o": (b, hq, s, d)}
        # BSHD memory (what Megatron hands Transformer Engine), viewed as BHSD
        self.strides = {n: (dim[2] * dim[1] * d, d, dim[1] * d, 1) for n, dim in self.dims.items()}
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        io = torch.float8_e4m3fn if fp8 else torch.bfloat16
        self.data = {
            n: (torch.randn(dim[0], dim[2], dim[1], d, device="cuda") * 0.5).to(io).permute(0, 2, 1, 3)
            for n, dim in self.dims.items()
        }
        grad_type = torch.float8_e5m2 if fp8 else torch.bfloat16
        self.data["dO"] = (torch.randn_like(self.data["o"], dtype=torch.float) * 0.1).to(grad_type)
        b_, hq_, s_, _ = self.dims["q"]
        self.data["stats"] = torch.zeros(b_, hq_, s_, 1, device="cuda", dtype=torch.float)
        # Hopper's FP8 backward writes its gradients in FP8 (E5M2), which Transformer Engine then
        # dequantizes under delayed scaling; bf16 gradients are Blackwell's only
        self.grad_type = torch.float8_e5m2 if fp8 else torch.bfloat16
        for grad, of in (("dQ", "q"), ("dK", "k"), ("dV", "v")):
            self.data[grad] = torch.empty_like(self.data[of], dtype=self.grad_type)
        self.forward = self.build(backward=False)
        self.backward = self.build(backward=True)

    def io_type(self, name: str) -> Any:
        dt = self.cudnn.data_type
        if not self.fp8:
            return dt.BFLOAT16
        return dt.FP8_E5M2 if name == "dO" else dt.FP8_E4M3

    def build(self, backward: bool) -> tuple[Any, dict[Any, Any], Any]:
        cudnn, torch = self.cudnn, self.torch
        graph = cudnn.pygraph(
            io_data_type=self.io_type("q"),
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            handle=self.handle,
        )
        pack: dict[Any, Any] = {}

        def tensor(name: str, dims: Any = None, strides: Any = None, dtype: Any = None) -> Any:
            t = graph.tensor(
                name=name,
                dim=dims or self.dims[name.lower().lstrip("d")],
                stride=strides or self.strides[name.lower().lstrip("d")],
                data_type=dtype or self.io_type(name),
            )
            pack[t] = self.data[name]
            return t

        def scalar(name: str) -> Any:
            t = graph.tensor(
                name=name, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=cudnn.data_type.FLOAT
            )
            pack[t] = torch.ones(1, 1, 1, 1, device="cuda", dtype=torch.float)
            return t

        def output(t: Any, name: str, dtype: Any = None) -> None:
            ref = self.data.setdefault(name, torch.empty(1, 1, 1, 1, device="cuda", dtype=torch.float))
            t.set_output(True).set_dim(list(ref.shape)).set_stride(list(ref.stride()))
            t.set_data_type(dtype or cudnn.data_type.FLOAT)
            pack[t] = ref

        q, k, v = tensor("q"), tensor("k"), tensor("v")
        scale = 1.0 / HEAD_DIM**0.5
        bf16 = cudnn.data_type.BFLOAT16
        if not backward:
            if self.fp8:
                self.data["o_fwd"] = torch.empty_like(self.data["o"])
                o, stats, amax_s, amax_o = graph.sdpa_fp8(
                    q=q, k=k, v=v,
                    descale_q=scalar("dq"), descale_k=scalar("dk"), descale_v=scalar("dv"),
                    descale_s=scalar("ds"), scale_s=scalar("ss"), scale_o=scalar("so"),
                    attn_scale=scale, use_causal_mask=True, generate_stats=True,
                )  # fmt: skip
                output(amax_s, "amax_s")
                output(amax_o, "amax_o")
                output(o, "o_fwd", cudnn.data_type.FP8_E4M3)
            else:
                self.data["o_fwd"] = torch.empty_like(self.data["o"])
                o, stats = graph.sdpa(
                    name="sdpa", q=q, k=k, v=v, attn_scale=scale, use_causal_mask=True, generate_stats=True
                )
                output(o, "o_fwd", bf16)
            output(stats, "stats")
        else:
            o, d_o = tensor("o"), tensor("dO", self.dims["o"], self.strides["o"])
            stats = tensor(
                "stats", self.data["stats"].shape, self.data["stats"].stride(), cudnn.data_type.FLOAT
            )
            if self.fp8:
                dq, dk, dv, *amaxes = graph.sdpa_fp8_backward(
                    q=q, k=k, v=v, o=o, dO=d_o, stats=stats,
                    descale_q=scalar("dq"), descale_k=scalar("dk"), descale_v=scalar("dv"),
                    descale_o=scalar("do"), descale_dO=scalar("ddo"), descale_s=scalar("ds"),
                    descale_dP=scalar("ddp"), scale_s=scalar("ss"), scale_dQ=scalar("sdq"),
                    scale_dK=scalar("sdk"), scale_dV=scalar("sdv"), scale_dP=scalar("sdp"),
                    attn_scale=scale, use_causal_mask=True,
                )  # fmt: skip
                for i, amax in enumerate(amaxes):
                    output(amax, f"amax_b{i}")
            else:
                dq, dk, dv = graph.sdpa_backward(
                    name="sdpa_backward", q=q, k=k, v=v, o=o, dO=d_o, stats=stats,
                    attn_scale=scale, use_causal_mask=True,
                )  # fmt: skip
            grad = cudnn.data_type.FP8_E5M2 if self.fp8 else bf16
            for t, name in ((dq, "dQ"), (dk, "dK"), (dv, "dV")):
                output(t, name, grad)
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans(cudnn.build_plan_policy.ALL)
        sizes = [graph.get_workspace_size_plan_at_index(i) for i in range(graph.get_execution_plan_count())]
        workspace = torch.empty(
            max([graph.get_workspace_size(), *sizes, 1]), device="cuda", dtype=torch.uint8
        )
        return graph, pack, workspace

    def time(self, which: Any) -> float:
        """The heuristics' first plan, as Transformer Engine runs it."""
        graph, pack, workspace = which
        return timed_ms(lambda: graph.execute(pack, workspace, handle=self.handle), self.torch)

    def best(self, which: Any) -> float:
        """The fastest of every plan the heuristics offer."""
        graph, pack, workspace = which
        times = []
        for i in range(graph.get_execution_plan_count()):
            try:
                times.append(
                    timed_ms(
                        lambda i=i: graph.execute_plan_at_index(pack, workspace, i, handle=self.handle),
                        self.torch,
                    )
                )
            except Exception:
                continue
        return min(times)


def sdpa_ms(torch: Any, shape: tuple[int, int, int, int], backend: str) -> tuple[float, float]:
    """torch SDPA on one backend (``FLASH_ATTENTION``, ``CUDNN_ATTENTION``), forward and
    backward (forward+backward less forward), bf16, causal, GQA."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, hq, hkv, s = shape
    q = torch.randn(b, hq, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, hkv, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, hkv, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(b, hq, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel([getattr(SDPBackend, backend)]):

        def forward() -> Any:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        with torch.no_grad():
            fwd = timed_ms(forward, torch)
        both = timed_ms(lambda: forward().backward(grad), torch)
    return fwd, both - fwd


def main() -> None:
    import torch

    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    try:
        import cudnn

        result["cudnn_backend"] = cudnn.backend_version_string()
        result["cudnn_frontend"] = getattr(cudnn, "__version__", "?")
    except Exception:
        result["cudnn_error"] = traceback.format_exc(limit=3)
        cudnn = None
    for shape in SHAPES:
        b, hq, hkv, s = shape
        row: dict[str, Any] = {"batch": b, "heads": hq, "groups": hkv, "seq": s, "head_dim": HEAD_DIM}
        for backend, tag in (("FLASH_ATTENTION", "flash"), ("CUDNN_ATTENTION", "torch_cudnn")):
            try:
                row[f"{tag}_fwd_ms"], row[f"{tag}_bwd_ms"] = sdpa_ms(torch, shape, backend)
            except Exception:
                row[f"{tag}_error"] = traceback.format_exc(limit=3)
        for fp8 in (False, True) if cudnn else ():
            tag = "fp8" if fp8 else "bf16"
            try:
                attn = CudnnAttention(cudnn, torch, shape, fp8)
                row[f"cudnn_{tag}_fwd_ms"] = attn.time(attn.forward)
                row[f"cudnn_{tag}_bwd_ms"] = attn.time(attn.backward)
                row[f"cudnn_{tag}_fwd_best_ms"] = attn.best(attn.forward)
                row[f"cudnn_{tag}_bwd_best_ms"] = attn.best(attn.backward)
            except Exception:
                row[f"cudnn_{tag}_error"] = traceback.format_exc(limit=4)
            torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        result["rows"].append(row)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
