"""The save phase (estimate/save.py) by hand-computed byte counts, per format and option.

The model is tests/estimate/conftest.py's TINY (see tests/estimate/test_resume.py): 374336
parameters on each of 2 GPUs (DP 2), bf16. Every tensor holds a multiple of 64 elements, so the
distributed optimizer's gradient buffer places them without gaps: one bucket (no
overlap_grad_reduce) of 374336 elements padded to a multiple of lcm(2, 128) = 128: 374400, a
shard of 187200. Tensors: per layer norm 64, qkv 8192, proj 4096, norm 64, fc1 32768, fc2 16384
(61568); embedding and output layer 64000 each, final norm 64.

Pinned staging is rounded per tensor to a power of two (PyTorch's caching host allocator): every
per-layer tensor above is one already (in elements, and in bytes at 1, 2 or 4 bytes each); the
64000-element tensors round to 65536 elements.
"""

from __future__ import annotations

from memtune.check import gate
from memtune.estimate import estimate
from memtune.estimate.host import DATALOADER_WORKER, DATALOADER_WORKERS, PROCESS
from memtune.estimate.overhead import CUDA_CONTEXT
from memtune.estimate.render import estimate_json
from memtune.perf.step import throughput_of
from tests.estimate.conftest import make_job

PARAMS = 374_336
BUCKET = 374_400  # padded to a multiple of 128
SHARD = 187_200  # the bucket's share of one data-parallel rank
LAYER = 61_568
DISTOPT = {"use_distributed_optimizer": True}
SAVE = {"save": "/ckpt"}
# The bytes of each tensor, rounded to a power of two, for tensors of 1, 2 and 4 bytes per element
# (the 64000-element embedding and output layer round to 65536 elements).
ROUNDED = 4 * LAYER + 65_536 + 64 + 65_536  # 377408 "elements"


def save_of(checkpoint=None, optimizer=None, ddp=None, model=None, **sections):
    job = make_job(
        checkpoint={**SAVE, **(checkpoint or {})},
        optimizer=optimizer or {},
        ddp=ddp or {},
        model=model or {},
        **sections,
    )
    est = estimate(gate(job))
    rank = est.ranks[0]
    return est, rank, est.save(rank)


def test_torch_dist_with_the_distributed_optimizer_saves_by_reference():
    """dp_reshardable: the state dict's tensors are the optimizer's own; each is staged to pinned
    memory: the weights, spread over the 2 data-parallel ranks (fully parallel save), and the
    rank's own shard of main weights and moments, piece by piece."""
    _, rank, save = save_of(optimizer=DISTOPT, ddp=DISTOPT)
    assert save.parts == {}
    assert save.resident == rank.state.total + rank.state.left_after_step + rank.buffers
    assert save.peak_bytes == round(rank.state.total + rank.state.left_after_step + rank.buffers)
    # Rank 0's shard, in buffer order (tensors reversed): the output layer (64000), the final
    # norm, layer 4 and layer 3: 64000 + 64 + 2 * 61568 = 187200, each piece 3 fp32 keys.
    own = 3 * 4 * (65_536 + 64 + 2 * LAYER)
    weights = 2 * ROUNDED // 2  # bf16, half of every tensor on this rank
    assert save.host_staged_bytes == weights + own
    assert save.host_transient_bytes == 0


def test_without_the_distributed_optimizer_the_state_is_written_like_the_weights():
    """The model-space state (fp32 main weights, two moments) is replicated over DP like the
    weights: with fully parallel save each rank stages half of every tensor."""
    _, _, save = save_of()
    assert save.parts == {}
    assert save.host_staged_bytes == 2 * ROUNDED // 2 + 3 * 4 * ROUNDED // 2


def test_without_fully_parallel_save_data_parallel_rank_0_writes_every_replicated_tensor():
    _, _, save = save_of(checkpoint={"fully_parallel_save": False})
    assert save.host_staged_bytes == 2 * ROUNDED + 3 * 4 * ROUNDED


def test_without_the_optimizer_state_only_the_weights_are_written():
    _, _, save = save_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"save_optim": False})
    assert save.host_staged_bytes == ROUNDED


