"""Transformer Engine's FP8 casts of a GEMM's operands (``Derived.fp8_cast_bytes``, priced in
``ShapePricer.gemm``), counted by hand from TransformerEngine d0067d0: the bf16 read (2 bytes),
the FP8 copy (1), a second copy for the backward's other layout (1: MXFP8 and blockwise always,
delayed and current scaling only before Blackwell), current scaling's amax pass (2), and the
fused norm's savings for ``linear_qkv``'s and ``linear_fc1``'s inputs; under sequence parallelism
the cast of a gathered operand on each rank's shard."""

from __future__ import annotations

import pytest

from memtune.catalog.gpus import get_gpu
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived
from memtune.perf import constants as K
from memtune.perf.collectives import Group, Op, collective
from memtune.perf.kernels import fp8_gemm_fraction
from memtune.perf.layer import ShapePricer
from memtune.plan.query import Query, base_job


def derived(recipe: str, gpu: str) -> Derived:
    base = base_job(Query("llama3-8b", 8, gpu, 8, 4096, 32, "pretrain"))
    changes = ["model.fp8=hybrid", f"model.fp8_recipe={recipe}"]
    return gate(with_changes(base, [Change.parse(c) for c in changes])).derived


@pytest.mark.parametrize(
    "recipe, gpu, other, after_norm",
    [
        # amax 2 + read 2 + copy 1 + transpose 1; after the norm the amax is the norm's
        ("tensorwise", "H100-80GB", 6, 4),
        # no transpose on Blackwell
        ("tensorwise", "B200", 5, 3),
        # read 2 + copy 1 + transpose 1; after the norm, the norm writes FP8 (1 byte less than
        # its bf16 price) and the transpose reads it and writes another (2)
        ("delayed", "H100-80GB", 4, 1),
        ("delayed", "B200", 3, -1),
        # row- and column-wise copies, the norm unfused
        ("mxfp8", "B200", 4, 4),
        ("blockwise", "H100-80GB", 4, 4),
    ],
)
def test_cast_bytes_per_element(recipe: str, gpu: str, other: float, after_norm: float) -> None:
    d = derived(recipe, gpu)
    assert d.fp8_cast_bytes(after_norm=False, gathered=False) == other
    assert d.fp8_cast_bytes(after_norm=True, gathered=False) == after_norm


def sequence_parallel(recipe: str, gpu: str, tp: int) -> Derived:
    base = base_job(Query("llama3-70b", 32, gpu, 8, 4096, 32, "pretrain"))
    changes = [
        f"model.tensor_model_parallel_size={tp}",
        "model.sequence_parallel=true",
        "model.fp8=hybrid",
        f"model.fp8_recipe={recipe}",
    ]
    return gate(with_changes(base, [Change.parse(c) for c in changes])).derived


@pytest.mark.parametrize(
    "recipe, gpu, other, after_norm",
    [
        # each rank casts its quarter row-wise (amax 2 + read 2 + copy 1), the transpose is made
        # from the gathered FP8 tensor (read 1 + write 1); after the norm, no amax
        ("tensorwise", "H100-80GB", 5 / 4 + 2, 3 / 4 + 2),
        # no transpose on Blackwell: only the quarter's cast
        ("tensorwise", "B200", 5 / 4, 3 / 4),
        # the fused norm writes its quarter in FP8 (-1), the transpose of the gathered tensor (2)
        ("delayed", "H100-80GB", 3 / 4 + 2, -1 / 4 + 2),
        # both copies cast on the quarter and gathered
        ("mxfp8", "B200", 4 / 4, 4 / 4),
        ("blockwise", "H100-80GB", 4 / 4, 4 / 4),
    ],
)
def test_a_gathered_operand_is_cast_on_its_shard(
    recipe: str, gpu: str, other: float, after_norm: float
) -> None:
    d = sequence_parallel(recipe, gpu, tp=4)
    assert d.fp8_cast_bytes(after_norm=False, gathered=True) == pytest.approx(other)
    assert d.fp8_cast_bytes(after_norm=True, gathered=True) == pytest.approx(after_norm)
    # an operand that is not gathered is cast whole
    assert d.fp8_cast_bytes(after_norm=False, gathered=False) == derived(recipe, gpu).fp8_cast_bytes(
        after_norm=False, gathered=False
    )
    # a row-parallel GEMM's output gradient is the gathered operand: proj's 4,096 x 8,192
    pricer = ShapePricer(d, get_gpu(gpu), K.MEGATRON_LM_LOOP)
    m, n, k = 4096, 8192, 2048
    saved = (d.fp8_cast_bytes(False, gathered=False) - other) * m * n / 3 / pricer.hbm
    assert pricer.gemm(m, n, k) - pricer.gemm(m, n, k, parallel="row") == pytest.approx(saved, rel=1e-9)


def test_without_sequence_parallelism_nothing_is_gathered() -> None:
    base = base_job(Query("llama3-70b", 32, "H100-80GB", 8, 4096, 32, "pretrain"))
    changes = [
        "model.tensor_model_parallel_size=4",
        "model.sequence_parallel=false",
        "model.fp8=hybrid",
        "model.fp8_recipe=tensorwise",
    ]
    d = gate(with_changes(base, [Change.parse(c) for c in changes])).derived
    assert d.fp8_cast_bytes(after_norm=True, gathered=True) == 4


