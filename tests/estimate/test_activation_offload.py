"""Fine-grained activation offloading, by hand-computed figures on the tiny model of conftest.py.

Transformer Engine spec with flash attention, TP 1: a microbatch is T = 128 x 2 = 256 tokens of
hidden 64, 4 heads and 2 query groups of 16 channels. Per layer the core attention keeps
q = 256 x 64 x 2 B = 32768 B (16384 elements), k = v = 16384 B (8192 elements) and the fp32
softmax statistics 256 x 4 x 4 B = 4096 B (1024 elements); linear_proj keeps its input, 32768 B,
which is also the flash kernel's output (copied to the host by core_attn, kept on the device for
linear_proj). One core_attn group moves 69632 B, one attn_proj group 32768 B.
"""

from __future__ import annotations

from memtune.check import gate
from memtune.config import derive
from memtune.estimate import EstimateOptions, estimate
from memtune.estimate import activation_offload as ao
from memtune.estimate.activations import dims_of
from memtune.estimate.core import layer_saved
from memtune.estimate.flavour import flavour_of
from memtune.estimate.render import assumptions

TE = {"transformer_impl": "transformer_engine", "attention_backend": "flash"}
CORE, PROJ = 32768 + 16384 + 16384 + 4096, 32768
CORE_PINNED = CORE + 32768  # with the copy of the kernel's output


def _estimate(job_factory, pp=1, **model):
    if pp > 1:
        model.update(pipeline_model_parallel_size=pp, pipeline_dtype="bf16")
    return estimate(gate(job_factory(model={**TE, **model})))


def _offloaded(job_factory, pp=1, **model):
    return _estimate(job_factory, pp, fine_grained_activation_offloading=True, **model)


def test_every_layer_but_the_last_moves_its_groups_to_pinned_host_memory(job_factory):
    base = _estimate(job_factory).ranks[0]
    rank = _offloaded(
        job_factory, offload_modules=["core_attn", "attn_proj"], min_offloaded_tensor_size=0
    ).ranks[0]
    # PP 1 is the last stage: the last layer's group of each module stays for the backward.
    assert base.activations - rank.activations == 3 * (CORE + PROJ)
    # The warm-up iteration offloads all four layers, and the pool keeps what it allocated.
    assert rank.host_pinned_bytes == rank.host_bytes == 4 * (CORE_PINNED + PROJ)
    assert base.host_bytes == 0


def test_tensors_under_the_minimum_size_stay_on_the_device(job_factory):
    base = _estimate(job_factory).ranks[0]
    rank = _offloaded(
        job_factory, offload_modules=["core_attn", "attn_proj"], min_offloaded_tensor_size=8193
    ).ranks[0]
    # k, v (8192 elements) and the statistics (1024) stay; q and linear_proj's input go.
    assert base.activations - rank.activations == 3 * (32768 + 32768)
    assert rank.host_bytes == 4 * (32768 + 32768 + 32768)


def test_fraction_keeps_the_later_groups_after_the_margin(job_factory):
    base = _estimate(job_factory).ranks[0]
    rank = _offloaded(
        job_factory,
        offload_modules=["core_attn", "attn_proj"],
        min_offloaded_tensor_size=0,
        activation_offload_fraction=0.5,
    ).ranks[0]
    # The margin keeps layer 3's two groups; of the six left, int(6 x 0.5) = 3 later ones stay
    # (layer 1's attn_proj and layer 2's both): layer 0's two groups and layer 1's core_attn go.
    assert base.activations - rank.activations == 2 * CORE + PROJ


def test_backward_reloads_ahead_by_the_groups_kept_on_the_device(job_factory):
    d = derive(
        job_factory(
            model={
                **TE,
                "fine_grained_activation_offloading": True,
                "offload_modules": ["core_attn", "attn_proj"],
                "min_offloaded_tensor_size": 0,
                "activation_offload_fraction": 0.5,
            }
        )
    )
    fl = flavour_of(d)
    layers = [(layer_saved(d, dims_of(d), fl, i, EstimateOptions()), False) for i in range(4)]
    first = ao.chunk_offload(d, fl, layers, last_stage=True).first
    # Offloaded: layer 0's core_attn and attn_proj, layer 1's core_attn (stack in commit order).
    # Layer 3's two group starts reload layer 1's core_attn and layer 0's attn_proj; layer 2's
    # first start reloads layer 0's core_attn: from then on all three are on the device.
    # While a module's backward runs, the reloads issued so far are there beside it ...
    assert first.bwd_extra == [CORE + PROJ, 2 * CORE + PROJ, 2 * CORE + PROJ, CORE]
    # ... and once it is done, its own kept tensors are gone: layer 3 kept both its groups.
    assert first.bwd_after_extra == [CORE, 2 * CORE, 2 * CORE, CORE - PROJ]
    # In forward a group's tensors exist until its commit: one group at a time here.
    assert first.fwd_extra == [CORE, CORE, 0.0, 0.0]
    assert first.after_backward == 0.0


