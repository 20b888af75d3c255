"""Time the step model's compute relations on one GPU: the ``crel-`` runs, the unfused
attention's kernels and the flash attention's by head dim.

    # here: the plans of the crel- family (benchmarks/measured/matrix.py, _compute_relations),
    # or of a check of a frozen model (_compute_relations_check, ..._check2, ..._check3)
    python benchmarks/gpu/compute_relations.py plan PLANS.jsonl [--family cchk|cchk2|cchk3]
    # on the GPU machine, megatron-core on PYTHONPATH
    python3 benchmarks/gpu/compute_relations.py run PLANS.jsonl RESULTS.jsonl \\
        [--kernels UNFUSED.json] [--flash FLASH.json] --deadline 470

``run`` imports torch and megatron-core once and forks one child per measurement before
anything touches CUDA (about 17 s of imports saved per run; environment-facts.md), so each
run still has its own process, allocator and CUDA context, and runs alone on the GPU. A run
is ``memtune/measure/runner.py``'s ``measure`` of its plan, as ``memtune measure`` does it:
each iteration records forward+backward and the optimizer step apart. The last iteration of a
tune run is traced with PyTorch's profiler (CUDA activity only) and dropped from the timed
iterations: its kernels' summed device time by name (``profile``) is what the step model's
relations are fitted against; holdout runs are not traced. Runs not started before the
deadline are recorded as skipped.

``--kernels`` first times Megatron-Core's unfused ``DotProductAttention`` (megatron-core
0.19.2, ``transformer/dot_product_attention.py``: the scores by ``baddbmm``, the torch softmax
path of ``FusedScaleMaskSoftmax`` in fp32 with the causal mask, probabilities times values by
``bmm``; GQA's ``repeat_interleave`` of k and v) forward and forward+backward by sequence,
heads x batch and head dim, in bf16.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

ITERATIONS = 6  # the first warms up (Adam's state is made at the first step); a tune run's last is traced
COMPONENT_FAMILIES = ("hostblk", "hostlora", "hostlora2", "hostlora3", "hostnmb", "hosttp", "hostvar")
REPEATED_ITERATIONS = 21  # a host-bound component run: the median of 20 steady iterations
PRIORITY = ("unfused", "mtp", "vpp", "seq", "mbs", "opt", "rc", "prec", "flash", "vocab")
TOP_KERNELS = 200
HOST_PROFILE_TOP = 150  # functions kept from a host profile, by own time


# --- plan (here) ------------------------------------------------------------------------


def make_plans(out: str, family: str) -> int:
    from matrix import (
        _compute_relations,
        _compute_relations_check,
        _compute_relations_check2,
        _compute_relations_check3,
        _compute_relations_check4,
        _compute_relations_check5,
        _compute_relations_check6,
        _compute_relations_check7,
        ci_attention_shape,
        host_by_block,
        host_by_lora,
        host_by_lora_repeat,
        host_by_microbatches,
        host_by_tensor_parallel,
        host_lora_shares,
        host_profile_by_feature,
        host_profile_by_tensor_parallel,
        host_variance,
        lora_compute_check,
        offload_exposure,
        offload_exposure_check,
        small_m_kernels,
    )
    from run_matrix import make_plans as plan_entries

    if family == "crel":
        ids = [e.id for e in _compute_relations()]
        ids.sort(key=lambda i: next(n for n, p in enumerate(PRIORITY) if i.startswith(f"crel-{p}")))
    else:  # a check of a frozen model, or the host-by-block component runs: whole, in matrix order
        families = {
            "cchk": _compute_relations_check,
            "cchk2": _compute_relations_check2,
            "cchk3": _compute_relations_check3,
            "cchk4": _compute_relations_check4,
            "cchk5": _compute_relations_check5,
            "cchk6": _compute_relations_check6,
            "cchk7": _compute_relations_check7,
            "hostblk": host_by_block,
            "aoffm": offload_exposure,
            "aoffm2": offload_exposure_check,
            "lorachk": lora_compute_check,
            "hostlora": host_by_lora,
            "hostlora2": host_by_lora_repeat,
            "hostlora3": host_lora_shares,
            "hostnmb": host_by_microbatches,
            "hosttp": host_by_tensor_parallel,
            "hostvar": host_variance,
            "smallm": small_m_kernels,
            "ciattn": ci_attention_shape,
            "hostprof": host_profile_by_tensor_parallel,
            "hostfeat": host_profile_by_feature,
        }
        ids = [e.id for e in families[family]()]
    namespace = argparse.Namespace(
        out=out,
        resume=False,
        save=False,
        smoke=False,
        rest=False,
        ids=",".join(ids),
        shard=None,
        iters=REPEATED_ITERATIONS
        if family in ("hostlora2", "hostlora3", "hostnmb", "hosttp", "hostvar", "ciattn")
        else ITERATIONS,
    )
    plan_entries(namespace)
    # make_plans keeps matrix order; the device runs them in priority order under its deadline
    lines = Path(out).read_text().splitlines()
    order = {run_id: n for n, run_id in enumerate(ids)}
    lines.sort(key=lambda line: order[json.loads(line)["id"]])
    if family in COMPONENT_FAMILIES:  # component timings: holdout, so no iteration is profiled
        lines = [json.dumps({**json.loads(line), "split": "holdout"}) for line in lines]
    if family in ("smallm", "ciattn", "hostprof", "hostfeat"):  # read whole: every run traced
        lines = [json.dumps({**json.loads(line), "split": "tune"}) for line in lines]
    Path(out).write_text("\n".join(lines) + "\n")
    return 0


# --- run (GPU machine) ------------------------------------------------------------------


def _in_child(fn: Any, timeout_s: float, *args: Any) -> dict[str, Any]:
    """Run ``fn(*args)`` in a forked child (its own CUDA context); its JSON result, or an error."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        path = handle.name
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            result = fn(*args)
            Path(path).write_text(json.dumps(result))
            code = 0
        except BaseException as exc:  # the parent must learn why, whatever failed
            import traceback

            traceback.print_exc()
            Path(path).write_text(json.dumps({"error": {"kind": "failed", "message": repr(exc)[-400:]}}))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return {"error": {"kind": "timeout", "message": f"stopped after {timeout_s:.0f} s"}}
        time.sleep(0.05)
    text = Path(path).read_text() if Path(path).exists() else ""
    Path(path).unlink(missing_ok=True)
    if not text:
        return {"error": {"kind": "failed", "message": f"child exited with status {status} and no result"}}
    result: dict[str, Any] = json.loads(text)
    return result


