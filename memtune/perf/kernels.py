"""Kernel efficiencies from measured tables, interpolated; the calibrated curve where none is.

A table is what ``benchmarks/gpu/kernel_calibration.py`` (or the earlier
``benchmarks/gpu/gemm_calibration.py``) wrote on a GPU: GEMM TFLOP/s by (M, N, K) and flash
attention TFLOP/s by sequence and heads x batch. The bf16 GEMMs of both files are one table
(a shape timed in both takes the mean): the later one times the same layer shapes at 1,024 to
16,384 tokens, so a GEMM's efficiency follows its M where it was measured. The package
carries the tables that were really measured (``memtune/perf/data/``, byte-identical copies of
``benchmarks/gpu/results/``; a test keeps them so), on two GPUs: the H200 (``gemm-h200.json``,
``kernels-h200.json``) and the H100 80GB HBM3 (``gemm-h100.json``, ``kernels-h100.json``, timed
by the same scripts): bf16 GEMMs and causal flash attention (head dim 128), FP8 GEMMs with
tensorwise and with blockwise scaling (``torch._scaled_mm``). A job is priced from its own GPU's
tables where there are some (``tables_of``). A GEMM's efficiency (the fraction of the GPU's bf16,
or FP8, peak it reaches) is interpolated in log2(M, N, K) by inverse distance over the nearest
measured shapes when the shape lies inside the measured range, and otherwise taken from the
half-size curve of ``memtune/perf/constants.py`` (for FP8: as the same fraction of the FP8
peak). Below the tables' smallest M (1,024 rows), where a TP chunk of Transformer Engine's
userbuffer overlap runs, each shape's rate at 256 and 512 rows is its table point at 1,024 rows
times the ratio timed on an H100 (``SMALL_M_FILE``, ``small_m_ratios``). Other GPUs reach the
H200's fraction of their own peak (unmeasured: no table for them); where square bf16 GEMMs were
published for one (the B200's), its bf16 GEMMs reach that fraction scaled by what the published
ones reach against the H200's table (``published_gemm_scale``).
MXFP8 cannot be measured on the H200 (no block-scaled MMA before Blackwell): its GEMMs take
the tensorwise fraction, and predictions that use it say so.

The later file also times the work around the GEMMs in PyTorch's own eager kernels, what
Megatron-Core's local spec runs: RMSNorm/LayerNorm, SwiGLU, bias-dropout-add and RoPE by tensor
size; the unfused cross-entropy (fp32 logits, forward and backward) by tokens x vocabulary; the
MoE router with token permute and unpermute by tokens x top-k x hidden; and Adam (torch's
fused and foreach AdamW) per parameter. Each is read as a time against its element count,
linear between the measured sizes, the smallest size's time below them (a kernel does not
get faster than its launch) and the largest segment's rate above them. The norms, SwiGLU,
bias-dropout-add and RoPE are timed between CUDA events there, which below about 8 M elements
measures the host's launches; where a GPU's calls were also traced (``ELEMENTWISE_TRACES``)
their kernels' own durations replace them.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from memtune.perf import constants as K

# The GPUs with measured tables, by catalog name: the bf16 GEMM and flash attention file, and
# the later file with everything else. Fractions are of the GPU's own catalog (datasheet) peak
# (memtune/catalog/data/gpus.yaml), which is what lets them transfer to other GPUs' peaks.
TABLES = {
    "H200": ("gemm-h200.json", "kernels-h200.json"),
    "H100-80GB": ("gemm-h100.json", "kernels-h100.json"),
}
REFERENCE = "H200"  # whose tables a GPU without its own takes
# GEMMs at 256 and 512 rows beside 1,024, timed on one H100 in two passes (what a TP chunk of
# Transformer Engine's userbuffer overlap runs, below the tables' smallest M): both GEMM tables
# take each shape's ratio to its 1,024-row time, so each keeps its own machine's scale; the
# H200's takes the H100's ratios (the same GH100 die, unmeasured on the H200 itself).
SMALL_M_FILE = "gemm-small-m-h100.json"
SMALL_M_MEASURED_ON = "H100-80GB"
# The eager kernels' own GPU time (``benchmarks/gpu/elementwise_trace.py``: the summed durations
# of each call's kernels in a profiler trace, 0.26-67 M elements, two passes), which replaces
# the later file's event timing of the same calls where a GPU has it. Below about 8 M elements
# the event timing measures the host's launches, not the GPU (docs/plan.md, "The eager
# kernels' own time"); the step model prices the host apart.
ELEMENTWISE_TRACES = {
    "H200": ("elementwise-trace-h200-pass1.json", "elementwise-trace-h200-pass2.json"),
    "H100-80GB": ("elementwise-trace-h100-pass1.json", "elementwise-trace-h100-pass2.json"),
}


def tables_of(gpu: str) -> str:
    """The GPU whose measured tables price ``gpu`` (a catalog name): its own, else the
    reference's, as fractions of ``gpu``'s own peaks."""
    return gpu if gpu in TABLES else REFERENCE


@cache
def published_gemm_scale(gpu: str) -> float | None:
    """What ``gpu``'s published square bf16 GEMMs (``GPU.published_bf16_gemms``) reach as a
    fraction of its peak, against what the H200's table gives at the same sides: the median ratio,
    which scales the reference's GEMM fractions for it; None where nothing is published."""
    from memtune.catalog.gpus import get_gpu

    g = get_gpu(gpu)
    if g.published_bf16_gemms is None:
        return None
    ratios = [
        tflops / g.bf16_tflops / gemm_fraction(REFERENCE, side, side, side)
        for side, tflops in g.published_bf16_gemms.tflops_by_side
    ]
    return statistics.median(ratios)


