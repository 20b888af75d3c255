"""Time Megatron-Core's fused SwiGLU (the MLP activation under Transformer Engine's spec) against
the bytes the step model prices it at (``ShapePricer.elementwise``, memtune/perf/layer.py).

    # on the GPU machine, megatron-core on PYTHONPATH
    python3 benchmarks/gpu/activation_bytes.py OUT.json
    # here: compare OUT.json with the step model's price, by the rule below
    python benchmarks/gpu/activation_bytes.py --compare OUT.json

The kernels are megatron-core 0.19.2's ``fusions/fused_bias_swiglu.py``: ``bias_swiglu_impl``
without a bias (a dense MLP's, ``SwiGLUFunction``) and ``weighted_bias_swiglu_impl`` (a MoE
layer's, each row scaled by its router probability, ``WeightedSwiGLUFunction``), compiled by
``torch.compile`` (``megatron.core.jit.jit_fuser`` on torch >= 2.2). The step model prices the
forward at its bytes (reads the fc1 output, 2 x f bf16 a row, writes f) at ``HBM_FRACTION`` of
the GPU's datasheet bandwidth, the backward at twice the forward.

Shapes (rows x f): the dense MLP of Llama 3 8B at TP 1, 2 and 4 (f 14,336 / TP) and of Llama 3
70B at TP 8 (28,672 / 8), 4,096 tokens; the MoE activation of Qwen3-30B-A3B (top-8, f 768) and
of DeepSeek-V3 (top-8, f 2,048) for 4,096 tokens (32,768 rows). Each pass is timed with CUDA
events, ``REPEATS`` after ``WARMUP`` (which includes the compile), the median kept.

The first pass on an H100 (``results/activation-bytes-h100-recompiled.json``) compiled every
shape after the first for dynamic shapes (its TP 2 shape took as long as TP 1's): from then on
each shape is compiled afresh (``torch._dynamo.reset``), the rule unchanged. The next two
passes (``results/activation-bytes-h100-launch-pass*.json``) timed the host's launch work with
the kernels (the events fired on an idle GPU: a 88 MB activation 75 us, 2.3x its bytes' time):
from then on the GPU is kept busy while the timed region is queued (``SLEEP_CYCLES``).

Rule, fixed before the first measurement: the priced forward is within 25% of the measured
median on every shape, and the priced backward (twice the priced forward) within 35% of its
measured median. ``--compare`` prints each shape's ratios and whether the rule holds against the
step model's current price: the first counted passes (``results/activation-bytes-h100-pass*.json``)
failed it for the weighted backward, which since 2e46410 is priced at its measured multiple; a
third H100 (``results/activation-bytes-h100-machine3.json``, measured after both prices were
set) is a check of them.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPEATS = 50
WARMUP = 5
TOKENS = 4096
SHAPES = {
    "llama3-8b tp1": (TOKENS, 14336, "swiglu"),
    "llama3-8b tp2": (TOKENS, 7168, "swiglu"),
    "llama3-8b tp4": (TOKENS, 3584, "swiglu"),
    "llama3-70b tp8": (TOKENS, 3584, "swiglu"),
    "qwen3-30b-a3b experts": (TOKENS * 8, 768, "weighted swiglu"),
    "deepseek-v3 experts": (TOKENS * 8, 2048, "weighted swiglu"),
}
# GPT-OSS's experts (top-4, width 2,880): Megatron-Core's weighted quick-GeGLU with the linear
# half offset by 1 (glu_linear_offset), with and without its clamp at 7
# (activation_func_clamp_value), which weighted_bias_quick_geglu_impl applies in eager ops
# (chunk, two clamps, cat) before its fused kernel: the clamp's price is the difference.
# Each shape also records what its forward keeps for the backward beyond its input and output
# (``kept_bytes``: the clamp's backward keeps the unclamped input, the fused kernel the clamped).
# Their own rule, fixed before they were measured: the clamp's measured extra forward and
# backward (clamped less unclamped) are within 35% of the step model's counted price
# (EXPERT_CLAMP_FWD_RATIO and EXPERT_CLAMP_BWD_RATIO times the priced activation forward), and
# the clamped activation keeps 0.95-1.05x its input's bytes more than the unclamped one.
CLAMPED = {
    "gpt-oss experts": (TOKENS * 4, 2880, "weighted quick-geglu"),
    "gpt-oss experts, clamped": (TOKENS * 4, 2880, "weighted quick-geglu clamped"),
}
FWD_TOLERANCE, BWD_TOLERANCE = 0.25, 0.35
# the GPU spins this many cycles (about a millisecond) before each timed region, so the host has
# queued the region's kernels and its end event before the start event fires: the events time
# the kernels, not the host's launch work (a step's queue keeps the GPU busy the same way)
SLEEP_CYCLES = 2_000_000


def _median_ms(fn) -> float:  # type: ignore[no-untyped-def]
    import torch

    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_shape(rows: int, f: int, kind: str) -> tuple[float, float, int]:
    """Median forward and backward milliseconds of the fused activation ``kind`` on ``rows`` x
    ``2f``, and the bytes its forward keeps for the backward beyond its input and output."""
    import torch
    from megatron.core.fusions.fused_bias_geglu import weighted_bias_quick_geglu_impl
    from megatron.core.fusions.fused_bias_swiglu import bias_swiglu_impl, weighted_bias_swiglu_impl

    # a fresh compile for each shape, as a training run compiles its one shape: after a second
    # shape torch.compile recompiles for dynamic shapes, slower kernels no run of one shape sees
    torch._dynamo.reset()
    x = torch.randn(rows, 2 * f, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    probs = torch.rand(rows, 1, device="cuda", dtype=torch.float32, requires_grad=True)
    inputs = [x] if kind == "swiglu" else [x, probs]

    def forward():  # type: ignore[no-untyped-def]
        if kind == "swiglu":
            return bias_swiglu_impl(x, None)
        if kind == "weighted swiglu":
            return weighted_bias_swiglu_impl(x, None, probs)
        clamp = 7.0 if kind.endswith("clamped") else None
        return weighted_bias_quick_geglu_impl(x, None, probs, False, 1.0, clamp)

    grad = torch.randn_like(forward())
    with torch.no_grad():
        fwd_ms = _median_ms(forward)

    def timed_backward() -> float:
        # a fresh graph each time, its forward outside the timed region; autograd.grad returns
        # the input's gradient without adding it into a .grad
        output = forward()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        torch.autograd.grad(output, inputs, grad)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    for _ in range(WARMUP):
        timed_backward()
    bwd_ms = statistics.median(timed_backward() for _ in range(REPEATS))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    output = forward()
    kept = torch.cuda.memory_allocated() - before - output.numel() * output.element_size()
    return fwd_ms, bwd_ms, kept


def measure(out: Path) -> None:
    import torch

    record: dict[str, object] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "repeats": REPEATS,
    }
    for section, shapes in (("results", SHAPES), ("clamped", CLAMPED)):
        timed = []
        for name, (rows, f, kind) in shapes.items():
            fwd_ms, bwd_ms, kept = time_shape(rows, f, kind)
            timed.append(
                {
                    "shape": name,
                    "rows": rows,
                    "f": f,
                    "kind": kind,
                    "fwd_ms": fwd_ms,
                    "bwd_ms": bwd_ms,
                    "kept_bytes": kept,
                }
            )
            print(name, f"fwd {fwd_ms:.3f} ms, bwd {bwd_ms:.3f} ms", flush=True)
        record[section] = timed
    out.write_text(json.dumps(record, indent=1), encoding="utf-8")


def compare(path: Path) -> int:
    """Each shape's measured over priced forward and backward, and the rule's answer."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from memtune.catalog.gpus import get_gpu
    from memtune.perf import constants as K

    record = json.loads(path.read_text(encoding="utf-8"))
    name = record["gpu"]
    gpu = get_gpu("H200" if "H200" in name else "H100-80GB")
    hbm = gpu.hbm_tbps * 1e12 * K.HBM_FRACTION
    holds = True
    print(f"{name} ({gpu.name}, {gpu.hbm_tbps} TB/s at {K.HBM_FRACTION}), torch {record['torch']}")
    for r in record["results"]:
        # the step model's price: 2 x f read and f written per row, bf16; backward twice, a
        # grouped expert's weighted one WEIGHTED_ACTIVATION_BWD_RATIO times (since 2e46410; the
        # first passes, records without "kind", were checked against twice)
        weighted = r.get("kind", "weighted swiglu" if r.get("weighted") else "swiglu") != "swiglu"
        priced_fwd = 2 * r["rows"] * 3 * r["f"] / hbm * 1e3
        priced_bwd = (K.WEIGHTED_ACTIVATION_BWD_RATIO if weighted else 2) * priced_fwd
        fwd, bwd = r["fwd_ms"] / priced_fwd, r["bwd_ms"] / priced_bwd
        ok = abs(fwd - 1) <= FWD_TOLERANCE and abs(bwd - 1) <= BWD_TOLERANCE
        holds &= ok
        print(
            f"  {r['shape']:24s} fwd {r['fwd_ms']:.3f} ms ({fwd:.2f} of priced), "
            f"bwd {r['bwd_ms']:.3f} ms ({bwd:.2f}){'' if ok else '  outside the rule'}"
        )
    print(
        f"rule (forward within {FWD_TOLERANCE:.0%}, backward within {BWD_TOLERANCE:.0%}): {'holds' if holds else 'fails'}"
    )
    if clamped := {r["kind"]: r for r in record.get("clamped", [])}:
        holds &= _compare_clamp(clamped["weighted quick-geglu"], clamped["weighted quick-geglu clamped"], hbm)
    return 0 if holds else 1


