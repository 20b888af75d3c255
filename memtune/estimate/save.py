"""The save phase of one rank: its device peak while Megatron saves a checkpoint, and the host
memory the save takes (docs/save.md has every figure with its source).

``save_checkpoint`` runs between iterations: the model, its gradient buffers, the optimizer state
and the run-long buffers exist, no activation does. What the save adds on the device beside that:

- ``optimizer.fully_reshardable_gather``: the distributed optimizer's ``fully_reshardable`` state
  is gathered bucket by bucket and key by key (main weights, then each Adam moment) over NCCL
  to every data-parallel rank (``get_parameter_state_dp_zero(use_gloo_comm=False,
  return_on_all_ranks=True)``): the rank's shard copied to the device, the list of received
  shards, and the flat tensor ``ProcessGroupNCCL::allgather`` receives into before copying
  them out, all fp32, for the largest bucket. Over Gloo
  (``distrib_optim_fully_reshardable_mem_efficient``) it all stays on the host.
- ``optimizer.unscaled_state``: the precision-aware optimizer's ``dp_reshardable`` state is
  taken through Transformer Engine's ``FusedAdam.get_unscaled_state``, which returns a new
  fp32 tensor for every state kept in 16 or 8 bits; the state dict holds them until the save
  returns.

Everything else the formats do on the device is by reference (the state dict's tensors are the
live ones) or on the host. On the host every tensor a torch_dist save writes is copied to pinned
memory first (``FileSystemWriterAsync.preload_tensors``: ``.to("cpu", non_blocking=True)``, sync
and async alike), which PyTorch's caching host allocator rounds to a power of two and keeps for
the rest of the run; an async save does that in its persistent worker process, which also holds
a CUDA context of its own on the rank's GPU (``estimate/overhead.py``). The legacy format and
the fully_reshardable layout gather the optimizer state on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.estimate.core import RankEstimate
from memtune.estimate.params import ParamTensor
from memtune.estimate.state import PinnedHostCache, _shard_pieces, bucket_numels

# Formats whose save is modeled (torch_dcp, torch FSDP2's, is not).
MODELED_FORMATS = ("torch_dist", "fsdp_dtensor", "torch")
# Megatron-Core's optimizer state keys beside the main weights, which the data-parallel gathers
# allocate whatever the optimizer (``DistributedOptimizer.optimizer_state_keys``: Adam's two).
GATHERED_KEYS = 3
FP32 = 4


@dataclass(frozen=True)
class SaveEstimate:
    """One rank's save phase: its device peak and what the save holds on the host."""

    peak_bytes: int
    resident: float  # model state and run-long buffers when save_checkpoint starts
    parts: dict[str, float] = field(default_factory=dict)  # what the save adds on the device
    host_staged_bytes: int = 0  # pinned copies of what the rank writes, cached after the first save
    host_transient_bytes: int = 0  # pageable host memory while the save runs


@dataclass(frozen=True)
class Written:
    """What one rank writes from the device (bytes of each tensor, staged to pinned memory), and
    what it holds on the host besides: the optimizer state gathered there (fp32 elements), the
    bytes of the gather's temporaries, and of the views the writer clones."""

    device_tensors: list[float]
    host_gathered: float = 0.0
    host_gather_temporaries: float = 0.0
    host_clones: float = 0.0


