"""The GEMMs an FP8 job runs unquantized (``ShapePricer.unquantized_gemm``): Megatron-Core's
output layer (its own ``ColumnParallelLinear``, not a Transformer Engine module) and the MoE
router's gating linear (a torch matmul) sit outside Transformer Engine's FP8 autocast, so they
run in bf16 and quantize nothing."""

from __future__ import annotations

import pytest

from memtune.catalog.gpus import get_gpu
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived
from memtune.perf import constants as K
from memtune.perf.kernels import gemm_fraction
from memtune.perf.layer import ShapePricer
from memtune.plan.query import Query, base_job

H100 = get_gpu("H100-80GB")


def pricer(model: str, gpus: int, *changes: str) -> ShapePricer:
    base = base_job(Query(model, gpus, "H100-80GB", 8, 4096, gpus, "pretrain"))
    d: Derived = gate(with_changes(base, [Change.parse(c) for c in changes])).derived
    return ShapePricer(d, H100, K.MEGATRON_LM_LOOP)


TP4 = ("model.tensor_model_parallel_size=4", "model.sequence_parallel=true", "train.micro_batch_size=1")


def test_the_output_layer_of_an_fp8_job_is_a_bf16_gemm() -> None:
    fp8 = pricer("llama3-70b", 32, *TP4, "model.fp8=hybrid", "model.fp8_recipe=tensorwise")
    bf16 = pricer("llama3-70b", 32, *TP4)
    # the output layer, its norm and the loss cost the same with FP8 on or off
    assert fp8.output_and_loss() == bf16.output_and_loss()
    # by hand: 4,096 tokens x 128,256 / 4 padded vocabulary x 8,192, 2 FLOPs each, at its bf16
    # table's fraction of the H100's bf16 peak
    m, n, k = 4096, fp8.d.padded_vocab_size / 4, 8192
    by_hand = (
        2 * m * n * k / (H100.bf16_flops * gemm_fraction(fp8.tables, m, round(n), k) * fp8.bf16_gemm_scale)
    )
    assert fp8.unquantized_gemm(m, n, k) == pytest.approx(by_hand, rel=1e-12)
    # and it is not what the FP8 path would price (faster kernels, plus the input's cast)
    assert fp8.gemm(m, n, k) < 0.8 * by_hand


def test_the_router_of_an_fp8_moe_job_is_a_bf16_gemm() -> None:
    changes = ("model.expert_model_parallel_size=8", "train.micro_batch_size=1")
    fp8 = pricer("qwen3-30b-a3b", 8, *changes, "model.fp8=hybrid", "model.fp8_recipe=tensorwise")
    m = fp8.d.model
    assert (m.num_moe_experts, m.moe_router_topk, m.moe_ffn_hidden_size, m.hidden_size) == (128, 8, 768, 2048)
    assert m.moe_shared_expert_intermediate_size is None and fp8.tokens_res == 4096
    # by hand: 4,096 tokens x top-8 spread over 128 experts, 16 of them local at EP 8, each
    # 2,048 rows through its gated fc1 (2 x 768 wide) and its fc2; the gating linear on all
    # 4,096 tokens, 128 wide, in bf16
    router = fp8.unquantized_gemm(4096, 128, 2048)
    experts = fp8.expert_gemm(2048, 2 * 768, 2048, 16) + fp8.expert_gemm(2048, 2048, 768, 16)
    assert fp8.mlp(True)[0] == pytest.approx(router + experts, rel=1e-12)
    # which is not the FP8 path's price of the same GEMM (its kernel and casts)
    assert fp8.gemm(4096, 128, 2048) != pytest.approx(router, rel=0.05)
