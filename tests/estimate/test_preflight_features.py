"""Multi-token prediction and optimizer CPU offload in the estimate, by hand-computed figures."""

from __future__ import annotations

from memtune.check import gate
from memtune.config import derive, validate
from memtune.estimate import EstimateOptions, estimate
from memtune.estimate.core import chunk_activations
from memtune.estimate.params import chunk_params

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
    return validate({"model": {**MODEL, **(model or {})}, **sections})


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


def test_offload_fraction_splits_optimizer_state_between_device_and_host():
    optimizer = dict(
        use_distributed_optimizer=True,
        use_precision_aware_optimizer=True,
        optimizer_cpu_offload=True,
        optimizer_offload_fraction=0.25,
    )
    j = job(
        optimizer=optimizer, ddp={"grad_reduce_in_fp32": True}, cluster={"num_gpus": 1, "gpus_per_node": 8}
    )
    est = estimate(gate(j))
    rank = est.ranks[0]
    n = rank.state.optimizer_params
    assert rank.state.optimizer == 0.75 * n * 12  # fp32 master + two fp32 moments on the device
    assert rank.host_pinned_bytes == round(0.25 * n * 6)  # bf16 weight copy + fp32 gradient buffer
    assert rank.host_bytes == round(0.25 * n * 18)  # + unpinned fp32 master and moments
    assert est.host_bytes_per_node == rank.host_bytes  # one GPU in the world, one rank on the node