def test_fully_reshardable_gathers_each_bucket_on_the_device():
    """NCCL all_gather into a list: the rank's shard copied to the device, the received list and
    the flat tensor ProcessGroupNCCL gathers into, fp32, for the one bucket. On the host: the
    gathered main weights and moments of the whole buffer, the gather's temporaries, and clones of
    the half this rank writes."""
    _, rank, save = save_of(
        optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"dist_ckpt_optim_fully_reshardable": True}
    )
    gather = 4 * (SHARD + 2 * BUCKET)
    assert save.parts == {"optimizer.fully_reshardable_gather": gather}
    assert save.peak_bytes == round(rank.state.total + rank.state.left_after_step + rank.buffers + gather)
    gathered = 4 * 3 * PARAMS
    # each key's shard, and for the key being gathered its received shards, their concatenation
    # and the previous key's concatenation; freed before the writer clones its half (smaller)
    temporaries = 4 * 3 * (SHARD + BUCKET)
    clones = gathered // 2
    assert temporaries > clones
    assert save.host_transient_bytes == gathered + temporaries
    assert save.host_staged_bytes == 2 * ROUNDED // 2  # only the weights come from the device


def test_fully_reshardable_over_gloo_stays_on_the_host_of_rank_0():
    checkpoint = {
        "dist_ckpt_optim_fully_reshardable": True,
        "distrib_optim_fully_reshardable_mem_efficient": True,
    }
    _, rank, save = save_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint=checkpoint)
    assert save.parts == {}
    assert save.peak_bytes == round(rank.state.total + rank.state.left_after_step + rank.buffers)
    gathered = 4 * 3 * PARAMS
    # rank 0 alone holds the gathered state and clones all of it to write it, after the gather
    clones = gathered
    temporaries = 4 * 3 * (SHARD + BUCKET)
    assert save.host_transient_bytes == gathered + max(temporaries, clones)


def test_legacy_format_serializes_one_tensor_at_a_time_on_the_host():
    """torch.save copies each device storage to the host as it writes it: the largest, an fp32
    moment of the 64000-element embedding; data-parallel rank 0 writes everything."""
    _, rank, save = save_of(checkpoint={"ckpt_format": "torch"})
    assert save.parts == {} and save.host_staged_bytes == 0
    assert save.host_transient_bytes == 4 * 64_000
    assert save.peak_bytes == round(rank.state.total + rank.state.left_after_step + rank.buffers)


def test_legacy_format_gathers_the_distributed_optimizer_to_rank_0_over_gloo():
    _, _, save = save_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"ckpt_format": "torch"})
    assert save.parts == {} and save.host_staged_bytes == 0
    gathered = 4 * 3 * PARAMS
    # the gather's temporaries outweigh torch.save's copy of the largest weight (2 * 64000)
    assert save.host_transient_bytes == gathered + 4 * 3 * (SHARD + BUCKET)


def test_precision_aware_optimizer_copies_its_16_bit_state_to_fp32():
    """TE's FusedAdam.get_unscaled_state returns a new fp32 tensor for each bf16 moment; fp32
    main weights are returned as they are."""
    opt = {
        **DISTOPT,
        "use_precision_aware_optimizer": True,
        "exp_avg_dtype": "bf16",
        "exp_avg_sq_dtype": "bf16",
    }
    te = {"transformer_impl": "transformer_engine", "attention_backend": "flash"}
    _, rank, save = save_of(optimizer=opt, ddp=DISTOPT, model=te)
    shard = rank.state.optimizer_params
    assert save.parts == {"optimizer.unscaled_state": 4 * 2 * shard}


def test_fsdp_dtensor_stages_its_shard_of_main_weights_and_moments():
    """The model's state dict hands Megatron-FSDP's fp32 main-weight DTensors; with the two
    moments, each rank's half of every tensor, 3 keys of 4 bytes: 2 * n bytes per tensor per key,
    a power of two for every per-layer tensor, 131072 for the 64000-element ones."""
    ddp = {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}
    _, rank, save = save_of(optimizer=DISTOPT, ddp=ddp, checkpoint={"ckpt_format": "fsdp_dtensor"})
    assert save.parts == {} and save.host_transient_bytes == 0
    assert save.resident == rank.state.total + rank.state.left_after_step + rank.buffers
    per_key = 2 * 4 * LAYER + 131_072 + 128 + 131_072
    assert save.host_staged_bytes == 3 * per_key