def _kernel_summary(prof: Any, wall_s: float) -> dict[str, Any]:
    kernels = []
    for event in prof.key_averages():
        us = getattr(event, "self_device_time_total", None)
        if us is None:
            us = getattr(event, "self_cuda_time_total", 0.0)
        if us > 0:
            kernels.append((event.key, event.count, us))
    kernels.sort(key=lambda k: -k[2])
    return {
        "wall_s": round(wall_s, 5),
        "device_s": round(sum(k[2] for k in kernels) / 1e6, 5),
        "kernels": [{"name": n[:160], "count": c, "us": round(us, 1)} for n, c, us in kernels[:TOP_KERNELS]],
        "kernels_left_out_us": round(sum(k[2] for k in kernels[TOP_KERNELS:]), 1),
    }


def _measure(item: dict[str, Any]) -> dict[str, Any]:
    """One run in this (child) process: runner.measure, its last iteration traced if tune;
    bound to ``item["pin_cpus"]`` where given (its CPU threads as many)."""
    for key, value in item["plan"]["env"].items():
        os.environ[key] = value
    import megatron.core.pipeline_parallel as pipeline
    import torch

    if item.get("pin_cpus"):
        os.sched_setaffinity(0, set(item["pin_cpus"]))
        torch.set_num_threads(len(item["pin_cpus"]))

    from memtune.measure import runner

    traced: dict[str, Any] = {}
    plan = item["plan"]
    trace = item["split"] == "tune" or item.get("trace", False)
    original = pipeline.get_forward_backward_func

    def forward_backward_func() -> Any:
        inner = original()
        calls = [0]

        def timed(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if not trace or calls[0] != plan["iterations"]:
                return inner(*args, **kwargs)
            if item.get("host_profile"):
                out, profiled = _host_profiled(torch, inner, args, kwargs)
                traced.update(host_profile=profiled)
                return out
            from torch.profiler import ProfilerActivity, profile

            torch.cuda.synchronize()
            waits = _SyncWaits(torch.cuda)
            with profile(activities=[ProfilerActivity.CUDA]) as prof, waits:
                tick = time.perf_counter()
                out = inner(*args, **kwargs)
                torch.cuda.synchronize()
                wall = time.perf_counter() - tick
            traced.update(
                _kernel_summary(prof, wall), host_syncs=waits.count, host_sync_wait_s=round(waits.seconds, 5)
            )
            return out

        return timed

    pipeline.get_forward_backward_func = forward_backward_func
    try:
        runner._require_environment(plan)
        result = runner.measure(plan)
    except runner.Refusal as exc:
        return {"error": {"kind": exc.kind, "message": str(exc)}}
    except Exception as exc:
        kind = "oom" if "out of memory" in str(exc).lower() else "failed"
        return {"error": {"kind": kind, "message": f"{type(exc).__name__}: {str(exc)[-300:]}"}}
    if traced:
        result["measured"]["iterations"] = result["measured"]["iterations"][:-1]
        result["measured"]["profile"] = traced
    if item.get("host_probe"):
        result["measured"]["host_probe"] = _host_probe(torch)
    if item.get("pin_cpus"):
        result["environment"]["pin_cpus"] = item["pin_cpus"]
    return result


def _host_profiled(torch: Any, inner: Any, args: Any, kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """One forward+backward under Python's ``cProfile`` instead of the kernel trace: its output,
    and its wall time and the functions with the most own (host) time, each with its calls;
    under the profiler's own overhead, so shares between functions, not seconds, are what it
    tells."""
    import cProfile
    import pstats

    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    tick = time.perf_counter()
    profiler.enable()
    out = inner(*args, **kwargs)
    torch.cuda.synchronize()
    profiler.disable()
    wall = time.perf_counter() - tick
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (cc, calls, own, cumulative, callers)
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])
    return out, {
        "wall_s": round(wall, 5),
        "own_s": round(sum(v[2] for _, v in rows), 5),
        "functions": [
            {
                "where": f"{Path(f).name}:{line}:{name}",
                "path": f[-120:],
                "calls": v[1],
                "own_s": round(v[2], 6),
            }
            for (f, line, name), v in rows[:HOST_PROFILE_TOP]
        ],
    }