@cache
def _raw(on: str, later: bool) -> dict[str, Any]:
    return _data(TABLES[on][1 if later else 0])


def _data(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(
        resources.files("memtune.perf").joinpath("data", name).read_text(encoding="utf-8")
    )
    return raw


NEAREST = 4  # measured shapes an interpolation weighs
RANGE_MARGIN_LOG2 = 1.0  # extrapolate at most a factor of 2 beyond the measured shapes


@dataclass(frozen=True)
class GemmTable:
    points: tuple[tuple[float, float, float, float], ...]  # log2 M, log2 N, log2 K, fraction of peak
    lows: tuple[float, float, float]
    highs: tuple[float, float, float]

    def fraction(self, m: float, n: float, k: float) -> float | None:
        """Interpolated fraction of the bf16 peak, or None outside the measured range."""
        q = (math.log2(max(m, 1)), math.log2(max(n, 1)), math.log2(max(k, 1)))
        if any(
            v < lo - RANGE_MARGIN_LOG2 or v > hi + RANGE_MARGIN_LOG2
            for v, lo, hi in zip(q, self.lows, self.highs, strict=True)
        ):
            return None
        ranked = sorted(
            self.points, key=lambda p: (p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2 + (p[2] - q[2]) ** 2
        )
        weights = 0.0
        total = 0.0
        for p in ranked[:NEAREST]:
            dist = math.sqrt((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2 + (p[2] - q[2]) ** 2)
            if dist < 1e-9:
                return p[3]
            weights += 1 / dist
            total += p[3] / dist
        return total / weights


@dataclass(frozen=True)
class AttentionTable:
    """Forward and backward fractions of the bf16 peak at measured points: log2 of the sequence,
    heads x batch and, where the table has more than one, the head dim."""

    points: tuple[tuple[tuple[float, ...], float, float], ...]  # log2 coordinates, fwd, bwd fraction

    def fractions(self, *shape: float) -> tuple[float, float]:
        q = tuple(math.log2(max(v, 1)) for v in shape)

        def dist(p: tuple[float, ...]) -> float:
            return math.sqrt(sum((a - b) ** 2 for a, b in zip(p, q, strict=True)))

        ranked = sorted(self.points, key=lambda p: dist(p[0]))[:NEAREST]
        weights = fwd = bwd = 0.0
        for coords, f, b in ranked:
            far = dist(coords)
            if far < 1e-9:
                return f, b
            weights += 1 / far
            fwd += f / far
            bwd += b / far
        return fwd / weights, bwd / weights


def _attention_table(rows: list[dict[str, Any]], peak: float, head_dim: bool = False) -> AttentionTable:
    def coords(a: dict[str, Any]) -> tuple[float, ...]:
        seq, heads = math.log2(a["seq"]), math.log2(a["heads"] * a["batch"])
        return (seq, heads, math.log2(a["qk_dim"])) if head_dim else (seq, heads)

    return AttentionTable(tuple((coords(a), a["fwd_tflops"] / peak, a["bwd_tflops"] / peak) for a in rows))


@cache
def small_m_ratios(kind: str) -> dict[tuple[int, int, int], float]:
    """(M, N, K) -> a GEMM's rate at M rows (256, 512) over its rate at 1,024 rows of the same N
    and K (``SMALL_M_FILE``, ``kind`` bf16 or fp8_tensorwise): the mean over the passes."""
    raw = _data(SMALL_M_FILE)
    ratios: dict[tuple[int, int, int], list[float]] = {}
    for rows in (one[kind] for one in raw["passes"]):
        full = {(g["n"], g["k"]): g["tflops"] for g in rows if g["m"] == 1024}
        for g in rows:
            if g["m"] < 1024:
                ratios.setdefault((g["m"], g["n"], g["k"]), []).append(g["tflops"] / full[g["n"], g["k"]])
    return {shape: statistics.mean(r) for shape, r in ratios.items()}


def _gemm_table(
    tflops_by_shape: dict[tuple[int, int, int], float], peak: float, small_m: str | None
) -> GemmTable:
    """A GEMM table from measured TFLOP/s by (M, N, K); with ``small_m`` (a kind of
    ``SMALL_M_FILE``) the small-M shapes added at each one's measured ratio to the table's own
    1,024-row point."""
    fractions = {shape: tflops / peak for shape, tflops in tflops_by_shape.items()}
    for (m, n, k), ratio in (small_m_ratios(small_m) if small_m else {}).items():
        if (1024, n, k) in fractions:
            fractions.setdefault((m, n, k), fractions[1024, n, k] * ratio)
    fractions = _rows_never_slow(fractions)
    points = tuple((math.log2(m), math.log2(n), math.log2(k), f) for (m, n, k), f in fractions.items())
    lows = tuple(min(p[i] for p in points) for i in range(3))
    highs = tuple(max(p[i] for p in points) for i in range(3))
    return GemmTable(points, (lows[0], lows[1], lows[2]), (highs[0], highs[1], highs[2]))


def _rows_never_slow(fractions: dict[tuple[int, int, int], float]) -> dict[tuple[int, int, int], float]:
    """From 1,024 rows up, each shape at least the rate of every measured shape of the same N and
    K with fewer rows.

    The tables time each GEMM back to back, which holds the GPU at its power limit: the longer the
    GEMM, the lower the clock it settles at (``benchmarks/gpu/gemm_clock.py``: 1,470 against
    1,725 MHz on the H200, 8-15% of the rate, at 4,096-8,192 rows), so their large-M rows dip
    where a step's GEMMs, between memory-bound kernels, do not: micro-batches of more rows at
    fixed tokens measured faster (issue 37). Below 1,024 rows (the userbuffer chunks' measured
    ratios) a tile's waves set the rate and the measurement stands."""
    best: dict[tuple[int, int], float] = {}
    out = dict(fractions)
    for (m, n, k), f in sorted(fractions.items()):
        if m >= 1024:
            best[n, k] = max(f, best.get((n, k), 0.0))
            out[m, n, k] = best[n, k]
    return out


@cache
def _tables(on: str) -> tuple[GemmTable, AttentionTable]:
    from memtune.catalog.gpus import get_gpu

    raw, later = _raw(on, later=False), _raw(on, later=True)
    peak = get_gpu(on).bf16_tflops
    by_shape: dict[tuple[int, int, int], list[float]] = {}
    for g in [*raw["gemm"], *later["gemm"]["bf16"]]:
        by_shape.setdefault((g["m"], g["n"], g["k"]), []).append(g["tflops"])
    mean = {shape: sum(t) / len(t) for shape, t in by_shape.items()}
    return _gemm_table(mean, peak, "bf16"), _attention_table(raw["attention"], peak)


@cache
def gemm_fraction(on: str, m: int, n: int, k: int) -> float:
    """Fraction of the bf16 peak a bf16 GEMM of this shape reaches on the GPU ``on`` (one of
    ``TABLES``): its measured table, else the curve."""
    measured = _tables(on)[0].fraction(m, n, k)
    if measured is not None:
        return measured
    h = K.GEMM_HALF_SIZE
    return K.GEMM_PEAK_FRACTION / (1 + h / max(m, 1) + h / max(n, 1) + h / max(k, 1))


@cache
def attention_fractions(on: str, seq: int, heads_x_batch: int) -> tuple[float, float]:
    """Forward and backward fractions of the bf16 peak of PyTorch's causal flash attention
    kernel (``SDPBackend.FLASH_ATTENTION``, FlashAttention-2; head dim 128): ``gemm-*.json``."""
    return _tables(on)[1].fractions(seq, heads_x_batch)


@cache
def _cudnn_table(on: str) -> AttentionTable:
    from memtune.catalog.gpus import get_gpu

    return _attention_table(_raw(on, later=True)["attention"], get_gpu(on).bf16_tflops, head_dim=True)


@cache
def cudnn_attention_fractions(on: str, seq: int, heads_x_batch: int, head_dim: int) -> tuple[float, float]:
    """Forward and backward fractions of the bf16 peak of cuDNN's fused causal attention, what
    Transformer Engine's ``FusedAttention`` runs: ``kernels-h200.json``'s attention section, timed
    through PyTorch SDPA's default backend on the H200 (torch 2.11), which there is cuDNN's
    (1.7-2x the flash kernel's rate at the same shapes); head dims 64, 128 and 192."""
    return _cudnn_table(on).fractions(seq, heads_x_batch, head_dim)


@cache
def _fp8_table(on: str, scaling: str) -> GemmTable:
    from memtune.catalog.gpus import get_gpu

    raw = _raw(on, later=True)
    peak = get_gpu(on).fp8_tflops
    assert peak is not None, "the GPU the FP8 table was measured on has an FP8 peak"
    if scaling == "tensorwise":
        rows, small_m = raw["gemm"]["fp8_tensorwise"], "fp8_tensorwise"
    else:  # blockwise scaling: its own table, no small-M rows measured for it
        rows, small_m = raw["gemm_fp8_blockwise"]["shapes"], None
    return _gemm_table({(g["m"], g["n"], g["k"]): g["tflops"] for g in rows}, peak, small_m)


@cache
def fp8_gemm_fraction(on: str, m: int, n: int, k: int, scaling: str = "tensorwise") -> float:
    """Fraction of the FP8 peak an FP8 GEMM of this shape reaches with ``scaling``
    (``Derived.fp8_gemm_scaling``): its measured table, else the curve."""
    measured = _fp8_table(on, scaling).fraction(m, n, k)
    if measured is not None:
        return measured
    h = K.GEMM_HALF_SIZE
    return K.GEMM_PEAK_FRACTION / (1 + h / max(m, 1) + h / max(n, 1) + h / max(k, 1))


@dataclass(frozen=True)
class SizeCurve:
    """Seconds against element count, from measured (elements, seconds) points."""

    points: tuple[tuple[float, float], ...]  # sorted by elements, one per size

    @classmethod
    def of(cls, samples: list[tuple[float, float]]) -> SizeCurve:
        by_size: dict[float, list[float]] = {}
        for elements, seconds in samples:
            by_size.setdefault(elements, []).append(seconds)
        return cls(tuple(sorted((e, sum(t) / len(t)) for e, t in by_size.items())))

    def seconds(self, elements: float) -> float:
        points = self.points
        if elements <= points[0][0]:
            return points[0][1]
        for (e0, t0), (e1, t1) in itertools.pairwise(points):
            if elements <= e1:
                return t0 + (t1 - t0) * (elements - e0) / (e1 - e0)
        (e0, t0), (e1, t1) = points[-2], points[-1]
        return t1 + (t1 - t0) / (e1 - e0) * (elements - e1)


@dataclass(frozen=True)
class EagerKernels:
    """The measured eager kernels of one GPU's later file (module docstring), on that GPU."""

    elementwise: dict[str, SizeCurve]  # by the table's name: "rmsnorm fwd", "rope", ...
    cross_entropy: SizeCurve  # forward + backward over tokens x vocabulary logits
    route_and_permute: SizeCurve  # router, permute and unpermute over tokens x top-k x hidden
    adam_params_per_s: dict[str, float]  # "fused" / "foreach": torch AdamW


@cache
def eager_kernels(on: str) -> EagerKernels:
    raw = _raw(on, later=True)
    samples: dict[str, list[tuple[float, float]]] = {}
    for e in raw["elementwise"] if on not in ELEMENTWISE_TRACES else []:
        samples.setdefault(e["name"], []).append((e["tokens"] * e["hidden"], e["ms"] / 1e3))
    for name in ELEMENTWISE_TRACES.get(on, ()):
        for e in _data(name)["elementwise"]:
            samples.setdefault(e["name"], []).append((e["elements"], e["kernel_ms"] / 1e3))
    routing = [
        (r["tokens"] * r["topk"] * r["hidden"], (r["router_ms"] + r["permute_ms"] + r["unpermute_ms"]) / 1e3)
        for r in raw["router"]
    ]
    adam: dict[str, list[float]] = {}
    for o in raw["optimizer"]:
        adam.setdefault(o["impl"], []).append(o["params_per_s"])
    return EagerKernels(
        elementwise={name: SizeCurve.of(points) for name, points in samples.items()},
        cross_entropy=SizeCurve.of(
            [(c["tokens"] * c["vocab"], c["plain_ms"] / 1e3) for c in raw["cross_entropy"]]
        ),
        route_and_permute=SizeCurve.of(routing),
        adam_params_per_s={impl: min(rates) for impl, rates in adam.items()},
    )


@dataclass(frozen=True)
class AdapterCost:
    """A LoRA adapter's work on one GPU's table (``lora_adapters``: Llama-3 8B- and 70B-like
    layers over TP 1-8, timed alone): its launches' floor, the rate its forward moves its bytes
    (the input read, LoRA-B's output written and added to the base output: ``rows x (in + 2
    out)`` bf16 elements), and what the input's dropout adds."""

    floor_s: float  # the median forward at 128 tokens: launches alone
    bytes_per_s: float  # least squares through the origin over the forwards past twice the floor
    dropout_factor: float  # the median forward with dropout 0.1 over without, at 8,192 tokens

    def seconds(self, rows: float, elements_per_row: float, dropout: bool = False) -> float:
        moved = max(self.floor_s, rows * elements_per_row * 2 / self.bytes_per_s)
        return moved * self.dropout_factor if dropout else moved


@cache
def lora_adapter_cost(on: str) -> AdapterCost:
    rows = _raw(on, later=True)["lora_adapters"]
    plain = [r for r in rows if r["dim"] == 16 and r["dropout"] == 0.0]
    floor = statistics.median(r["fwd_ms"] for r in plain if r["tokens"] == 128) / 1e3
    points = [
        (r["tokens"] * (r["in"] + 2 * r["out"]) * 2, r["fwd_ms"] / 1e3)
        for r in plain
        if r["tokens"] > 128 and r["fwd_ms"] / 1e3 > 2 * floor
    ]
    seconds_per_byte = sum(b * t for b, t in points) / sum(b * b for b, _ in points)
    longest = {r["name"]: r["fwd_ms"] for r in plain if r["tokens"] == 8192}
    dropout = statistics.median(
        r["fwd_ms"] / longest[r["name"]] for r in rows if r["dropout"] > 0 and r["tokens"] == 8192
    )
    return AdapterCost(floor, 1 / seconds_per_byte, dropout)


@cache
def _memory_efficient_table(on: str) -> AttentionTable:
    from memtune.catalog.gpus import get_gpu

    return _attention_table(_raw(on, later=True)["attention_memory_efficient"], get_gpu(on).bf16_tflops)


@cache
def memory_efficient_attention_fractions(on: str, seq: int, heads_x_batch: int) -> tuple[float, float]:
    """Forward and backward fractions of the bf16 peak of PyTorch's memory-efficient causal
    attention at multi-latent attention's head dims (q/k 192, v 128)."""
    return _memory_efficient_table(on).fractions(seq, heads_x_batch)


@cache
def _expert_tables(on: str) -> dict[str, GemmTable]:
    from memtune.catalog.gpus import get_gpu

    raw = _raw(on, later=True)
    peak = get_gpu(on).bf16_tflops
    tables = {}
    for kind in ("per_expert", "grouped"):
        by_shape: dict[tuple[float, float, float], list[float]] = {}
        for g in raw["experts"][kind]:
            if g["experts"] > 1:  # a layer's local experts, not one alone
                key = (math.log2(g["m"]), math.log2(g["n"]), math.log2(g["k"]))
                by_shape.setdefault(key, []).append(g["tflops"] / peak)
        points = tuple((*key, sum(v) / len(v)) for key, v in by_shape.items())
        lows = tuple(min(p[i] for p in points) for i in range(3))
        highs = tuple(max(p[i] for p in points) for i in range(3))
        tables[kind] = GemmTable(points, (lows[0], lows[1], lows[2]), (highs[0], highs[1], highs[2]))
    return tables


@cache
def expert_gemm_fraction(on: str, m: int, n: int, k: int, sequential: bool) -> float | None:
    """Fraction of the bf16 peak a routed expert's GEMM of ``m`` rows reaches among a layer's
    local experts: one ``torch.matmul`` per expert after another (SequentialMLP), or one
    ``torch._grouped_mm`` over all (grouped GEMM); None outside the measured shapes."""
    return _expert_tables(on)["per_expert" if sequential else "grouped"].fraction(m, n, k)
