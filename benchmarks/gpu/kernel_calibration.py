"""Time the kernels one training rank runs, at the shard shapes memtune's throughput model prices,
and write them as a table that ``memtune/perf/kernels.py`` loads (interpolating between the
measured shapes).

Runs on the GPU machine with torch only (no memtune, no Megatron, no Transformer Engine), next to
``gemm_calibration.py`` (whose CUDA-event timer it shares):

    python3 benchmarks/gpu/kernel_calibration.py benchmarks/gpu/results/kernels-h200.json [--quick]
        [--sections NAME,NAME]   # only these, into the existing table


What it times (CUDA events, after a warm-up, repeated to last about 50 ms each):

- GEMMs by (M, N, K): bf16 ``torch.matmul``; FP8 e4m3 ``torch._scaled_mm`` with tensorwise
  scales and (section ``gemm_fp8_blockwise``) blockwise scales (1x128 activations, 128x128
  weights); the shapes are the forward GEMMs of Llama-3 8B/70B/405B-, Qwen3-32B-, GPT-3-175B-,
  DeepSeek-V3- and Qwen3-30B-A3B-like layers over TP 1-8 and 1k-16k tokens;
- the same GEMMs at 256 and 512 rows beside 1,024 (section ``gemm_small_m``): what a TP chunk of
  Transformer Engine's userbuffer overlap runs;
- routed-expert GEMMs at small M: per expert and grouped (``torch._grouped_mm``);
- causal flash attention forward and backward (``scaled_dot_product_attention``) by sequence,
  heads, head dim (64, 128, MLA's 192/128) and query groups (GQA);
- the same attention restricted to PyTorch's memory-efficient kernel at MLA's head dims (what
  ``memtune/measure/sdpa_attention.py`` runs when q/k and v head dims differ, which the flash
  kernel does not take);
- elementwise work: RMSNorm/LayerNorm forward+backward, RoPE, SwiGLU, bias-dropout-add;
- cross-entropy over the vocabulary (plain, and chunked the way a fused kernel streams it);
- MoE router (linear + softmax + top-k) and token permute/unpermute (index_select/index_add);
- the optimizer step: ``torch.optim.AdamW`` fused and foreach on fp32 master weights;
- PCIe: pinned host<->device copies (H2D and D2H) of 1 MiB to 1 GiB;
- CPU Adam (``torch.optim.AdamW`` foreach on CPU tensors) for optimizer offload;
- LoRA adapters' compute on one rank (dropout, the two small GEMMs, the add to the base output;
  forward and backward), their collectives left out.

A section that fails on this torch is recorded with its error and skipped; the model then keeps
its fallback for it and says so.
"""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from typing import Any

import gemm_calibration  # benchmarks/gpu/ is on sys.path when this runs as a script

GEMM_MODELS = {  # hidden, heads, query groups, ffn (gated), head dim
    "llama3-8b": (4096, 32, 8, 14336, 128),
    "llama3-70b": (8192, 64, 8, 28672, 128),
    "llama3.1-405b": (16384, 128, 8, 53248, 128),
    "qwen3-32b": (5120, 64, 8, 25600, 128),
    "gpt3-175b": (12288, 96, 96, 49152, 128),
}
EXPERTS = {  # hidden, expert ffn
    "deepseek-v3": (7168, 2048),
    "qwen3-30b-a3b": (2048, 768),
}
TOKENS = (1024, 4096, 8192, 16384)
TOKENS_QUICK = (4096,)


def time_ms(fn: Any, torch: Any, budget_ms: float = 50.0) -> float:
    return float(gemm_calibration.time_ms(fn, torch, budget_ms=budget_ms, max_reps=1000))


