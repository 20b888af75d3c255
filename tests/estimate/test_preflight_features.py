"""Multi-token prediction and optimizer CPU offload in the estimate, by hand-computed figures."""

from __future__ import annotations

from memtune.check import gate
from memtune.config import derive
from memtune.estimate import EstimateOptions, estimate
from memtune.estimate.core import chunk_activations
from memtune.estimate.params import ParamTensor, chunk_param_tensors, chunk_params
from memtune.estimate.state import PinnedHostCache, _offload_walk, _shard_pieces
from tests.jobs import build_job

MODEL = dict(
    num_layers=4,
    hidden_size=1024,
    num_attention_heads=16,
    ffn_hidden_size=4096,
    vocab_size=32000,
    seq_length=1024,
    transformer_impl="local",
    attention_backend="flash",
    bf16=True,
    share_embeddings_and_output_weights=False,
)


def job(model=None, **sections):
    return build_job({"model": MODEL}, model=model or {}, **sections)


def test_mtp_stage_builds_its_own_embedding_even_without_pre_process():
    pp2 = dict(pipeline_model_parallel_size=2, pipeline_dtype="bf16")
    plain, mtp = derive(job(pp2)), derive(job({**pp2, "mtp_num_layers": 1}))
    last_plain, last_mtp = plain.chunks[1][0], mtp.chunks[1][0]
    extra = chunk_params(mtp, last_mtp).dense - chunk_params(plain, last_plain).dense
    mtp_layer_dense = 2 * 1024 * 1024 + (chunk_params(plain, last_plain).dense - 32000 * 1024) / 2
    assert extra == mtp_layer_dense + 32000 * 1024


def test_each_mtp_layer_keeps_a_second_fp32_loss_over_the_vocabulary():
    def kept(layers):
        d = derive(job({"mtp_num_layers": layers}))
        return chunk_activations(d, d.chunks[0][0], EstimateOptions()).saved.tensors

    one, two = kept(1), kept(2)
    assert one["mtp.loss.softmax_fp32"] == 4 * 1024 * 32000
    assert two["mtp.loss.softmax_fp32"] == 2 * 4 * 1024 * 32000


def test_offload_fraction_zero_keeps_the_replaced_optimizers_fp32_copies():
    # f = 0: the first HybridDeviceOptimizer clones every local parameter to fp32 on the device
    # and stays alive; the second keeps an fp32 master and two fp32 moments of the shard there.
    optimizer = dict(
        use_distributed_optimizer=True,
        use_precision_aware_optimizer=True,
        optimizer_cpu_offload=True,
        optimizer_offload_fraction=0.0,
    )
    j = job(
        optimizer=optimizer, ddp={"grad_reduce_in_fp32": True}, cluster={"num_gpus": 1, "gpus_per_node": 8}
    )
    rank = estimate(gate(j)).ranks[0]
    local = rank.state.trainable
    assert rank.state.orphaned_optimizer_copies == 4 * local
    assert rank.state.optimizer == 4 * local + 12 * local  # DP 1: the shard is everything
    assert rank.host_bytes == 0


def test_offload_walk_offloads_whole_tensors_decayed_group_first():
    # 21 elements, threshold 10.5: A (10) goes, 10 < 10.5 so B (6) goes too; C and the norm stay.
    tensors = [
        ParamTensor(10, True, False),
        ParamTensor(1, False, False),
        ParamTensor(6, True, False),
        ParamTensor(4, True, False),
    ]
    assert _offload_walk(tensors, 0.5) == (5.0, [10, 6])
    assert _offload_walk(tensors, 0.0) == (21.0, [])


def test_shard_pieces_follow_the_reversed_padded_buffer():
    # Buffer (reverse order): the 200-tensor at [0, 200), the 100-tensor at [256, 356) (starts
    # on multiples of 64), the bucket padded to lcm(2, 128) = 128 -> 384; each rank owns 192.
    d = derive(job())
    chunk = [ParamTensor(100, True, False), ParamTensor(200, True, False)]
    assert [p.numel for p in _shard_pieces(d, [chunk], 2, 0)] == [192]
    assert [p.numel for p in _shard_pieces(d, [chunk], 2, 1)] == [8, 100]


def test_pinned_host_cache_rounds_to_powers_of_two_and_reuses_freed_blocks():
    cache = PinnedHostCache()
    cache.transient([3_000_000, 3_500_000])  # one 4 MiB block, freed after each use
    cache.take([5_000_000, 3_000_000, 2_100_000])  # an 8 MiB block; the freed 4 MiB block; a new one
    assert cache.total == 4 * 2**20 + 8 * 2**20 + 4 * 2**20
    cache.take([1])
    assert cache.total == 4 * 2**20 + 8 * 2**20 + 4 * 2**20 + 1


def test_param_tensors_add_up_to_the_chunk_counts():
    d = derive(job(model={"num_moe_experts": 4, "moe_layer_freq": 2, "add_bias_linear": True}))
    for chunk in d.chunks[0]:
        tensors = chunk_param_tensors(d, chunk)
        assert sum(t.numel for t in tensors) == chunk_params(d, chunk).total
        assert sum(t.numel for t in tensors if t.expert) == chunk_params(d, chunk).expert
