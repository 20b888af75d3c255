"""Transformer Engine's userbuffer overlap, GEMM by GEMM (``Derived.userbuffer_gemm``,
``ShapePricer.userbuffer_overlap``): its defaults, a job's ``tp_comm_overlap_cfg`` over them, and
the price of a ring-exchange reduce-scatter, computed here by hand from the same GEMM and
collective prices."""

from __future__ import annotations

import pytest

from memtune.catalog.gpus import get_gpu
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived, UserbufferGemm
from memtune.errors import InputError
from memtune.perf import constants as K
from memtune.perf.collectives import Group, Op, collective
from memtune.perf.layer import BF16, ShapePricer
from memtune.plan.query import Query, base_job

TP = 8
OVERLAP = [f"model.tensor_model_parallel_size={TP}", "model.sequence_parallel=true", "model.tp_comm_overlap=true",
           "train.micro_batch_size=1"]  # fmt: skip


def derived(*changes: str) -> Derived:
    base = base_job(Query("llama3-70b", 32, "H100-80GB", 8, 4096, 32, "pretrain"))
    return gate(with_changes(base, [Change.parse(c) for c in (*OVERLAP, *changes)])).derived


def pricer(d: Derived) -> ShapePricer:
    return ShapePricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP)


def test_transformer_engines_defaults() -> None:
    # initialize_ub: ring exchange in TP chunks on 1 SM without a margin; pipelined in 4 and bulk
    # on 16 SMs the GEMM gives up
    d = derived()
    assert d.userbuffer_gemm("qkv_fprop") == UserbufferGemm("ring_exchange", 0, TP)
    assert d.userbuffer_gemm("fc2_dgrad") == UserbufferGemm("ring_exchange", 0, TP)
    assert d.userbuffer_gemm("proj_fprop") == UserbufferGemm("pipeline", 16, 4)
    assert d.userbuffer_gemm("fc1_dgrad") == UserbufferGemm("bulk", 16, 4)
    assert d.userbuffer_gemm("qkv_wgrad") == UserbufferGemm("bulk", 16, 4)
    # a GEMM call per chunk; a bulk overlap runs its GEMM whole
    assert [d.userbuffer_gemm(g).gemm_calls for g in ("qkv_fprop", "proj_fprop", "fc1_dgrad")] == [TP, 4, 1]


def test_a_configuration_is_laid_over_the_defaults_field_by_field() -> None:
    # initialize_ub updates the default dict with the user's: a field left out keeps its default,
    # computed from the GEMM's default method (16 SMs with a margin for proj_fprop)
    d = derived(
        "model.tp_comm_overlap_cfg={proj_fprop: {method: ring_exchange}, fc1_wgrad: {set_sm_margin: false}}"
    )
    assert d.userbuffer_gemm("proj_fprop") == UserbufferGemm("ring_exchange", 16, TP)
    assert d.userbuffer_gemm("fc1_wgrad") == UserbufferGemm("bulk", 0, 4)
    assert d.userbuffer_gemm("fc2_fprop") == UserbufferGemm("pipeline", 16, 4)


def test_a_bridge_configuration_by_name() -> None:
    # Megatron-Bridge's userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 (training/comm_overlap.py):
    # proj and fc2 reduce-scatter by ring exchange on 1 SM they leave free; bulk without a margin
    d = derived("model.tp_comm_overlap_cfg=userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192")
    assert d.userbuffer_gemm("proj_fprop") == UserbufferGemm("ring_exchange", 1, TP)
    assert d.userbuffer_gemm("qkv_wgrad") == UserbufferGemm("bulk", 0, 4)
    assert d.userbuffer_gemm("qkv_fprop") == UserbufferGemm("ring_exchange", 0, TP)


def test_a_method_transformer_engine_does_not_run_is_refused() -> None:
    with pytest.raises(InputError) as err:
        derived("model.tp_comm_overlap_cfg={qkv_fprop: {method: bulk}}")
    assert err.value.problems == [
        "model.tp_comm_overlap_cfg: qkv_fprop.method: bulk is not an overlap Transformer Engine runs "
        "for qkv_fprop; allowed: ring_exchange"
    ]


def test_the_defaults_written_out_price_as_the_defaults() -> None:
    written = ("model.tp_comm_overlap_cfg={proj_fprop: {method: pipeline, num_sm: 16, set_sm_margin: true, "
               "num_splits: 4}, qkv_dgrad: {method: bulk, num_sm: 16, set_sm_margin: true}}")  # fmt: skip
    assert pricer(derived(written)).layer(False) == pricer(derived()).layer(False)