def buffers_of(d: Derived, tensors: list[list[ParamTensor]]) -> list[tuple[list[list[ParamTensor]], int]]:
    """The rank's gradient buffers as (tensors per chunk, data-parallel shards): dense parameters
    over DP x CP, routed experts apart over expert-DP where they take the expert groups; frozen
    (LoRA base) parameters have none. Shards are 1 without the distributed optimizer."""
    if d.job.peft is not None:
        return []
    instances = d.job.ddp.num_distributed_optimizer_instances
    distributed = d.use_distributed_optimizer
    dense_shards = max(1, d.dp * d.cp // instances) if distributed else 1
    expert_shards = max(1, d.edp // instances) if distributed else 1
    if not d.experts_use_expert_groups:
        return [(tensors, dense_shards)]
    dense = [[t for t in chunk if not t.expert] for chunk in tensors]
    expert = [[t for t in chunk if t.expert] for chunk in tensors]
    return [(dense, dense_shards), (expert, expert_shards)]


def largest_bucket(d: Derived, tensors: list[list[ParamTensor]]) -> tuple[int, int]:
    """(world elements, shards) of the rank's largest gradient bucket."""
    found = (0, 1)
    for chunks, shards in buffers_of(d, tensors):
        for numel in bucket_numels(d, chunks, shards):
            found = max(found, (numel, shards))
    return found


def save_estimate(d: Derived, rank: RankEstimate, tensors: list[list[ParamTensor]]) -> SaveEstimate | None:
    """The save phase of a rank whose training estimate is ``rank`` and whose parameter tensors
    are ``tensors`` (per model chunk, ``params.chunk_param_tensors``); None when the job does not
    save or its format is not modeled."""
    if not d.saves or d.save_format not in MODELED_FORMATS:
        return None
    state = rank.state
    resident = state.total + state.left_after_step + rank.buffers
    parts: dict[str, float] = {}
    sharding = d.optimizer_save_sharding
    if d.fully_reshardable_gathered_on_device:
        world, shards = largest_bucket(d, tensors)
        parts["optimizer.fully_reshardable_gather"] = FP32 * (world / shards + 2 * world)
    if sharding == "dp_reshardable" and d.te_fused_adam and d.job.optimizer.use_precision_aware_optimizer:
        parts["optimizer.unscaled_state"] = FP32 * unscaled_states(d) * state.optimizer_params
    parts = {name: nbytes for name, nbytes in parts.items() if nbytes}
    written = written_by(d, rank, tensors)
    staged = PinnedHostCache()
    if d.save_format != "torch":
        staged.take(written.device_tensors)
    # torch.save copies one storage to the host at a time while it writes
    serialized = max(written.device_tensors, default=0.0) if d.save_format == "torch" else 0.0
    # The gather's temporaries are freed before the writer clones the views it writes.
    during = max(written.host_gather_temporaries, written.host_clones + serialized)
    return SaveEstimate(
        peak_bytes=round(resident + sum(parts.values())),
        resident=resident,
        parts=parts,
        host_staged_bytes=staged.total,
        host_transient_bytes=round(FP32 * written.host_gathered + during),
    )


def unscaled_states(d: Derived) -> int:
    """States of the precision-aware optimizer that ``get_unscaled_state`` copies to fp32: those
    kept in 16 or 8 bits (TE's main-weight remainders of bf16 weights are returned as they are)."""
    opt = d.job.optimizer
    main = opt.main_params_dtype if d.half_precision else "fp32"
    return sum(DTYPE_BYTES[dtype] < FP32 for dtype in (opt.exp_avg_dtype, opt.exp_avg_sq_dtype, main))


def written_by(d: Derived, rank: RankEstimate, tensors: list[list[ParamTensor]]) -> Written:
    """What the most-loaded data-parallel rank of a pipeline stage writes and gathers: its rank 0
    where replicated tensors are not spread over the data-parallel ranks."""
    weight_bytes = DTYPE_BYTES[d.param_dtype]
    flat = [t for chunk in tensors for t in chunk]
    if d.job.peft is not None:
        # Megatron-Bridge saves only the adapters of a LoRA job (apply_peft_adapter_filter_to_state_dict).
        adapters = rank.state.weights - weight_bytes * sum(t.numel for t in flat)
        return Written([adapters] if adapters > 0 else [])
    if d.save_format == "fsdp_dtensor":
        return Written(fsdp_dtensor_written(d, tensors))
    share = 1 / max(1, d.dp * d.cp) if d.save_spreads_replicated_tensors else 1.0
    replicated = [weight_bytes * t.numel for t in flat]
    sharding, per_param = d.optimizer_save_sharding, optimizer_bytes_per_param(d)
    if not d.optimizer_saved or not per_param:
        return Written([b * share for b in replicated])
    if sharding is None:  # the model-space state of Megatron's other optimizers, replicated like the weights
        replicated += [FP32 * t.numel for t in flat] * round(per_param / FP32)  # a tensor per key
        return Written([b * share for b in replicated])
    if sharding == "dp_reshardable":
        return Written([b * share for b in replicated] + own_shard_pieces(d, tensors, per_param))
    # fully_reshardable or dp_zero: gathered into fp32 buffers on the host
    gathered, temporaries = host_gather(d, tensors)
    clones = 0.0
    if sharding == "fully_reshardable":
        # the writer clones the views of the gathered buffers it writes; only rank 0 holds them
        # when they were gathered over Gloo
        clones = FP32 * gathered * (share if d.fully_reshardable_gathered_on_device else 1.0)
    return Written([b * share for b in replicated], gathered, temporaries, clones)


def fsdp_dtensor_written(d: Derived, tensors: list[list[ParamTensor]]) -> list[float]:
    """What a rank writes in Megatron-FSDP's format: its shard of the main weights (the model's
    state dict hands Megatron-FSDP's main-weight DTensors) and of each Adam moment, in the main
    weights' dtype, a tensor per parameter and key (measured: ``save-l1b-fsdp-ogp``, every byte
    of them staged in pinned memory by torch 2.11's DCP ``FileSystemWriter``)."""
    main = DTYPE_BYTES[d.fsdp_main_params_dtype or d.param_dtype]
    keys = 1 + (2 if d.optimizer_saved and d.job.optimizer.optimizer == "adam" else 0)
    pieces: list[float] = []
    for chunks, shards in buffers_of(d, tensors):
        sharded = shards if d.fsdp_strategy != "no_shard" else 1
        pieces += [main * t.numel / sharded for chunk in chunks for t in chunk] * keys
    return pieces


def host_gather(d: Derived, tensors: list[list[ParamTensor]]) -> tuple[float, float]:
    """The distributed optimizer's gather to the host (``get_parameter_state_dp_zero``): fp32
    elements of the buffers it fills for the main weights and each moment, and the bytes of its
    largest bucket's temporaries: the rank's shard of every key, and for the key being gathered
    the received shards, their concatenation and the previous key's concatenation, which its
    variable still holds."""
    buffers = [(chunk, shards) for chunks, shards in buffers_of(d, tensors) for chunk in chunks]
    elements = GATHERED_KEYS * sum(sum(t.numel for t in chunk) for chunk, _ in buffers)
    world, shards = largest_bucket(d, tensors)
    return elements, FP32 * GATHERED_KEYS * (world / shards + world)


def optimizer_bytes_per_param(d: Derived) -> float:
    """Bytes per parameter of the optimizer state a save writes: the fp32 main weights (the
    weights themselves in an fp32 job, already written) and Adam's moments, as the checkpoint
    stores them (fp32: unscaled by the precision-aware optimizer)."""
    opt = d.job.optimizer
    moments = 2 * FP32 if opt.optimizer == "adam" else 0
    return (FP32 if d.half_precision else 0) + moments


def own_shard_pieces(d: Derived, tensors: list[list[ParamTensor]], per_param: float) -> list[float]:
    """Bytes of each state tensor of the rank's own optimizer shard, piece by piece (the
    ``dp_reshardable`` layout writes each parameter's piece of each key as a tensor)."""
    pieces: list[float] = []
    keys = per_param / FP32
    for chunks, shards in buffers_of(d, tensors):
        for piece in _shard_pieces(d, chunks, shards, 0):
            pieces += [FP32 * piece.numel] * round(keys)
    return pieces
