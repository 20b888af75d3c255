"""memtune.peft.LoRA on two CPU processes (Gloo), TP = 2 with sequence parallelism.

One spawn runs every scenario (baseline vs re-gather, fp32 and bf16, main_grad and .grad,
eligibility, logging, adapter weights) and writes what it saw; the tests below assert on it.
"""

from __future__ import annotations

import logging
import pickle
import tempfile
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from memtune.peft import LoRA  # noqa: E402
from memtune.peft import model as lm  # noqa: E402

S, B, H, F, LAYERS, DIM = 8, 2, 16, 32, 2, 4


def _build(lora: LoRA, dtype: Any, fusion: bool, group: Any, seed: int = 0) -> Any:
    from tests.peft.standins import Stack, StandInConfig

    torch.manual_seed(seed)
    model = Stack(LAYERS, H, F, group, True, StandInConfig(gradient_accumulation_fusion=fusion), dtype)
    lora.apply(model)
    rank = dist.get_rank()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".adapter." in name:
                # Both variants get identical adapters; B is made non-zero so LoRA-A gets gradients.
                g = torch.Generator().manual_seed(hash((name, rank)) % 2**31)
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32).to(dtype) * 0.3)
                if fusion:
                    p.main_grad = torch.zeros(p.shape, dtype=torch.float32)
    return model


def _saved_bytes(model: Any, x: Any) -> tuple[int, Any]:
    """Run forward; return the bytes of distinct storages autograd keeps, and the output."""
    storages: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    return sum(storages.values()), out


def _run(
    regather: bool,
    dtype: Any,
    fusion: bool,
    scale_position: str = "bottleneck",
    alpha: int = 8,
    a2a: bool = False,
) -> dict[str, Any]:
    lora = LoRA(
        dim=DIM,
        alpha=alpha,
        target_modules=lm.COLUMN_TARGETS + lm.ROW_TARGETS,
        sequence_parallel_input_regather=regather,
        scale_position=scale_position,
        a2a_experimental=a2a,
    )
    model = _build(lora, dtype, fusion, dist.group.WORLD)
    rank = dist.get_rank()
    seen: dict[str, Any] = {"outputs": [], "input_grads": [], "main_grads": [], "saved": []}
    adapters = {n: p for n, p in model.named_parameters() if p.requires_grad}
    for mb in range(2):
        g = torch.Generator().manual_seed(100 + mb)
        full = torch.randn(S, B, H, generator=g).to(dtype)
        x = full.chunk(2, dim=0)[rank].clone().requires_grad_(True)
        saved, out = _saved_bytes(model, x)
        out.float().square().mean().backward()
        seen["saved"].append(saved)
        seen["outputs"].append(out.detach().float())
        seen["input_grads"].append(x.grad.float())
        seen["main_grads"].append({n: p.main_grad.clone() for n, p in adapters.items()} if fusion else {})
    seen["grads"] = {n: (p.grad.float() if p.grad is not None else None) for n, p in adapters.items()}
    seen["base_trainable"] = [
        n for n, p in model.named_parameters() if p.requires_grad and ".adapter." not in n
    ]
    seen["report"] = lora.report(model)
    return seen


