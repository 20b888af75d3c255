"""Time bf16 GEMMs of tensor-parallel shard shapes and flash attention on one GPU, to calibrate
the throughput model's efficiency curve (memtune/perf/constants.py).

Runs on the GPU machine with torch only (no memtune import):

    python3 benchmarks/gpu/gemm_calibration.py OUT.json

then, here, fit the curve to what came back:

    python benchmarks/gpu/gemm_calibration.py --fit OUT.json

Shapes: the forward GEMMs of one transformer layer (QKV, output projection, MLP up and down) of
Llama-3 8B/70B/405B-, Qwen3-32B- and GPT-3-175B-like models split over TP 1, 2, 4 and 8 at 4,096
and 8,192 tokens per micro-batch, and routed-expert GEMMs with few rows; attention: causal
``scaled_dot_product_attention`` (flash backend) forward and forward+backward at head dim 128.
Each is timed with CUDA events over enough repetitions to last about 50 ms, after a warm-up.
"""

from __future__ import annotations

import json
import math
import sys

MODELS = {  # hidden, heads, query groups, ffn (gated)
    "llama3-8b": (4096, 32, 8, 14336),
    "llama3-70b": (8192, 64, 8, 28672),
    "llama3.1-405b": (16384, 128, 8, 53248),
    "qwen3-32b": (5120, 64, 8, 25600),
    "gpt3-175b": (12288, 96, 96, 49152),
}
EXPERT_SHAPES = [(rows, 2 * 768, 2048) for rows in (128, 512, 2048)] + [
    (rows, 2048, 768) for rows in (128, 512, 2048)
]


def gemm_shapes() -> list[tuple[str, int, int, int]]:
    shapes = []
    for name, (h, heads, groups, ffn) in MODELS.items():
        kv = h // heads
        for tp in (1, 2, 4, 8):
            for tokens in (4096, 8192):
                local_groups = max(groups // tp, 1)
                shapes += [
                    (f"{name} tp{tp} qkv", tokens, (heads // tp + 2 * local_groups) * kv, h),
                    (f"{name} tp{tp} proj", tokens, h, heads // tp * kv),
                    (f"{name} tp{tp} fc1", tokens, 2 * ffn // tp, h),
                    (f"{name} tp{tp} fc2", tokens, h, ffn // tp),
                ]
    shapes += [(f"expert rows{m}", m, n, k) for m, n, k in EXPERT_SHAPES]
    return shapes


def time_ms(fn, torch, budget_ms: float = 50.0, max_reps: int = 200) -> float:
    """Milliseconds one call of ``fn`` takes on the GPU: CUDA events, after three warm-up calls,
    over enough repetitions (3 to ``max_reps``) to last about ``budget_ms``."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    reps = max(3, min(max_reps, math.ceil(budget_ms / once)))
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def measure(out_path: str) -> int:
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    dev = torch.device("cuda")
    results = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "gemm": [],
        "attention": [],
    }
    for name, m, n, k in gemm_shapes():
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        ms = time_ms(lambda a=a, b=b: torch.matmul(a, b), torch)
        results["gemm"].append(
            {"name": name, "m": m, "n": n, "k": k, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9}
        )
        del a, b
    for seq in (2048, 4096, 8192):
        for heads in (8, 16, 32):
            batch = max(1, 16384 // seq)
            q, k, v = (
                torch.randn(batch, heads, seq, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
                for _ in range(3)
            )
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                fwd = time_ms(
                    lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True), torch
                )
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                grad = torch.randn_like(out)

                def both(q=q, k=k, v=v, grad=grad) -> None:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    o.backward(grad)

                total = time_ms(both, torch)
            flops = 4 * batch * heads * seq * seq * 128 * 0.5
            results["attention"].append(
                {
                    "seq": seq,
                    "heads": heads,
                    "batch": batch,
                    "fwd_ms": fwd,
                    "bwd_ms": total - fwd,
                    "fwd_tflops": flops / fwd / 1e9,
                    "bwd_tflops": 2.5 * flops / (total - fwd) / 1e9,
                }
            )
            del q, k, v, out, grad
    with open(out_path, "w") as fh:
        json.dump(results, fh, indent=1)
    print(f"{len(results['gemm'])} GEMMs, {len(results['attention'])} attention shapes -> {out_path}")
    return 0


def fit(path: str, peak_tflops: float = 989.5) -> int:
    """Least-squares fit of (peak fraction, half size) to the measured GEMM times, in log space."""
    with open(path) as fh:
        data = json.load(fh)
    rows = data["gemm"]
    best = None
    for half in [h / 2 for h in range(2, 600)]:
        # For a fixed half size the best fraction has a closed form in log space.
        logs = [
            math.log(r["tflops"] / peak_tflops) + math.log(1 + half / r["m"] + half / r["n"] + half / r["k"])
            for r in rows
        ]
        fraction = math.exp(sum(logs) / len(logs))
        err = sum((x - math.log(fraction)) ** 2 for x in logs)
        if best is None or err < best[0]:
            best = (err, fraction, half)
    assert best is not None
    _, fraction, half = best
    worst = max(
        rows,
        key=lambda r: abs(
            math.log(
                r["tflops"] / (peak_tflops * fraction / (1 + half / r["m"] + half / r["n"] + half / r["k"]))
            )
        ),
    )
    errors = [
        r["tflops"] / (peak_tflops * fraction / (1 + half / r["m"] + half / r["n"] + half / r["k"])) - 1
        for r in rows
    ]
    print(f"GEMM_PEAK_FRACTION = {fraction:.3f}, GEMM_HALF_SIZE = {half:.1f} on {data['device']}")
    print(
        f"  mean |error| {sum(abs(e) for e in errors) / len(errors):.1%}, worst {worst['name']} {max(errors, key=abs):+.1%}"
    )
    att = data["attention"]
    print(
        "  attention fwd fraction (mean over shapes): "
        f"{sum(a['fwd_tflops'] for a in att) / len(att) / peak_tflops:.3f}, bwd: "
        f"{sum(a['bwd_tflops'] for a in att) / len(att) / peak_tflops:.3f}"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fit":
        raise SystemExit(fit(sys.argv[2]))
    if len(sys.argv) == 2:
        raise SystemExit(measure(sys.argv[1]))
    print(__doc__)
    raise SystemExit(2)
