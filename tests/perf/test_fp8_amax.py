"""FP8 current scaling's amax all-reduces over TP (``Derived.fp8_amax_reduced_over_tp``,
``ShapePricer.amax_reductions``): which recipes and layers have them, and their price, computed
here by hand from NCCL's tuner constants."""

from __future__ import annotations

import pytest

from memtune.catalog.gpus import get_gpu
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived
from memtune.perf import constants as K
from memtune.perf.layer import ShapePricer
from memtune.plan.query import Query, base_job

FP8_SP = ["model.fp8=hybrid", "model.sequence_parallel=true", "train.micro_batch_size=1"]


def derived(*changes: str, model: str = "llama3-70b") -> Derived:
    base = base_job(Query(model, 32, "H100-80GB", 8, 4096, 32, "pretrain"))
    return gate(with_changes(base, [Change.parse(c) for c in (*FP8_SP, *changes)])).derived


def tp_passes(d: Derived, is_moe: bool = False) -> tuple[float, float]:
    price = ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP).layer(is_moe)
    return price.tp_fwd, price.tp_bwd


@pytest.mark.parametrize("recipe", ["delayed", "blockwise", "mxfp8"])
def test_only_current_scaling_reduces_per_gemm(recipe: str) -> None:
    assert derived(
        "model.tensor_model_parallel_size=8", "model.fp8_recipe=tensorwise"
    ).fp8_amax_reduced_over_tp
    assert not derived(
        "model.tensor_model_parallel_size=8", f"model.fp8_recipe={recipe}"
    ).fp8_amax_reduced_over_tp


def test_without_sequence_parallelism_nothing_is_gathered_in_fp8() -> None:
    d = derived(
        "model.tensor_model_parallel_size=8", "model.fp8_recipe=tensorwise", "model.sequence_parallel=false"
    )
    assert not d.fp8_amax_reduced_over_tp


@pytest.mark.parametrize("tp, latency_us", [(8, 15.0), (4, 10.2)])
def test_a_dense_layer_pays_two_reductions_each_way(tp: int, latency_us: float) -> None:
    # NCCL's ring LL all-reduce of 4 bytes: base 6.6 us and 0.6 us per NVLink step, 2 (TP - 1)
    # steps (6.6 + 14 x 0.6 = 15.0 at TP 8, 6.6 + 6 x 0.6 = 10.2 at TP 4); qkv's input and fc1's
    # forward, proj's and fc2's output gradients backward. Delayed scaling prices the same GEMMs
    # and collectives otherwise (the bytes themselves add a few picoseconds).
    layout = f"model.tensor_model_parallel_size={tp}"
    current = tp_passes(derived(layout, "model.fp8_recipe=tensorwise"))
    delayed = tp_passes(derived(layout, "model.fp8_recipe=delayed"))
    per_pass = 2 * latency_us * 1e-6
    assert current[0] - delayed[0] == pytest.approx(per_pass, rel=1e-3)
    assert current[1] - delayed[1] == pytest.approx(per_pass, rel=1e-3)


def test_mla_attention_and_routed_experts_are_left_out() -> None:
    # DeepSeek-V2-Lite's MoE layers: MLA's projections and the routed experts add none; its
    # shared experts are a plain column- and row-parallel pair and add one reduction each way
    layout = ("model.tensor_model_parallel_size=2", "model.expert_model_parallel_size=8")
    current = tp_passes(
        derived(*layout, "model.fp8_recipe=tensorwise", model="deepseek-v2-lite"), is_moe=True
    )
    delayed = tp_passes(derived(*layout, "model.fp8_recipe=delayed", model="deepseek-v2-lite"), is_moe=True)
    one = 7.8e-6  # 6.6 + 2 x 0.6 us at TP 2
    assert current[0] - delayed[0] == pytest.approx(one, rel=1e-3)
    assert current[1] - delayed[1] == pytest.approx(one, rel=1e-3)