def _eligibility() -> dict[str, str | None]:
    from memtune.peft.modules import LoRALinear
    from tests.peft.standins import ColumnParallelStandIn, StandInConfig

    rank = dist.get_rank()
    solo = [dist.new_group([r]) for r in range(2)][rank]
    world = dist.group.WORLD
    lora = LoRA(dim=DIM, alpha=8, sequence_parallel_input_regather=True)

    def reason(
        path: str,
        group: Any = world,
        sp: bool = True,
        config: Any = None,
        setup: Any = None,
        training: bool | None = True,
    ) -> str | None:
        root = torch.nn.Module()
        base = ColumnParallelStandIn(H, F, group, sp, config or StandInConfig(), torch.float32)
        parent = root
        parts = path.split(".")
        for part in parts[:-1]:
            child = torch.nn.Module()
            setattr(parent, part, child)
            parent = child
        setattr(parent, parts[-1], base)
        lora.apply(root)
        wrapped = root.get_submodule(path)
        assert isinstance(wrapped, LoRALinear)
        if setup:
            setup(wrapped.adapter)
        if training is None:
            with torch.no_grad():
                return wrapped.adapter.regather_reason()
        return wrapped.adapter.regather_reason(training=training)

    fc1, qkv = "decoder.layers.0.mlp.linear_fc1", "decoder.layers.0.self_attention.linear_qkv"
    selective_mlp = StandInConfig(recompute_granularity="selective", recompute_modules=["mlp"])
    return {
        "eligible": reason(fc1),
        "tp1": reason(fc1, group=solo),
        "sp_off": reason(fc1, sp=False),
        "a_frozen": reason(fc1, setup=lambda a: a.linear_in.weight.requires_grad_(False)),
        "row": reason("decoder.layers.0.mlp.linear_fc2"),
        "expert": reason("decoder.layers.0.mlp.experts.local_experts.0.linear_fc1"),
        "shared_expert": reason("decoder.layers.0.mlp.shared_experts.linear_fc1"),
        "activation": reason(fc1, setup=lambda a: setattr(a, "activation", torch.nn.SiLU())),
        "cuda_graphs": reason(fc1, config=StandInConfig(cuda_graph_impl="local")),
        "cpu_offload": reason(fc1, config=StandInConfig(cpu_offloading=True)),
        "full_recompute": reason(fc1, config=StandInConfig(recompute_granularity="full")),
        "mlp_recompute_fc1": reason(fc1, config=selective_mlp),
        "mlp_recompute_qkv": reason(qkv, config=selective_mlp),
        "no_grad": reason(fc1, training=None),
    }