def _host_probe(torch: Any) -> dict[str, float]:
    """The host's speed right after a run, in the run's process: microseconds per launch of a
    one-element in-place add (the dispatcher and the driver's launch path; nothing waits for the
    GPU) and per forward and backward of a tiny ``nn.Linear`` (modules and autograd: a layer's
    host side without its kernels' time), each the median of five rounds."""
    import statistics

    x = torch.zeros(1, device="cuda")
    linear = torch.nn.Linear(64, 64, device="cuda")
    inputs = torch.randn(8, 64, device="cuda", requires_grad=True)

    def per_call_us(step: Any, calls: int) -> float:
        rounds = []
        for _ in range(5):
            torch.cuda.synchronize()
            tick = time.perf_counter()
            for _ in range(calls):
                step()
            rounds.append((time.perf_counter() - tick) / calls * 1e6)
        torch.cuda.synchronize()
        return round(statistics.median(rounds), 3)

    return {
        "launch_us": per_call_us(lambda: x.add_(1.0), 5000),
        "linear_fwd_bwd_us": per_call_us(lambda: linear(inputs).sum().backward(), 500),
    }


class _SyncWaits:
    """Counts the ``torch.cuda.synchronize`` calls of a traced iteration (Megatron-Core's batched
    P2P makes one after every exchange; the last is the one that ends the iteration) and the
    time the host waits in them: the iteration's wall time less this is the host's own work."""

    def __init__(self, cuda: Any) -> None:
        self.cuda, self.count, self.seconds = cuda, 0, 0.0

    def __enter__(self) -> None:
        self.original = self.cuda.synchronize

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            tick = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.count += 1
                self.seconds += time.perf_counter() - tick

        self.cuda.synchronize = synchronize

    def __exit__(self, *exc: object) -> None:
        self.cuda.synchronize = self.original


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _median_ms(fn: Any, repeats: int = 5) -> float:
    """CUDA-event milliseconds of ``fn``, the median of ``repeats`` after two warm-up calls."""
    import torch

    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def _flash_attention(seq_batch_heads_dims: list[tuple[int, int, int, int]]) -> dict[str, Any]:
    """PyTorch's flash kernel (``SDPBackend.FLASH_ATTENTION``, causal, bf16, ``[b, heads, s,
    d]``), forward and forward+backward by sequence, batch, heads and head dim: what
    ``memtune/measure/sdpa_attention.py`` runs for ``attention_backend: flash`` without
    Transformer Engine."""
    import torch

    torch.cuda.set_device(0)
    rows = []
    for shape in seq_batch_heads_dims:
        rows.append(_flash_shape(*shape))
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "flash_attention": rows}