def _compare_clamp(plain: dict, clamp: dict, hbm: float) -> bool:  # type: ignore[type-arg]
    """GPT-OSS's clamp against its counted price and its kept copy, by the clamp's rule."""
    from memtune.perf import constants as K

    priced_fwd = 2 * clamp["rows"] * 3 * clamp["f"] / hbm * 1e3
    fwd = (clamp["fwd_ms"] - plain["fwd_ms"]) / (K.EXPERT_CLAMP_FWD_RATIO * priced_fwd)
    bwd = (clamp["bwd_ms"] - plain["bwd_ms"]) / (K.EXPERT_CLAMP_BWD_RATIO * priced_fwd)
    kept = (clamp["kept_bytes"] - plain["kept_bytes"]) / (2 * clamp["rows"] * 2 * clamp["f"])
    holds = abs(fwd - 1) <= 0.35 and abs(bwd - 1) <= 0.35 and abs(kept - 1) <= 0.05
    print(
        f"GPT-OSS's clamp: extra forward {clamp['fwd_ms'] - plain['fwd_ms']:.3f} ms ({fwd:.2f} of its price), "
        f"extra backward {clamp['bwd_ms'] - plain['bwd_ms']:.3f} ms ({bwd:.2f}), kept {kept:.2f}x the input's "
        f"bytes more than unclamped: rule {'holds' if holds else 'fails'}"
    )
    return holds


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(Path(sys.argv[2])))
    measure(Path(sys.argv[1]))