def test_async_save_stages_in_a_persistent_worker_with_its_own_cuda_context():
    persistent = {"async_save": True, "use_persistent_ckpt_worker": True}
    est, rank, save = save_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint=persistent)
    sync_est, _, sync = save_of(optimizer=DISTOPT, ddp=DISTOPT)
    assert save == sync  # the same tensors staged, now by the worker
    assert est.non_pytorch_bytes - sync_est.non_pytorch_bytes == CUDA_CONTEXT
    assert est.host(rank).parts["checkpoint worker"] == PROCESS
    # Megatron-LM runs --async-save only with the persistent worker; Megatron-Bridge defaults it on
    lm, _, _ = save_of(
        optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"async_save": True}, defaults="megatron-lm"
    )
    assert not lm.derived.async_save
    bridge, _, _ = save_of(
        optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"async_save": True}, defaults="megatron-bridge"
    )
    assert bridge.derived.async_save


def test_a_job_that_does_not_save_has_no_save_phase():
    est = estimate(gate(make_job()))
    assert est.save(est.ranks[0]) is None
    assert "checkpoint save" not in est.phase_peaks(est.ranks[0])


def test_fully_reshardable_at_world_size_1_peaks_above_training_and_is_judged():
    """A dense 1B-class job on one GPU (the issue's case): the save gathers the whole optimizer
    state, 12 bytes per parameter of the one bucket, beside the model state."""
    model = {
        "num_layers": 16,
        "hidden_size": 2048,
        "ffn_hidden_size": 8192,
        "num_attention_heads": 16,
        "num_query_groups": 8,
        "vocab_size": 128256,
        "seq_length": 2048,
        "attention_backend": "flash",
    }
    one_gpu = {
        "model": model,
        "cluster": {"num_gpus": 1, "gpu": "H200"},
        "train": {"micro_batch_size": 1, "global_batch_size": 1},
    }
    checkpoint = {"dist_ckpt_optim_fully_reshardable": True}
    est, rank, save = save_of(optimizer=DISTOPT, ddp=DISTOPT, checkpoint=checkpoint, **one_gpu)
    world = save.parts["optimizer.fully_reshardable_gather"] / 12
    assert 0 <= world - rank.state.optimizer_params < 128  # the buffer, padded to 128 elements
    assert save.peak_bytes > rank.peak_bytes
    assert est.judged_phase() == "checkpoint save"
    assert est.verdict_peak_bytes(rank) == save.peak_bytes
    plain, plain_rank, _ = save_of(optimizer=DISTOPT, ddp=DISTOPT, **one_gpu)
    assert plain.judged_phase() == "training"
    assert est.needed_bytes(rank) > plain.needed_bytes(plain_rank)


def test_json_has_the_save_beside_training_and_resume():
    est, _, save = save_of(
        optimizer=DISTOPT, ddp=DISTOPT, checkpoint={"dist_ckpt_optim_fully_reshardable": True}
    )
    doc = estimate_json(est, throughput_of(est.derived), None, ignored=["checkpoint.save_interval"])
    row = doc["ranks"][0]
    assert row["save"] == {
        "format": "torch_dist",
        "optimizer_sharding": "fully_reshardable",
        "async": False,
        "peak_bytes": save.peak_bytes,
        "resident_bytes": round(save.resident),
        "parts": {"optimizer.fully_reshardable_gather": 4 * (SHARD + 2 * BUCKET)},
        "host_staged_bytes": save.host_staged_bytes,
        "host_transient_bytes": save.host_transient_bytes,
    }
    assert row["phase_peaks"]["checkpoint save"] == save.peak_bytes
    assert doc["assumptions"][0] == "not used, their memory effect not modeled: checkpoint.save_interval"
    host = row["host"]
    assert host["parts"]["process"] == PROCESS
    assert host["parts"]["dataloader workers"] == DATALOADER_WORKERS * DATALOADER_WORKER
    assert host["per_node_bytes"] == 2 * host["rank_bytes"]  # 2 GPUs, both on one node