def _logging_and_weights() -> dict[str, Any]:
    from tests.peft.standins import Stack, StandInConfig

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("memtune.peft")
    logger.addHandler(Keep(level=logging.INFO))
    logger.setLevel(logging.INFO)
    lora = LoRA(dim=DIM, alpha=8, target_modules=("linear_fc1",), sequence_parallel_input_regather=True)
    torch.manual_seed(0)
    model = lora.apply(
        Stack(1, H, F, dist.group.WORLD, True, StandInConfig(cuda_graph_impl="local"), torch.float32)
    )
    x = torch.randn(S // 2, B, H)
    for _ in range(3):
        model(x).sum().backward()

    # Adapter weights: save this rank's shards, load them into a differently seeded model;
    # load whole (gathered) tensors too.
    lora2 = LoRA(dim=DIM, alpha=8)
    a = _build(lora2, torch.float32, False, dist.group.WORLD, seed=1)
    b = lora2.apply(Stack(LAYERS, H, F, dist.group.WORLD, True, StandInConfig(), torch.float32))
    saved = lora2.adapter_state_dict(a)
    lora2.load_adapter_state_dict(b, saved)
    same_local = all(torch.equal(v, lora2.adapter_state_dict(b)[k]) for k, v in saved.items())
    whole = {}
    for name, t in saved.items():
        axis = (
            1
            if name.endswith("linear_in.weight") and (".linear_proj." in name or ".linear_fc2." in name)
            else 0
        )
        parts = [torch.empty_like(t) for _ in range(2)]
        dist.all_gather(parts, t.contiguous())
        whole[name] = torch.cat(parts, dim=axis)
    c = lora2.apply(Stack(LAYERS, H, F, dist.group.WORLD, True, StandInConfig(), torch.float32))
    lora2.load_adapter_state_dict(c, whole)
    same_whole = all(torch.equal(v, lora2.adapter_state_dict(c)[k]) for k, v in saved.items())
    shapes = {k: tuple(v.shape) for k, v in whole.items()}
    return {
        "records": records,
        "same_local": same_local,
        "same_whole": same_whole,
        "keys": sorted(saved),
        "whole_shapes": shapes,
    }


def _explicit_comm() -> dict[str, bool]:
    """Routed-expert linears (``explicit_expert_comm``): whole input, partial input gradients and
    row outputs. The adapters' contributions, summed over ranks, must equal the whole-matrix LoRA."""
    from tests.peft.standins import ColumnParallelStandIn, RowParallelStandIn, StandInConfig

    world, rank, t = dist.group.WORLD, dist.get_rank(), 2
    root = torch.nn.Module()
    root.mlp = torch.nn.Module()
    root.mlp.experts = torch.nn.Module()
    fc1 = ColumnParallelStandIn(H, F, world, True, StandInConfig(), torch.float64)
    fc2 = RowParallelStandIn(F, H, world, True, StandInConfig(), torch.float64)
    for linear in (fc1, fc2):
        linear.explicit_expert_comm = True
    root.mlp.experts.linear_fc1, root.mlp.experts.linear_fc2 = fc1, fc2
    lora = LoRA(dim=DIM, alpha=8)
    lora.apply(root)
    torch.manual_seed(7)  # same on both ranks: the dispatcher hands every ETP rank the same tokens
    x = torch.randn(S, H, dtype=torch.float64)
    h = torch.randn(S, F, dtype=torch.float64)
    adapters = {
        n: m.adapter for n, m in (("fc1", root.mlp.experts.linear_fc1), ("fc2", root.mlp.experts.linear_fc2))
    }
    with torch.no_grad():
        for a in adapters.values():
            a.linear_out.weight.normal_()
    whole = {}
    for name, a in adapters.items():
        parts = []
        for w, axis in ((a.linear_in.weight, 0 if name == "fc1" else 1), (a.linear_out.weight, 0)):
            gathered = [torch.empty_like(w) for _ in range(t)]
            dist.all_gather(gathered, w.detach().contiguous())
            parts.append(torch.cat(gathered, dim=axis))
        whole[name] = parts
    ok = {}
    # Column: this rank's output slice of the whole LoRA; input gradients sum to the whole one.
    xc = x.clone().requires_grad_(True)
    out = adapters["fc1"](xc)
    (a_w, b_w) = whole["fc1"]
    ref_x = x.clone().requires_grad_(True)
    ref = 2.0 * ref_x @ a_w.t() @ b_w.t()
    ok["column output"] = torch.allclose(out, ref.chunk(t, dim=-1)[rank])
    out.sum().backward()
    ref.chunk(t, dim=-1)[rank].sum().backward()
    grad = xc.grad.clone()
    dist.all_reduce(grad)
    ref_grad = ref_x.grad.clone()
    dist.all_reduce(ref_grad)
    ok["column input gradient"] = torch.allclose(grad, ref_grad)
    # Row: input split along features; outputs are partial sums of the whole LoRA.
    hr = h.chunk(t, dim=-1)[rank].clone().requires_grad_(True)
    out = adapters["fc2"](hr)
    total = out.detach().clone()
    dist.all_reduce(total)
    (a_w, b_w) = whole["fc2"]
    ok["row output"] = torch.allclose(total, 2.0 * h @ a_w.t() @ b_w.t())
    return ok


def _worker(rank: int, init: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for dtype in (torch.float32, torch.bfloat16):
        for fusion in (True, False):
            key = f"{str(dtype).split('.')[-1]}-{'main_grad' if fusion else 'grad'}"
            results[key] = {"baseline": _run(False, dtype, fusion), "regather": _run(True, dtype, fusion)}
    # The scale on the bottleneck against the scale on the output (Bridge before its PR #5906).
    for dtype in (torch.float32, torch.bfloat16):
        for regather in (False, True):
            key = f"scale-{str(dtype).split('.')[-1]}-{'regather' if regather else 'default'}"
            results[key] = {p: _run(regather, dtype, False, p) for p in ("output", "bottleneck")}
    results["scale-float32-alpha6"] = {
        p: _run(True, torch.float32, False, p, alpha=6) for p in ("output", "bottleneck")
    }
    # The row adapters' all-to-all path against their gather-then-scatter; re-gather requested,
    # which the all-to-all path turns off for the column adapters.
    results["a2a"] = {
        "gather": _run(False, torch.float32, True),
        "a2a": _run(True, torch.float32, True, a2a=True),
    }
    results["eligibility"] = _eligibility()
    results["misc"] = _logging_and_weights()
    results["explicit"] = _explicit_comm()
    with open(Path(out_dir) / f"rank{rank}.pkl", "wb") as f:
        pickle.dump(results, f)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        # torch.multiprocessing with fork: the children reuse this process's imports (a spawned
        # child re-imports torch, seconds on a 2-core CI machine); no CUDA is involved.
        mp.start_processes(_worker, args=(f"file://{tmp}/rendezvous", tmp), nprocs=2, start_method="fork")
        return [pickle.loads((Path(tmp) / f"rank{r}.pkl").read_bytes()) for r in range(2)]


def _pairs(runs: list[dict[str, Any]], key: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(r[key]["baseline"], r[key]["regather"]) for r in runs]


@pytest.mark.parametrize("key", ["float32-main_grad", "float32-grad"])
def test_regather_is_exact_in_fp32(runs, key):
    for base, regather in _pairs(runs, key):
        for name in ("outputs", "input_grads"):
            for a, b in zip(base[name], regather[name]):
                assert torch.equal(a, b), name
        for a, b in zip(base["main_grads"], regather["main_grads"]):
            assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
        for n, g in base["grads"].items():
            assert (g is None and regather["grads"][n] is None) or torch.equal(g, regather["grads"][n]), n


@pytest.mark.parametrize("key", ["bfloat16-main_grad", "bfloat16-grad"])
def test_regather_matches_within_bf16_rounding(runs, key):
    close = {"rtol": 1.6e-2, "atol": 1e-5}
    for base, regather in _pairs(runs, key):
        for name in ("outputs", "input_grads"):
            for a, b in zip(base[name], regather[name]):
                torch.testing.assert_close(a, b, **close)
        for a, b in zip(base["main_grads"], regather["main_grads"]):
            for n in a:
                torch.testing.assert_close(a[n], b[n], **close)


def test_second_microbatch_changes_main_grad(runs):
    for r in runs:
        first, second = r["float32-main_grad"]["regather"]["main_grads"]
        lora_a = [n for n in first if n.endswith("linear_fc1.adapter.linear_in.weight")]
        assert lora_a and all(
            first[n].abs().sum() > 0 and not torch.equal(first[n], second[n]) for n in lora_a
        )


def test_main_grad_takes_the_gradient_instead_of_grad(runs):
    for r in runs:
        assert all(g is None for g in r["float32-main_grad"]["regather"]["grads"].values())
        assert all(g is not None for g in r["float32-grad"]["regather"]["grads"].values())


def test_base_weights_are_frozen(runs):
    assert all(r["float32-grad"]["baseline"]["base_trainable"] == [] for r in runs)


def test_regather_keeps_the_whole_gathered_input_less(runs):
    # Per layer, the two column adapters (qkv, fc1) no longer keep their S x B x H gathered input.
    # The stand-in base linears keep their shard (Megatron's trainable linears do), so here the
    # adapters' shard adds nothing: the saving is the whole tensor. (Megatron's frozen linears
    # keep no input; there the shard is the adapter's own: memtune/peft/model.py.)
    for r in runs:
        base, regather = r["float32-grad"]["baseline"]["saved"], r["float32-grad"]["regather"]["saved"]
        assert [b - g for b, g in zip(base, regather)] == [LAYERS * 2 * S * B * H * 4] * 2


def test_report_lists_every_adapter_with_reason(runs):
    report = runs[0]["float32-grad"]["regather"]["report"]
    assert [(a.path.split(".")[-1], a.regathers, a.reason) for a in report[:4]] == [
        ("linear_qkv", True, None),
        ("linear_proj", False, lm.ROW_PARALLEL),
        ("linear_fc1", True, None),
        ("linear_fc2", False, lm.ROW_PARALLEL),
    ]
    assert len(report) == 4 * LAYERS


EXPECTED = {
    "eligible": None,
    "tp1": lm.TP_IS_ONE,
    "sp_off": lm.SP_OFF,
    "a_frozen": lm.A_FROZEN,
    "row": lm.ROW_PARALLEL,
    "expert": lm.EXPERT,
    "shared_expert": None,
    "activation": lm.NOT_IDENTITY,
    "cuda_graphs": lm.CUDA_GRAPHS,
    "cpu_offload": lm.CPU_OFFLOAD,
    "full_recompute": lm.FULL_RECOMPUTE,
    "mlp_recompute_fc1": lm.MLP_RECOMPUTE,
    "mlp_recompute_qkv": None,
    "no_grad": lm.NO_GRAD,
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_eligibility_rule(runs, case):
    assert runs[0]["eligibility"][case] == EXPECTED[case]


def test_fallback_is_logged_once_at_info(runs):
    records = runs[0]["misc"]["records"]
    assert records == [
        "LoRA re-gather requested for decoder.layers.0.mlp.linear_fc1 but not used: CUDA graphs are enabled"
    ]


def test_adapter_weights_round_trip_as_shards_and_whole(runs):
    misc = runs[1]["misc"]
    assert misc["same_local"] and misc["same_whole"]
    assert misc["keys"][:2] == [
        "decoder.layers.0.mlp.linear_fc1.adapter.linear_in.weight",
        "decoder.layers.0.mlp.linear_fc1.adapter.linear_out.weight",
    ]
    # Whole tensors have Megatron-Bridge's global shapes: A [dim, in], B [out, dim].
    assert misc["whole_shapes"]["decoder.layers.0.mlp.linear_fc1.adapter.linear_in.weight"] == (DIM, H)
    assert misc["whole_shapes"]["decoder.layers.0.mlp.linear_fc2.adapter.linear_in.weight"] == (DIM, F)
    assert misc["whole_shapes"]["decoder.layers.0.mlp.linear_fc2.adapter.linear_out.weight"] == (H, DIM)


def test_expert_adapters_leave_tp_communication_to_the_dispatcher(runs):
    for r in runs:
        assert r["explicit"] == {"column output": True, "column input gradient": True, "row output": True}


def _same(a: dict[str, Any], b: dict[str, Any], close: Any) -> None:
    for name in ("outputs", "input_grads"):
        for x, y in zip(a[name], b[name]):
            close(x, y)
    for n, g in a["grads"].items():
        close(g, b["grads"][n])


@pytest.mark.parametrize("key", ["scale-float32-default", "scale-float32-regather"])
def test_the_scale_on_the_bottleneck_is_exact_in_fp32(runs, key):
    # alpha/dim = 2: a power of two, so W(2a) and 2W(a) round identically.
    for r in runs:
        _same(
            r[key]["output"],
            r[key]["bottleneck"],
            lambda x, y: torch.testing.assert_close(x, y, rtol=0, atol=0),
        )


@pytest.mark.parametrize("key", ["scale-bfloat16-default", "scale-bfloat16-regather", "scale-float32-alpha6"])
def test_the_scale_on_the_bottleneck_matches_within_rounding(runs, key):
    # Relative to each tensor's norm: the adapters' random weights differ from run to run.
    bound = 2e-2 if "bfloat16" in key else 1e-5

    def close(x: Any, y: Any) -> None:
        assert float((x - y).norm()) <= bound * float(y.norm())

    for r in runs:
        _same(r[key]["output"], r[key]["bottleneck"], close)


def test_the_scale_position_does_not_change_what_autograd_keeps(runs):
    for r in runs:
        assert (
            r["scale-float32-regather"]["output"]["saved"]
            == r["scale-float32-regather"]["bottleneck"]["saved"]
        )


def test_an_unknown_scale_position_is_refused():
    from memtune.errors import InputError

    with pytest.raises(
        InputError, match="LoRA scale_position: must be one of bottleneck, output, got 'middle'"
    ):
        LoRA(scale_position="middle")


def test_the_row_adapters_all_to_all_path_gives_the_same_numbers(runs):
    # The all-to-all only moves numbers: outputs, input gradients and every adapter's gradient
    # come out bit for bit as on the gather-then-scatter path, in every microbatch.
    for r in runs:
        _same(
            r["a2a"]["gather"], r["a2a"]["a2a"], lambda x, y: torch.testing.assert_close(x, y, rtol=0, atol=0)
        )
        for a, b in zip(r["a2a"]["gather"]["main_grads"], r["a2a"]["a2a"]["main_grads"]):
            assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_the_all_to_all_path_turns_re_gather_off(runs):
    for r in runs:
        reasons = {a.target: a.reason for a in r["a2a"]["a2a"]["report"]}
        assert reasons["linear_qkv"] == reasons["linear_fc1"] == lm.A2A
        assert reasons["linear_proj"] == reasons["linear_fc2"] == lm.ROW_PARALLEL