def gemm_shapes(tokens: tuple[int, ...]) -> list[tuple[str, int, int, int]]:
    shapes = []
    for name, (h, heads, groups, ffn, kv) in GEMM_MODELS.items():
        for tp in (1, 2, 4, 8):
            local_groups = max(groups // tp, 1)
            for t in tokens:
                shapes += [
                    (f"{name} tp{tp} qkv", t, (heads // tp + 2 * local_groups) * kv, h),
                    (f"{name} tp{tp} proj", t, h, heads // tp * kv),
                    (f"{name} tp{tp} fc1", t, 2 * ffn // tp, h),
                    (f"{name} tp{tp} fc2", t, h, ffn // tp),
                ]
    return shapes


def gemms(torch: Any, tokens: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"bf16": [], "fp8_tensorwise": []}
    errors: dict[str, str] = {}
    for name, m, n, k in gemm_shapes(tokens):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ms = time_ms(partial(torch.matmul, a, b), torch)
        out["bf16"].append(
            {"name": name, "m": m, "n": n, "k": k, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9}
        )
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device="cuda", dtype=torch.float32)
        if "fp8_tensorwise" not in errors:
            try:
                ms = time_ms(partial(torch._scaled_mm, a8, b8, one, one, out_dtype=torch.bfloat16), torch)
                out["fp8_tensorwise"].append(
                    {"name": name, "m": m, "n": n, "k": k, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9}
                )
            except (RuntimeError, TypeError) as exc:
                errors["fp8_tensorwise"] = str(exc).splitlines()[0]
    out["errors"] = errors
    return out


SMALL_M = (256, 512, 1024)  # rows of the GEMMs TE's userbuffer overlap splits by TP, with 1024 to compare


def small_m_gemms(torch: Any) -> dict[str, Any]:
    """The same GEMMs at 256 and 512 rows, beside 1,024 on the same machine: what Transformer
    Engine's ring-exchange overlap runs per TP chunk (M / TP rows), below the tables' smallest M.
    The model takes the ratio to the 1,024-row time, so the tables' own machine keeps its scale."""
    shapes = [(name, n, k) for name, _, n, k in gemm_shapes((1024,))]
    return {
        kind: [
            {"name": name, "m": m, "n": n, "k": k, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9}
            for name, n, k in shapes
            for m in SMALL_M
            for ms in (time_ms(_gemm_call(torch, kind, m, n, k), torch),)
        ]
        for kind in ("bf16", "fp8_tensorwise")
    }


def backward_gemms(torch: Any, tokens: tuple[int, ...]) -> dict[str, Any]:
    """Each forward GEMM's backward pair as a linear layer's backward runs it: the data gradient
    (tokens x in, summed over out: the output gradient times the weight) and the weight gradient
    (out x in, summed over the tokens: the output gradient's transpose times the input), in bf16
    as autograd lays them out and in FP8 tensorwise as Transformer Engine feeds cuBLAS (row-major
    times column-major, its transposed copies made by the casts)."""
    out: dict[str, Any] = {"bf16": [], "fp8_tensorwise": []}
    one = torch.ones((), device="cuda", dtype=torch.float32)
    for name, t, n_out, k_in in gemm_shapes(tokens):
        grad = torch.randn(t, n_out, device="cuda", dtype=torch.bfloat16)
        weight = torch.randn(n_out, k_in, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(t, k_in, device="cuda", dtype=torch.bfloat16)
        calls = {
            "bf16": {
                "dgrad": ((t, k_in, n_out), partial(torch.matmul, grad, weight)),
                "wgrad": ((n_out, k_in, t), partial(torch.matmul, grad.t(), x)),
            },
            "fp8_tensorwise": {
                "dgrad": (
                    (t, k_in, n_out),
                    partial(
                        torch._scaled_mm,
                        grad.to(torch.float8_e5m2),
                        weight.to(torch.float8_e4m3fn).t().contiguous().t(),
                        one,
                        one,
                        out_dtype=torch.bfloat16,
                    ),
                ),
                "wgrad": (
                    (n_out, k_in, t),
                    partial(
                        torch._scaled_mm,
                        grad.t().contiguous().to(torch.float8_e5m2),
                        x.to(torch.float8_e4m3fn).t().contiguous().t(),
                        one,
                        one,
                        out_dtype=torch.bfloat16,
                    ),
                ),
            },
        }
        for kind, roles in calls.items():
            for role, ((m, n, k), call) in roles.items():
                ms = time_ms(call, torch)
                out[kind].append(
                    {
                        "name": name,
                        "role": role,
                        "tokens": t,
                        "m": m,
                        "n": n,
                        "k": k,
                        "ms": ms,
                        "tflops": 2 * m * n * k / ms / 1e9,
                    }
                )
    return out


def _gemm_call(torch: Any, kind: str, m: int, n: int, k: int) -> Any:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    if kind == "bf16":
        return partial(torch.matmul, a, b)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    return partial(torch._scaled_mm, a.to(torch.float8_e4m3fn), b8, one, one, out_dtype=torch.bfloat16)


def fp8_blockwise_gemms(torch: Any, tokens: tuple[int, ...]) -> dict[str, Any]:
    """The GEMM shapes under Megatron-Core's ``fp8_recipe: blockwise`` (DeepSeek-V3's scaling):
    one scale per 1x128 block of the activations and per 128x128 block of the weights, in the
    layouts cuBLAS (12.9+, SM90) takes: activation scales outer-dim-major, weight scales K-major
    with K/128 a multiple of 4 (shapes where it is not are skipped, not padded). ``check`` is the
    relative error of one small product with random scales against the same product dequantized
    by hand: it shows the scales are read block by block."""

    def scales(m: int, n: int, k: int, fill: Any) -> tuple[Any, Any]:
        scale_a = fill(k // 128, m, device="cuda", dtype=torch.float32).t()  # (m, k/128), stride (1, m)
        scale_b = fill(n // 128, k // 128, device="cuda", dtype=torch.float32).t()  # (k/128, n/128)
        return scale_a, scale_b

    m, n, k = 256, 256, 512
    a8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    scale_a, scale_b = scales(m, n, k, lambda *shape, **kw: torch.rand(*shape, **kw) + 0.5)
    got = torch._scaled_mm(a8, b8, scale_a, scale_b, out_dtype=torch.float32)
    a = a8.float() * scale_a.repeat_interleave(128, dim=1)
    b = b8.float() * scale_b.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    check = float((got - a @ b).norm() / (a @ b).norm())
    out: dict[str, Any] = {"check_relative_error": check, "shapes": []}
    for name, m, n, k in gemm_shapes(tokens):
        if k % 128 or n % 128 or (k // 128) % 4:
            continue
        a8 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        b8 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn).t()
        scale_a, scale_b = scales(m, n, k, torch.ones)
        ms = time_ms(partial(torch._scaled_mm, a8, b8, scale_a, scale_b, out_dtype=torch.bfloat16), torch)
        out["shapes"].append(
            {"name": name, "m": m, "n": n, "k": k, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9}
        )
    return out


def per_expert(parts: Any, weights: Any) -> list[Any]:
    return [parts[e] @ weights[e] for e in range(weights.shape[0])]


def unpermute(x: Any, source: Any, expanded: Any) -> Any:
    return x.new_zeros(x.shape).index_add_(0, source, expanded)


def experts(torch: Any) -> dict[str, Any]:
    rows_out: list[dict[str, Any]] = []
    grouped: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    for name, (h, f) in EXPERTS.items():
        for local in (1, 4, 8, 32):
            for rows in (64, 128, 256, 512, 1024, 2048, 4096):
                w1 = torch.randn(local, h, 2 * f, device="cuda", dtype=torch.bfloat16)
                x = torch.randn(local * rows, h, device="cuda", dtype=torch.bfloat16)
                parts = x.view(local, rows, h)
                ms = time_ms(partial(per_expert, parts, w1), torch)
                flops = 2 * local * rows * h * 2 * f
                rows_out.append(
                    {"name": f"{name} fc1 x{local}", "m": rows, "n": 2 * f, "k": h, "experts": local, "ms": ms,
                     "tflops": flops / ms / 1e9}
                )  # fmt: skip
                if "grouped" not in errors:
                    offs = torch.arange(1, local + 1, device="cuda", dtype=torch.int32) * rows
                    try:
                        ms = time_ms(partial(torch._grouped_mm, x, w1, offs=offs), torch)
                        grouped.append(
                            {"name": f"{name} fc1 x{local}", "m": rows, "n": 2 * f, "k": h, "experts": local,
                             "ms": ms, "tflops": flops / ms / 1e9}
                        )  # fmt: skip
                    except (RuntimeError, TypeError, AttributeError) as exc:
                        errors["grouped"] = str(exc).splitlines()[0]
    return {"per_expert": rows_out, "grouped": grouped, "errors": errors}


def attention(torch: Any, quick: bool) -> list[dict[str, Any]]:
    import torch.nn.functional as F

    out = []
    cases = []  # (seq, heads, groups, qk dim, v dim)
    for seq in (2048, 4096) if quick else (1024, 2048, 4096, 8192, 16384):
        for heads in (8, 16, 32, 64):
            cases += [(seq, heads, heads, 128, 128), (seq, heads, max(heads // 8, 1), 128, 128)]
        cases += [(seq, 16, 16, 192, 128), (seq, 32, 32, 64, 64)]
    for seq, heads, groups, dqk, dv in cases:
        batch = max(1, 16384 // seq)
        q = torch.randn(batch, heads, seq, dqk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(batch, groups, seq, dqk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(batch, groups, seq, dv, device="cuda", dtype=torch.bfloat16, requires_grad=True)

        fwd = partial(F.scaled_dot_product_attention, q, k, v, is_causal=True, enable_gqa=groups != heads)
        fwd_ms = time_ms(fwd, torch)
        o = fwd()
        grad = torch.randn_like(o)
        bwd_ms = time_ms(partial(torch.autograd.grad, o, (q, k, v), grad, retain_graph=True), torch)
        flops = 2 * batch * heads * seq * seq * (dqk + dv) * 0.5  # causal: half the scores
        out.append(
            {"seq": seq, "heads": heads, "groups": groups, "qk_dim": dqk, "v_dim": dv, "batch": batch,
             "fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "fwd_tflops": flops / fwd_ms / 1e9,
             "bwd_tflops": 2.5 * flops / bwd_ms / 1e9}
        )  # fmt: skip
    return out


def memory_efficient_attention(torch: Any) -> list[dict[str, Any]]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = []
    # 16k tokens per call, and one sequence of each length (the small heads x batch of one
    # microbatch on a TP shard)
    cases = [
        (seq, heads, max(1, 16384 // seq))
        for seq in (1024, 2048, 4096, 8192, 16384)
        for heads in (8, 16, 32, 64, 128)
    ]
    cases += [(seq, heads, 1) for seq in (2048, 4096, 8192) for heads in (4, 8, 16, 32)]
    for seq, heads, batch in cases:
        dqk, dv = 192, 128
        q = torch.randn(batch, heads, seq, dqk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(batch, heads, seq, dqk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(batch, heads, seq, dv, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            fwd = partial(F.scaled_dot_product_attention, q, k, v, is_causal=True)
            fwd_ms = time_ms(fwd, torch)
            o = fwd()
            grad = torch.randn_like(o)
            bwd_ms = time_ms(partial(torch.autograd.grad, o, (q, k, v), grad, retain_graph=True), torch)
        flops = 2 * batch * heads * seq * seq * (dqk + dv) * 0.5
        out.append(
            {"seq": seq, "heads": heads, "groups": heads, "qk_dim": dqk, "v_dim": dv, "batch": batch,
             "fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "fwd_tflops": flops / fwd_ms / 1e9,
             "bwd_tflops": 2.5 * flops / bwd_ms / 1e9}
        )  # fmt: skip
        del q, k, v, o, grad
    return out


def swiglu(x: Any) -> Any:
    import torch.nn.functional as F

    half = x.shape[-1] // 2
    return F.silu(x[:, :half]) * x[:, half:]


def bias_dropout_add(x: Any, bias: Any) -> Any:
    import torch.nn.functional as F

    return F.dropout(x + bias, 0.1) + x


def rope_like(x: Any, freqs: Any) -> Any:
    """RoPE's memory traffic: two multiplies by the rotation and a rotated copy."""
    import torch

    return x * freqs + torch.roll(x, 1, dims=-1) * freqs


def elementwise(torch: Any) -> list[dict[str, Any]]:
    import torch.nn.functional as F

    out = []
    for tokens, h in ((4096, 4096), (8192, 8192), (4096, 16384), (1024, 2048)):
        x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.ones(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        nbytes = tokens * h * 2
        y = F.rms_norm(x, (h,), w)
        g = torch.randn_like(y)
        cases = {
            "rmsnorm fwd": partial(F.rms_norm, x, (h,), w),
            "rmsnorm bwd": partial(torch.autograd.grad, y, (x, w), g, retain_graph=True),
            "layernorm fwd": partial(F.layer_norm, x, (h,), w),
            "swiglu fwd": partial(swiglu, x),
            "bias dropout add": partial(bias_dropout_add, x, w),
            "rope": partial(rope_like, x, w),
        }
        for name, fn in cases.items():
            ms = time_ms(fn, torch)
            out.append(
                {
                    "name": name,
                    "tokens": tokens,
                    "hidden": h,
                    "ms": ms,
                    "bytes": nbytes,
                    "gb_per_s": nbytes / ms / 1e6,
                }
            )
    return out


def lora_adapter(x: Any, a: Any, b: Any, base: Any, dropout: float, parts: int) -> Any:
    """A LoRA adapter's compute on one rank, its collectives left out: the base output plus
    B(A(dropout(x))), the scale on the rank-wide bottleneck (Bridge's default). A column
    adapter's A output is split over ``parts`` ranks: concatenated as its all-gather would."""
    import torch
    import torch.nn.functional as F

    bottleneck = F.linear(F.dropout(x, dropout), a)
    if parts > 1:
        bottleneck = torch.cat([bottleneck] * parts, dim=-1)
    return base + F.linear(bottleneck * 2.0, b)


def lora_adapter_step(x: Any, a: Any, b: Any, base: Any, dropout: float, parts: int, grad: Any) -> None:
    lora_adapter(x, a, b, base, dropout, parts).backward(grad)


def lora_adapters(torch: Any) -> list[dict[str, Any]]:
    """LoRA adapters of Llama-3 8B- and 70B-like layers over TP 1-8, forward and backward (the
    gradients of the input, both adapter weights and the base output's): column adapters
    (``linear_qkv``, ``linear_fc1``: A ``[dim/t, in]``, B ``[out/t, dim]``) and row adapters
    (``linear_proj``, ``linear_fc2``: A ``[dim, in/t]``, B ``[out/t, dim]``), rank 16 with and
    without dropout and rank 32 without, at 128 tokens (launch-bound) and 4,096 and 8,192."""
    out = []
    for name in ("llama3-8b", "llama3-70b"):
        h, heads, groups, ffn, kv = GEMM_MODELS[name]
        for tp in (1, 2, 4, 8):
            shapes = {  # target: (in on one rank, out on one rank, column-parallel)
                "linear_qkv": (h, (heads + 2 * max(groups // tp, 1) * tp) * kv // tp, True),
                "linear_proj": (heads * kv // tp, h // tp, False),
                "linear_fc1": (h, 2 * ffn // tp, True),
                "linear_fc2": (ffn // tp, h // tp, False),
            }
            for tokens in (128, 4096, 8192):  # 128: what the launches alone cost
                for dim, dropout in ((16, 0.0), (16, 0.1), (32, 0.0)):
                    for target, (fan_in, fan_out, column) in shapes.items():
                        rank_dim = dim // tp if column else dim
                        kw = dict(device="cuda", dtype=torch.bfloat16, requires_grad=True)
                        x = torch.randn(tokens, fan_in, **kw)
                        a = torch.randn(rank_dim, fan_in, **kw)
                        b = torch.randn(fan_out, dim, **kw)
                        base = torch.randn(tokens, fan_out, **kw)
                        g = torch.randn(tokens, fan_out, device="cuda", dtype=torch.bfloat16)
                        parts = tp if column else 1
                        fwd = time_ms(partial(lora_adapter, x, a, b, base, dropout, parts), torch)
                        both = time_ms(partial(lora_adapter_step, x, a, b, base, dropout, parts, g), torch)
                        out.append(
                            {
                                "name": f"{name} tp{tp} {target}",
                                "tokens": tokens,
                                "in": fan_in,
                                "out": fan_out,
                                "rank_dim": rank_dim,
                                "dim": dim,
                                "dropout": dropout,
                                "fwd_ms": fwd,
                                "bwd_ms": max(both - fwd, 0.0),
                            }
                        )
                        del x, a, b, base, g
    return out


def plain_cross_entropy(logits: Any, target: Any) -> None:
    import torch.nn.functional as F

    F.cross_entropy(logits.float(), target).backward()


def chunked_cross_entropy(logits: Any, target: Any) -> None:
    """What a fused kernel does: the fp32 logits of 1,024 tokens at a time, never all at once."""
    import torch.nn.functional as F

    total = sum(
        F.cross_entropy(c.float(), t, reduction="sum") for c, t in zip(logits.split(1024), target.split(1024))
    )
    total.backward()


def cross_entropy(torch: Any) -> list[dict[str, Any]]:

    out = []
    for tokens in (4096, 8192):
        for vocab in (32768, 128256, 163840):
            logits = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            target = torch.randint(0, vocab, (tokens,), device="cuda")
            plain = time_ms(partial(plain_cross_entropy, logits, target), torch)
            chunked = time_ms(partial(chunked_cross_entropy, logits, target), torch)
            out.append({"tokens": tokens, "vocab": vocab, "plain_ms": plain, "chunked_ms": chunked})
    return out


def route_tokens(x: Any, w: Any, topk: int) -> Any:
    import torch

    return torch.topk(torch.softmax((x @ w).float(), dim=-1), topk, dim=-1)


def router_and_permute(torch: Any) -> list[dict[str, Any]]:
    out = []
    for tokens, h, experts, topk in ((4096, 7168, 256, 8), (4096, 2048, 128, 8), (8192, 4096, 64, 2)):
        x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(h, experts, device="cuda", dtype=torch.bfloat16)

        route = partial(route_tokens, x, w, topk)
        router_ms = time_ms(route, torch)
        _, index = route()
        flat = index.flatten()
        order = torch.argsort(flat)
        source = order // topk
        permute_ms = time_ms(partial(x.index_select, 0, source), torch)
        expanded = x.index_select(0, source)
        unpermute_ms = time_ms(partial(unpermute, x, source, expanded), torch)
        out.append(
            {"tokens": tokens, "hidden": h, "experts": experts, "topk": topk, "router_ms": router_ms,
             "permute_ms": permute_ms, "unpermute_ms": unpermute_ms}
        )  # fmt: skip
    return out


def optimizer(torch: Any) -> list[dict[str, Any]]:
    out = []
    for params in (50_000_000, 200_000_000, 800_000_000):
        chunks = [
            torch.zeros(params // 20, device="cuda", dtype=torch.float32, requires_grad=True)
            for _ in range(20)
        ]
        for c in chunks:
            c.grad = torch.randn_like(c)
        for impl in ("fused", "foreach"):
            opt = torch.optim.AdamW(chunks, lr=1e-4, **{impl: True})
            ms = time_ms(opt.step, torch)
            out.append({"params": params, "impl": impl, "ms": ms, "params_per_s": params / ms * 1e3})
    return out


def pcie(torch: Any) -> list[dict[str, Any]]:
    out = []
    for mib in (1, 16, 256, 1024):
        n = mib << 20
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        h2d = time_ms(partial(dev.copy_, host, non_blocking=True), torch)
        d2h = time_ms(partial(host.copy_, dev, non_blocking=True), torch)
        out.append(
            {
                "bytes": n,
                "h2d_ms": h2d,
                "d2h_ms": d2h,
                "h2d_gb_per_s": n / h2d / 1e6,
                "d2h_gb_per_s": n / d2h / 1e6,
            }
        )
    return out


def cpu_adam(torch: Any) -> list[dict[str, Any]]:
    out = []
    for params in (10_000_000, 100_000_000):
        p = torch.zeros(params, dtype=torch.float32, requires_grad=True)
        p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW([p], lr=1e-4, foreach=True)
        opt.step()
        start = time.perf_counter()
        for _ in range(3):
            opt.step()
        seconds = (time.perf_counter() - start) / 3
        out.append(
            {
                "params": params,
                "threads": torch.get_num_threads(),
                "s": seconds,
                "params_per_s": params / seconds,
            }
        )
    return out


def main() -> None:
    import torch

    argv = sys.argv[1:]
    only = None
    if "--sections" in argv:
        at = argv.index("--sections")
        only = set(argv[at + 1].split(","))
        argv = argv[:at] + argv[at + 2 :]
    args = [a for a in argv if not a.startswith("--")]
    quick = "--quick" in argv
    if len(args) != 1:
        sys.exit(__doc__)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if only:
        with open(args[0], encoding="utf-8") as f:
            result = {**json.load(f), **result}
    sections = {
        "gemm": lambda: gemms(torch, TOKENS_QUICK if quick else TOKENS),
        "gemm_fp8_blockwise": lambda: fp8_blockwise_gemms(torch, TOKENS_QUICK if quick else TOKENS),
        "gemm_small_m": lambda: small_m_gemms(torch),
        "gemm_backward": lambda: backward_gemms(torch, (1024, 4096, 8192)),
        "experts": lambda: experts(torch),
        "attention": lambda: attention(torch, quick),
        "attention_memory_efficient": lambda: memory_efficient_attention(torch),
        "elementwise": lambda: elementwise(torch),
        "cross_entropy": lambda: cross_entropy(torch),
        "router": lambda: router_and_permute(torch),
        "optimizer": lambda: optimizer(torch),
        "pcie": lambda: pcie(torch),
        "cpu_adam": lambda: cpu_adam(torch),
        "lora_adapters": lambda: lora_adapters(torch),
    }
    for name, run in sections.items():
        if only and name not in only:
            continue
        started = time.perf_counter()
        try:
            result[name] = run()
        except (RuntimeError, TypeError, AttributeError) as exc:  # a kernel this torch lacks
            result[name] = {"error": str(exc).splitlines()[0]}
        torch.cuda.empty_cache()
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
        with open(
            args[0], "w", encoding="utf-8"
        ) as f:  # written after each section: a timeout keeps the rest
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