def test_a_gemm_pays_its_input_and_output_gradient_casts_once() -> None:
    # qkv of Llama 3 8B at TP 1 on an H100 under current scaling: 4,096 x 4,096 input out of the
    # norm (4 bytes an element), 4,096 x 6,144 output gradient (6), a third of both on each call
    d = derived("tensorwise", "H100-80GB")
    pricer = ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP)
    m, n, k = 4096, 6144, 4096
    kernel = (
        2
        * m
        * n
        * k
        / (get_gpu("H100-80GB").fp8_flops * fp8_gemm_fraction(pricer.tables, m, n, k, "tensorwise"))
    )
    cast = (4 * m * k + 6 * m * n) / 3 / pricer.hbm
    assert pricer.gemm(m, n, k, after_norm=True, parallel="column") == pytest.approx(kernel + cast, rel=1e-12)
    # the same GEMM fed by anything else pays the amax pass on its input too
    assert pricer.gemm(m, n, k) - pricer.gemm(m, n, k, after_norm=True) == pytest.approx(
        2 * m * k / 3 / pricer.hbm, rel=1e-12
    )


def test_sequence_parallel_gathers_move_fp8() -> None:
    # Llama 3 70B at TP 8 with SP, no userbuffer overlap, delayed scaling (no amax reductions):
    # each side's all-gather moves one byte an element of the 4,096 x 8,192 activations instead
    # of two, forward and backward; the reduce-scatters stay bf16
    def tp_passes(*fp8: str) -> tuple[float, float]:
        base = base_job(Query("llama3-70b", 32, "H100-80GB", 8, 4096, 32, "pretrain"))
        changes = [
            "model.tensor_model_parallel_size=8",
            "model.sequence_parallel=true",
            "train.micro_batch_size=1",
        ]
        d = gate(with_changes(base, [Change.parse(c) for c in (*changes, *fp8)])).derived
        assert not d.userbuffer_overlap
        pricer = ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP)
        price = pricer.layer(False)
        return price.tp_fwd, price.tp_bwd

    bf16 = tp_passes()
    fp8 = tp_passes("model.fp8=hybrid", "model.fp8_recipe=delayed")
    group, net = (
        Group(8),
        ShapePricer(
            gate(base_job(Query("llama3-70b", 32, "H100-80GB", 8, 4096, 32, "pretrain"))).derived,
            get_gpu("H100-80GB"),
            K.MEGATRON_LM_LOOP,
        ).net,
    )
    elements = 4096 * 8192

    def gather(nbytes: float) -> float:
        return collective(Op.ALL_GATHER, nbytes, group, net, "H100-80GB").seconds

    saved = 2 * (gather(2 * elements) - gather(elements))
    assert saved > 0
    assert bf16[0] - fp8[0] == pytest.approx(saved, rel=1e-9)
    assert bf16[1] - fp8[1] == pytest.approx(saved, rel=1e-9)


def test_weights_quantized_every_microbatch_pay_their_cast_per_gemm() -> None:
    # disable_parameter_transpose_cache without FP8 parameters: every forward casts the 4,096 x
    # 6,144 weight like an operand not out of a norm (6 bytes an element on an H100 under current
    # scaling), a third on each of the GEMM's three calls; a TP chunk of it casts no weight
    cached = derived("tensorwise", "H100-80GB")
    fresh = gate(
        with_changes(cached.job, [Change.parse("model.disable_parameter_transpose_cache=true")])
    ).derived
    assert (cached.fp8_weight_copies, fresh.fp8_weight_copies) == ("cached", "per_microbatch")
    m, n, k = 4096, 6144, 4096
    cached_price = ShapePricer(cached, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP)
    fresh_price = ShapePricer(fresh, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP)
    assert fresh_price.gemm(m, n, k) - cached_price.gemm(m, n, k) == pytest.approx(
        6 * k * n / 3 / cached_price.hbm, rel=1e-12
    )
    assert fresh_price.gemm(m, n, k, casts_weight=False) == cached_price.gemm(m, n, k)


def test_fp8_attention_takes_its_factors_of_the_bf16_kernels() -> None:
    # cuDNN's fused attention of Llama 3 8B under delayed scaling: FP8 attention's forward at the
    # rate timed on an H100, its backward at the fitted factor, of the same bf16 kernels' time
    bf16 = derived("delayed", "H100-80GB")
    fp8 = gate(with_changes(bf16.job, [Change.parse("model.fp8_dot_product_attention=true")])).derived
    assert fp8.fp8_attention and not bf16.fp8_attention
    plain = ShapePricer(bf16, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP).core_attention()
    fast = ShapePricer(fp8, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP).core_attention()
    assert fast[0] == pytest.approx(plain[0] * K.FP8_ATTENTION_FWD_FACTOR, rel=1e-12)
    assert fast[1] == pytest.approx(plain[1] * K.FP8_ATTENTION_BWD_FACTOR, rel=1e-12)
    assert K.FP8_ATTENTION_FWD_FACTOR == 0.65  # the H100 frontend timing's median