def test_first_stage_offloads_all_but_the_first_backward_microbatchs_margin(job_factory):
    base = _estimate(job_factory, pp=2)
    est = _offloaded(
        job_factory, pp=2, offload_modules=["core_attn", "attn_proj"], min_offloaded_tensor_size=0
    )
    first, last = est.ranks
    assert first.in_flight == {0: 2} and last.in_flight == {0: 1}
    # Stage 0 (layers 0-1): two microbatches in flight offload both layers, but the first to run
    # backward keeps its layer 1 (the margin). Stage 1, the last, keeps its layer 1 each time.
    assert base.ranks[0].activations - first.activations == 2 * 2 * (CORE + PROJ) - (CORE + PROJ)
    assert base.ranks[1].activations - last.activations == CORE + PROJ
    assert first.host_bytes == 2 * 2 * (CORE_PINNED + PROJ)
    assert last.host_bytes == 2 * (CORE_PINNED + PROJ)


def test_next_microbatch_is_reloaded_once_this_one_has_nothing_left(job_factory):
    d = derive(
        job_factory(
            model={
                **TE,
                "pipeline_model_parallel_size": 2,
                "pipeline_dtype": "bf16",
                "fine_grained_activation_offloading": True,
                "offload_modules": ["core_attn", "attn_proj"],
                "min_offloaded_tensor_size": 0,
            }
        )
    )
    fl = flavour_of(d)
    layers = [(layer_saved(d, dims_of(d), fl, i, EstimateOptions()), False) for i in range(2)]
    plan = ao.chunk_offload(d, fl, layers, last_stage=False)
    # The first microbatch offloads layer 0 only; layer 1's starts reload it as each of its own
    # kept groups finishes (never both at once), and layer 0's starts, with nothing left, fetch
    # the next microbatch's layer 1.
    assert plan.first_pipelined.bwd_extra == [CORE + PROJ, PROJ]
    assert plan.first_pipelined.bwd_after_extra == [CORE + PROJ, 0.0]
    assert plan.first_pipelined.after_backward == CORE + PROJ
    assert plan.first.after_backward == 0.0


def test_norm_groups_exist_only_where_the_norm_is_a_module_of_its_own(job_factory):
    base = _estimate(job_factory).ranks[0]
    te = _offloaded(
        job_factory, offload_modules=["attn_norm", "mlp_norm"], min_offloaded_tensor_size=0
    ).ranks[0]
    # The Transformer Engine spec fuses both norms of a dense layer into the next linear.
    assert te.activations == base.activations and te.host_bytes == 0
    qkv = _offloaded(job_factory, offload_modules=["qkv_linear"], min_offloaded_tensor_size=0).ranks[0]
    # There the QKV group holds the fused norm's input (32768 B) and statistics (1024 B) too.
    assert base.activations - qkv.activations == 3 * (32768 + 1024 + 32768)
    local = _estimate(job_factory, transformer_impl="local")
    local_offloaded = _offloaded(
        job_factory, transformer_impl="local", offload_modules=["attn_norm"], min_offloaded_tensor_size=0
    )
    assert local.ranks[0].activations - local_offloaded.ranks[0].activations == 3 * (32768 + 1024)


def test_assumptions_say_what_was_measured_and_what_comes_from_source(job_factory):
    est = _offloaded(job_factory, offload_modules=["core_attn"])
    note = next(n for n in assumptions(est) if n.startswith("fine_grained_activation_offloading"))
    assert note.startswith(
        "fine_grained_activation_offloading (core_attn): measured on the local spec, the Transformer Engine "
        "spec's groups from source"
    )


def test_the_size_threshold_counts_fp32_elements_in_an_fp32_job(job_factory):
    # fp32: every activation element is 4 bytes, so q (256 tokens x 64) is 65536 B of 16384
    # elements, and the threshold still reads 16384.
    d = derive(job_factory(model={**TE, "bf16": False}))
    fl = flavour_of(d)
    (q,) = ao._saved_parts(d, fl, "self_attention.core_attention.q", 4 * 256 * 64)
    assert (q.device, q.host, q.numel) == (4 * 256 * 64, 4 * 256 * 64, 256 * 64)
    (lse,) = ao._saved_parts(d, fl, "self_attention.core_attention.softmax_lse", 4 * 256 * 4)
    assert lse.numel == 256 * 4