def _flash_shape(seq: int, batch: int, heads: int, dim: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (
        torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fwd = _median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        both = _median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad))
    flops = 2 * batch * heads * seq * seq * dim  # causal: half of the two matmuls' 4 b h s^2 d
    return {
        "seq": seq,
        "batch": batch,
        "heads": heads,
        "head_dim": dim,
        "fwd_ms": round(fwd, 4),
        "bwd_ms": round(both - fwd, 4),
        "fwd_tflops": round(flops / fwd / 1e9, 1),
        "bwd_tflops": round(2.5 * flops / (both - fwd) / 1e9, 1),
    }


FLASH_SHAPES = [
    (seq, max(1, 16384 // seq), heads, dim)
    for dim in (64, 128, 256)
    for seq in (1024, 2048, 4096, 8192, 16384)
    for heads in (8, 16, 32)
]


def _unfused_attention(seq_heads_dims: list[tuple[int, int, int]]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig
    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.cuda.set_device(0)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1, create_gloo_process_groups=False)
    model_parallel_cuda_manual_seed(1234)

    def one_shape(seq: int, heads: int, dim: int) -> dict[str, Any]:
        groups = max(1, heads // 4)
        config = TransformerConfig(
            num_layers=1,
            hidden_size=heads * dim,
            num_attention_heads=heads,
            num_query_groups=groups,
            kv_channels=dim,
            bf16=True,
            params_dtype=torch.bfloat16,
            attention_dropout=0.0,
            masked_softmax_fusion=False,
        )
        attention = DotProductAttention(
            config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self"
        ).cuda()
        q, k, v = (
            torch.randn(seq, 1, h, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for h in (heads, groups, groups)
        )
        grad = torch.randn(seq, 1, heads * dim, device="cuda", dtype=torch.bfloat16)
        fwd = _median_ms(lambda: attention(q, k, v, None))
        both = _median_ms(lambda: attention(q, k, v, None).backward(grad))
        shape = {"seq": seq, "heads": heads, "groups": groups, "batch": 1, "head_dim": dim}
        return {**shape, "fwd_ms": round(fwd, 4), "bwd_ms": round(both - fwd, 4)}

    rows = []
    for seq, heads, dim in seq_heads_dims:
        try:
            rows.append(one_shape(seq, heads, dim))
        except torch.OutOfMemoryError:
            rows.append({"seq": seq, "heads": heads, "batch": 1, "head_dim": dim, "error": "oom"})
        torch.cuda.empty_cache()
    # which kernel PyTorch's SDPA picks by default on this GPU, against flash and cuDNN forced
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = []
    for seq, heads in ((2048, 32), (4096, 32), (8192, 16)):
        q, k, v = (
            torch.randn(1, heads, seq, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)
        )
        grad = torch.randn(1, heads, seq, 128, device="cuda", dtype=torch.bfloat16)
        for name, chosen in (
            ("default", None),
            ("flash", SDPBackend.FLASH_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ):
            try:
                with sdpa_kernel(chosen) if chosen is not None else _nothing():
                    fwd = _median_ms(
                        lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    )
                    both = _median_ms(
                        lambda q=q, k=k, v=v, g=grad: F.scaled_dot_product_attention(
                            q, k, v, is_causal=True
                        ).backward(g)
                    )
                backends.append({"seq": seq, "heads": heads, "batch": 1, "head_dim": 128, "backend": name,
                                 "fwd_ms": round(fwd, 4), "bwd_ms": round(both - fwd, 4)})  # fmt: skip
            except RuntimeError as exc:
                backends.append({"seq": seq, "heads": heads, "backend": name, "error": str(exc)[:200]})
    return {
        "sdpa_backends": backends,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "module": "megatron.core.transformer.dot_product_attention.DotProductAttention (torch softmax, fp32)",
        "unfused_attention": rows,
    }


UNFUSED_SHAPES = [
    (seq, heads, dim)
    for dim in (64, 128)
    for seq in (1024, 2048, 4096, 8192)
    for heads in (8, 16, 32, 64)
    if heads * seq * seq <= 2**31
]


def run(args: argparse.Namespace) -> int:
    from run_matrix import _record

    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    started = time.monotonic()
    import torch  # the imports every child would repeat
    from megatron.core.distributed import DistributedDataParallel  # noqa: F401
    from megatron.core.models.gpt import GPTModel  # noqa: F401
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec  # noqa: F401
    from megatron.core.optimizer import get_megatron_optimizer  # noqa: F401
    from megatron.core.pipeline_parallel import get_forward_backward_func  # noqa: F401
    from megatron.core.transformer.dot_product_attention import DotProductAttention  # noqa: F401

    from memtune.measure import runner, sdpa_attention  # noqa: F401

    assert not torch.cuda.is_initialized(), "CUDA must not be touched before the children fork"
    print(f"imports {time.monotonic() - started:.1f} s", flush=True)
    for out_path, timer, shapes, key in (
        (args.kernels, _unfused_attention, UNFUSED_SHAPES, "unfused_attention"),
        (args.flash, _flash_attention, FLASH_SHAPES, "flash_attention"),
    ):
        if out_path:
            result = _in_child(timer, 120, shapes)
            Path(out_path).write_text(json.dumps(result, indent=1))
            timed = len(result.get(key, []))
            print(
                f"[{time.monotonic() - started:5.0f}s] {key}: {timed} shapes {result.get('error', '')}",
                flush=True,
            )
    items = [json.loads(line) for line in Path(args.plans).read_text().splitlines() if line.strip()]
    pinned = [int(c) for c in args.pin_cpus.split(",")] if args.pin_cpus else None
    for item in items:
        item["host_probe"] = args.host_probe
        item["host_profile"] = args.host_profile
        item["pin_cpus"] = pinned
    with open(args.results, "a") as out:
        for n, item in enumerate(items, 1):
            left = args.deadline - (time.monotonic() - started)
            if left < args.reserve:
                result = {"error": {"kind": "skipped", "message": "not started before the deadline"}}
            else:
                tick = time.monotonic()
                result = _in_child(_measure, min(args.timeout, left - 5), item)
                status = result.get("error", {}).get("message") or "ok"
                print(
                    f"[{time.monotonic() - started:5.0f}s] {n}/{len(items)} {item['id']} "
                    f"{time.monotonic() - tick:.1f} s: {status}",
                    flush=True,
                )
            record = _record(item, result)  # run_matrix.py's record of a run
            out.write(json.dumps(record) + "\n")
            out.flush()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("plan")
    p.add_argument("out")
    p.add_argument(
        "--family",
        choices=(
            "crel",
            "cchk",
            "cchk2",
            "cchk3",
            "cchk4",
            "cchk5",
            "cchk6",
            "cchk7",
            "smallm",
            "ciattn",
            "hostprof",
            "hostfeat",
            "aoffm",
            "aoffm2",
            "lorachk",
            *COMPONENT_FAMILIES,
        ),
        default="crel",
        help="crel- runs or a check of a frozen model",
    )
    r = sub.add_parser("run")
    r.add_argument("plans")
    r.add_argument("results")
    r.add_argument("--kernels", help="time the unfused attention's kernels first, into this JSON file")
    r.add_argument("--flash", help="time PyTorch's flash attention by head dim first, into this JSON file")
    r.add_argument(
        "--deadline", type=float, default=470.0, help="seconds after start; later runs are skipped"
    )
    r.add_argument("--reserve", type=float, default=20.0, help="start no run with fewer seconds left")
    r.add_argument(
        "--host-probe", action="store_true", help="time the host's launch speed after each run (_host_probe)"
    )
    r.add_argument("--timeout", type=float, default=90.0, help="seconds one run may take")
    r.add_argument(
        "--host-profile",
        action="store_true",
        help="profile a traced iteration's host side with cProfile instead of tracing its kernels",
    )
    r.add_argument("--pin-cpus", help="bind each run's process to these cores, e.g. 2,3")
    args = parser.parse_args()
    return make_plans(args.out, args.family) if args.step == "plan" else run(args)


if __name__ == "__main__":
    raise SystemExit(main())
