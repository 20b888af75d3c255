"""Megatron-FSDP's buffers and temporary buckets, by hand-computed figures.

The model: 2 layers, hidden 64, 4 heads (kv channels 16), plain MLP 256, RMSNorm, no biases,
vocabulary 1000 padded to 1024, untied output layer, TP 1, DP 4, bf16, local spec. Parameters:
- one layer: qkv (4 + 2*4) * 16 * 64 = 12288, proj 4 * 16 * 64 = 4096, fc1 and fc2 256 * 64
  = 16384 each, two norms 2 * 64 = 128: 49280;
- outside the layers: embedding 1024 * 64 = 65536, output layer 65536, final norm 64: 131136;
- in all 2 * 49280 + 131136 = 229696, a quarter of it (the DP shard) 57424.
"""

from __future__ import annotations

from memtune.config import derive
from memtune.estimate.core import Segment, _with_fsdp_buckets
from memtune.estimate.params import chunk_params, chunk_transformer_layer_params
from memtune.estimate.state import model_state
from memtune.peft.model import AdapterParams
from tests.jobs import build_job

MODEL = dict(
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    ffn_hidden_size=256,
    vocab_size=1000,
    seq_length=32,
    normalization="RMSNorm",
    add_bias_linear=False,
    share_embeddings_and_output_weights=False,
    transformer_impl="local",
    attention_backend="flash",
    bf16=True,
)


def fsdp(strategy: str, gpus: int = 4, **ddp):
    job = build_job(
        {"defaults": "megatron-core", "model": MODEL, "cluster": {"num_gpus": gpus}},
        ddp={"use_megatron_fsdp": True, "data_parallel_sharding_strategy": strategy, **ddp},
    )
    return derive(job)


def state_of(d):
    chunk = d.chunks[0][0]
    return model_state(d, chunk_params(d, chunk), AdapterParams(), chunk_transformer_layer_params(d, chunk))


def test_parameter_counts_of_the_tiny_model():
    d = fsdp("optim")
    chunk = d.chunks[0][0]
    assert chunk_params(d, chunk).total == 229696
    assert chunk_transformer_layer_params(d, chunk).total == 2 * 49280


def test_gradients_follow_the_fsdp_dtype_not_grad_reduce_in_fp32():
    assert fsdp("optim", grad_reduce_in_fp32=True).grad_dtype == "bf16"
    assert fsdp("optim", megatron_fsdp_main_grads_dtype="fp32").grad_dtype == "fp32"


def test_optim_shards_main_weights_and_moments_only():
    s = state_of(fsdp("optim"))
    assert s.weights == 2 * 229696  # bf16 model-weight buffer, whole
    assert s.grads == 2 * 229696  # bf16 main-gradient buffer, whole
    assert s.optimizer == (4 + 8) * 57424  # fp32 main weights + torch Adam's fp32 moments, sharded
    # the step's .grad is the gradient shard cast to fp32; foreach Adam's sqrt(v) for all of it
    assert s.optimizer_step_transient == 4 * 57424 + 4 * 57424


def test_optim_grads_params_keeps_the_layers_sharded_and_the_rest_gathered():
    s = state_of(fsdp("optim_grads_params"))
    assert s.weights == 2 * (57424 + 131136)
    assert s.grads == 2 * 57424
    assert s.optimizer == 12 * 57424
    # after the step every layer is gathered again (2 * 98560), beside the fp32 gradient cast
    assert s.optimizer_step_transient == 4 * 57424 + max(4 * 57424, 2 * 98560)


def test_optim_grads_params_on_one_rank_gathers_nothing():
    # A data-parallel group of one keeps its whole buffer: no second, gathered copy of the
    # parameters outside the layers (measured: benchmarks/measured/resume/, resume-l1b-fsdp-ogp).
    s = state_of(fsdp("optim_grads_params", gpus=1))
    assert s.weights == 2 * 229696


def test_fp32_main_gradients_need_no_cast_for_the_step():
    s = state_of(fsdp("optim_grads", megatron_fsdp_main_grads_dtype="fp32"))
    assert s.grads == 4 * 57424
    assert s.optimizer_step_transient == 4 * 57424  # foreach Adam only


def test_communication_unit_is_at_least_a_billion_elements():
    assert fsdp("optim_grads_params").fsdp_communication_unit(49280) == 1e9
    assert fsdp("optim_grads_params").fsdp_communication_unit(6e8) == 1.2e9
    assert fsdp("optim_grads", bucket_size=2_000_000_000).fsdp_communication_unit(49280) == 2e9


def empty(n: int) -> list[Segment]:
    return [Segment(0.0, 0.0, 0.0, 0.0) for _ in range(n)]


def test_optim_grads_holds_one_unsharded_gradient_bucket_from_the_output_layer_on():
    d = fsdp("optim_grads")
    out = _with_fsdp_buckets(d, d.chunks[0][0], empty(4), [0, 1, 1, 0])[-1]
    bucket = 2 * 229696
    assert out.bwd_residue == bucket
    # the output weight's gradient (2 * 1024 * 64) and the input's (2 * 32 * 64) exist when the
    # bucket is allocated; the fp32 softmax (4 * 32 * 1024) is already gone
    assert out.bwd_extra == 2 * 1024 * 64 + 2 * 32 * 64 - 4 * 32 * 1024 + bucket


def test_optim_grads_params_gathers_layers_and_queues_their_gradient_buckets():
    d = fsdp("optim_grads_params")
    emb, first, second, out = _with_fsdp_buckets(d, d.chunks[0][0], empty(4), [0, 1, 1, 0])
    layer = 49280
    # forward right after the step: every layer not yet run is gathered
    assert [s.fwd_extra for s in (emb, first, second, out)] == [2 * 2 * layer, 2 * 2 * layer, 2 * layer, 0]
    # backward of the second layer: both layers gathered (prefetch), its own gradient bucket
    assert second.bwd_extra == 2 * 2 * layer + 2 * layer
    # backward of the first: itself gathered, its bucket and the second's (still queued)
    assert first.bwd_extra == 2 * layer + 2 * 2 * layer
    # the embedding's backward: both layer buckets still queued (the queue holds 1e9 elements)
    assert emb.bwd_extra == 2 * 2 * layer
    # the group outside the layers reduces at the end of the backward
    assert out.bwd_residue == 2 * 131136


def test_a_single_rank_expert_group_needs_no_temporary_bucket():
    # EP 4 over 4 GPUs: expert-DP is 1, so routed experts keep whole buffers and are never gathered.
    job = build_job(
        {"model": MODEL},
        model={"num_moe_experts": 4, "expert_model_parallel_size": 4},
        ddp={"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"},
        cluster={"num_gpus": 4},
    )
    d = derive(job)
    units = chunk_transformer_layer_params(d, d.chunks[0][0])
    s = model_state(d, chunk_params(d, d.chunks[0][0]), AdapterParams(), units)
    assert units.expert > 0
    dense_units = units.dense + units.replicated
    assert s.optimizer_step_transient == 4 * s.optimizer_params + max(4 * s.optimizer_params, 2 * dense_units)