def test_a_ring_exchange_reduce_scatter_by_hand() -> None:
    # proj_fprop and fc2_fprop by ring exchange without a margin: TP chunks of M / TP rows, the
    # TP - 1 sends of scatter / (TP - 1) each hidden behind the next chunk but the last, and the
    # received chunks summed ((TP + 1) x M / TP x N bf16 through HBM); everything else as default
    ring = "{method: ring_exchange, set_sm_margin: false}"
    d_ring = derived(f"model.tp_comm_overlap_cfg={{proj_fprop: {ring}, fc2_fprop: {ring}}}")
    plain, ringed = pricer(derived()), pricer(d_ring)
    shapes = plain.attention_gemms()[2] | plain.mlp(False)[2]
    elements = plain.tokens * d_ring.model.hidden_size
    scatter = collective(Op.REDUCE_SCATTER, BF16 * elements, Group(TP), plain.net, plain.gpu.name).seconds
    step = scatter / (TP - 1)
    before, after = plain.userbuffer_overlap(shapes, elements), ringed.userbuffer_overlap(shapes, elements)
    margin = 1 / (1 - 16 / K.UB_REFERENCE_SMS)
    for side in ("attention", "mlp"):
        m, n, k = shapes[f"{side} out"]
        pipelined_chunk = plain.gemm(m / 4, n, k) * margin
        ring_chunk = plain.gemm(m / TP, n, k)
        pipelined_exposed = scatter / 4 + 3 * max(0.0, scatter / 4 - pipelined_chunk)
        ring_exposed = (
            step + (TP - 2) * max(0.0, step - ring_chunk) + (TP + 1) * BF16 * (m / TP) * n / plain.hbm
        )
        # TP chunks against 4, each boundary past the first at UB_CHUNK_DEVICE_S
        assert after[side].extra_fwd - before[side].extra_fwd == pytest.approx(
            TP * ring_chunk - 4 * pipelined_chunk + (TP - 4) * K.UB_CHUNK_DEVICE_S
        )
        assert after[side].exposed_fwd - before[side].exposed_fwd == pytest.approx(
            ring_exposed - pipelined_exposed
        )
        assert (after[side].extra_bwd, after[side].exposed_bwd) == (
            before[side].extra_bwd,
            before[side].exposed_bwd,
        )


def test_bulk_overlaps_without_a_margin_leave_the_backward_gemms_their_speed() -> None:
    # set_sm_margin off on both bulk overlaps of a side: its backward GEMMs are not slowed at all
    free = "{set_sm_margin: false}"
    d = derived(
        f"model.tp_comm_overlap_cfg={{qkv_dgrad: {free}, qkv_wgrad: {free}, fc1_dgrad: {free}, fc1_wgrad: {free}}}"
    )
    p = pricer(d)
    shapes = p.attention_gemms()[2] | p.mlp(False)[2]
    sides = p.userbuffer_overlap(shapes, p.tokens * d.model.hidden_size)
    for side, (out, n_out) in {"attention": ("proj", "attention out"), "mlp": ("fc2", "mlp out")}.items():
        m, n, k = shapes[n_out]
        # the output side's data gradient, by ring exchange: TP chunks, TP - 1 boundaries
        ring_extra = TP * p.gemm(m / TP, k, n) - p.gemm(m, k, n) + (TP - 1) * K.UB_CHUNK_DEVICE_S
        assert sides[side].extra_bwd == pytest.approx(ring_extra), out


def test_a_mapping_valued_change_round_trips_through_its_text() -> None:
    # memtune diff and fix apply a key's change by its text (Change.__str__, Change.parse): a
    # GEMM's unset field stays null, not the string "None"
    from memtune.config.changes import Change

    change = Change(
        "model.tp_comm_overlap_cfg",
        {"proj_fprop": {"method": "pipeline", "num_splits": None, "set_sm_margin": False}},
    )
    assert (
        str(change)
        == "model.tp_comm_overlap_cfg={proj_fprop: {method: pipeline, num_splits: null, set_sm_margin: false}}"
    )
    assert Change.parse(str(change)) == change
    assert derived(str(change)).userbuffer_gemm("proj_fprop") == UserbufferGemm("pipeline", 0, 4)
