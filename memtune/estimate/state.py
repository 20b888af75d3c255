"""Model state one rank holds: weights, gradient buffers, optimizer state.

Megatron-Core keeps bf16 weights and a contiguous gradient buffer (fp32 when
``grad_reduce_in_fp32``, else the weights' dtype) whole on every data-parallel rank; the
distributed optimizer shards only the fp32 main weights and Adam moments, over DP x CP for
dense parameters and over expert-DP for routed experts. Megatron-FSDP keeps its own buffers
(:func:`_fsdp_state`).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.config.knobs import KnobSubset
from memtune.estimate.params import ParamCounts, ParamTensor
from memtune.peft.model import AdapterParams

DEFAULT_BUCKET_PARAMS = 40_000_000


@dataclass(frozen=True)
class ModelState:
    weights: float
    grads: float
    optimizer: float
    optimizer_step_transient: float  # temporaries of one optimizer step
    trainable: float  # parameters with gradients on this rank
    optimizer_params: float  # parameters whose optimizer state this rank keeps
    host_pinned: float = 0.0  # page-locked host memory the optimizer keeps
    host_pageable: float = 0.0  # ordinary host memory the optimizer keeps
    orphaned_optimizer_copies: float = 0.0  # device copies of a replaced optimizer (in ``optimizer``)
    # Of the step's temporaries, what stays until the next iteration: the gradients cast to the
    # main weights' dtype, which the optimizer holds as ``.grad`` until ``zero_grad``, and
    # Megatron-FSDP's units, gathered after the step for the next forward.
    left_after_step: float = 0.0

    @property
    def host(self) -> float:
        return self.host_pinned + self.host_pageable

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def _padded(numel: float, d: Derived) -> float:
    """The gradient buffer pads each bucket to a multiple of lcm(DP, 128) under the distributed optimizer."""
    if not d.use_distributed_optimizer or numel == 0:
        return numel
    bucket = d.bucket_size or max(DEFAULT_BUCKET_PARAMS, 1_000_000 * d.dp)
    multiple = math.lcm(d.dp * d.cp, 128)
    buckets = math.ceil(numel / bucket)
    return numel + buckets * multiple / 2


# The knobs a rank's state depends on besides its parameters: the data-parallel sizes (TP, PP,
# CP, EP and ETP set them), the sharding and the optimizer offload (memtune/plan/fast.py).
MODEL_STATE_KNOBS = KnobSubset("tp", "pp", "cp", "ep", "etp", "sharding", "fsdp_strategy", "offload")


def model_state(
    d: Derived,
    local: ParamCounts,
    lora: AdapterParams,
    units: ParamCounts | None = None,
    tensors: list[list[ParamTensor]] | None = None,
    dp_ranks: tuple[int, int] | None = None,
) -> ModelState:
    """State of one rank holding ``local`` base parameters and ``lora`` adapter parameters
    (routed-expert adapters live in the expert buffers, like routed experts); ``units`` are the
    base parameters inside transformer layers (Megatron-FSDP's units); ``tensors`` the base
    parameters tensor by tensor, per model chunk, and ``dp_ranks`` the rank's place in its
    data-parallel x context-parallel and expert data-parallel groups, for the optimizer CPU
    offload, whose device share differs from one data-parallel rank to the next (None: the
    worst of them)."""
    job, opt = d.job, d.job.optimizer
    if d.megatron_fsdp:
        return _fsdp_state(d, local, lora.total, units or ParamCounts())
    half = d.half_precision
    weight_bytes = DTYPE_BYTES[d.param_dtype]
    frozen = job.peft is not None
    adapters = lora.total
    base_trainable = 0.0 if frozen else local.total
    trainable = base_trainable + adapters

    weights = weight_bytes * (local.total + adapters)
    grad_bytes = DTYPE_BYTES[d.grad_dtype]
    grads = grad_bytes * _padded(trainable, d)

    instances = job.ddp.num_distributed_optimizer_instances
    dense_shard = expert_shard = 1
    if d.use_distributed_optimizer:
        dense_shard = max(1, d.dp * d.cp // instances)
        expert_shard = max(1, d.edp // instances)
        expert = lora.expert + (0.0 if frozen else local.expert)
        expert_optimizer_params = expert / expert_shard
        optimizer_params = (trainable - expert) / dense_shard + expert_optimizer_params
    else:
        expert_optimizer_params = lora.expert + (0.0 if frozen else local.expert)
        optimizer_params = trainable

    master = (
        0 if not half else (DTYPE_BYTES[opt.main_params_dtype] if opt.use_precision_aware_optimizer else 4)
    )
    moments = 8 if opt.optimizer == "adam" else 0
    if opt.use_precision_aware_optimizer and not opt.optimizer_cpu_offload:
        moments = DTYPE_BYTES[opt.exp_avg_dtype] + DTYPE_BYTES[opt.exp_avg_sq_dtype]
    if opt.optimizer_cpu_offload:
        shards = (dense_shard, expert_shard) if d.use_distributed_optimizer else (1, 1)
        return _hybrid_device_state(
            d, weights, grads, trainable, optimizer_params, moments, tensors, shards, dp_ranks
        )
    optimizer = (master + moments) * optimizer_params

    # bf16 gradients are copied to fp32 for the step; torch's foreach Adam (used where neither
    # Transformer Engine nor Apex provides FusedAdam) also materialises sqrt(v) for every
    # parameter of one param group at a time; routed experts have groups of their own only under
    # the expert process groups.
    # The fp32 copies are the main weights' ``.grad`` (``_copy_model_grads_to_main_grads``) until
    # the next iteration's ``optimizer.zero_grad``.
    cast = 4 * optimizer_params if half and grad_bytes < 4 and not opt.use_precision_aware_optimizer else 0.0
    grouped_apart = expert_optimizer_params if d.experts_use_expert_groups else 0.0
    step = cast + foreach_adam_temporaries(d, optimizer_params, grouped_apart)
    return ModelState(
        weights=weights,
        grads=grads,
        optimizer=optimizer,
        optimizer_step_transient=step,
        trainable=trainable,
        optimizer_params=optimizer_params,
        left_after_step=cast,
    )


def foreach_adam_temporaries(d: Derived, optimizer_params: float, expert_optimizer_params: float) -> float:
    """What torch's foreach Adam materialises in one step (sqrt(v) of the largest param group):
    only on the local spec, where neither Transformer Engine nor Apex provides FusedAdam."""
    if d.adam_kernel != "foreach" or d.job.optimizer.optimizer != "adam":
        return 0.0
    return 4 * max(optimizer_params - expert_optimizer_params, expert_optimizer_params)


def fsdp_gathered(d: Derived, params: ParamCounts) -> float:
    """Of ``params``, those whose Megatron-FSDP group is really sharded: a group over a
    single rank (DP x CP for dense parameters, expert-DP for routed experts) keeps its whole
    buffer and needs no unsharded temporary to gather or reduce."""
    dense_sharded, experts_sharded = d.fsdp_sharded_groups
    dense = params.dense + params.replicated if dense_sharded else 0.0
    return dense + (params.expert if experts_sharded else 0.0)


def _fsdp_state(d: Derived, local: ParamCounts, adapters: float, units: ParamCounts) -> ModelState:
    """Megatron-FSDP's buffers (megatron-core 0.19.2, ``ParamAndGradBuffer``).

    Each parameter group (dense or routed experts; under ``optim_grads_params`` also one per
    transformer layer) has a model-weight buffer in the weights' dtype, a main-weight buffer in
    ``megatron_fsdp_main_params_dtype`` and a main-gradient buffer in :attr:`Derived.grad_dtype`.
    The main weights and the optimizer state on them are sharded under every strategy except
    ``no_shard``, dense parameters over DP x CP and routed experts over expert-DP; the gradient
    buffer from ``optim_grads`` on, the model weights under ``optim_grads_params``. There the
    parameters outside transformer layers (embedding, output layer, final norm) are gathered
    at the first forward and stay gathered; a layer is gathered only while it runs (see
    ``core``), and all of them right after the step, which starts the next iteration's gather.
    The optimizer steps the main-weight shard with a ``.grad`` that is the gradient shard cast
    to the main weights' dtype: a copy unless the dtypes agree or the precision-aware optimizer
    takes the gradient as it is; it stays until the next ``zero_grad_buffer``.
    """
    opt = d.job.optimizer
    strategy = d.fsdp_strategy
    weight_bytes = DTYPE_BYTES[d.param_dtype]
    grad_bytes = DTYPE_BYTES[d.grad_dtype]
    frozen = d.job.peft is not None
    total = local.total + adapters
    trainable = (0.0 if frozen else local.total) + adapters
    expert = 0.0 if frozen else local.expert
    dense_shard = d.dp * d.cp if strategy != "no_shard" else 1
    expert_shard = d.edp if strategy != "no_shard" else 1

    def shard(params: float, expert_params: float) -> float:
        return (params - expert_params) / dense_shard + expert_params / expert_shard

    optimizer_params = shard(trainable, expert)
    if strategy == "optim_grads_params":
        # The parameters outside transformer layers stay gathered, where their group is sharded.
        outside = total - units.total if d.fsdp_sharded_groups[0] else 0.0
        weights = weight_bytes * (shard(total, local.expert) + outside)
    else:
        weights = weight_bytes * total
    grads = grad_bytes * (
        optimizer_params if strategy in ("optim_grads", "optim_grads_params") else trainable
    )

    main_dtype = d.fsdp_main_params_dtype or d.param_dtype
    main_bytes = DTYPE_BYTES[main_dtype] if d.fsdp_main_params_dtype else 0
    moments = 0
    if opt.optimizer == "adam":
        moments = (
            DTYPE_BYTES[opt.exp_avg_dtype] + DTYPE_BYTES[opt.exp_avg_sq_dtype]
            if opt.use_precision_aware_optimizer
            else 2 * DTYPE_BYTES[main_dtype]
        )
    cast = 0.0
    if d.grad_dtype != main_dtype and not opt.use_precision_aware_optimizer:
        cast = DTYPE_BYTES[main_dtype] * optimizer_params
    gathered_after_step = weight_bytes * fsdp_gathered(d, units) if strategy == "optim_grads_params" else 0.0
    # Megatron-FSDP's optimizer parameters do not carry the ``allreduce`` attribute that puts
    # routed experts in their own param group, so torch's foreach Adam takes them all at once.
    foreach = foreach_adam_temporaries(d, optimizer_params, 0.0)
    step = cast + max(foreach, gathered_after_step)
    return ModelState(
        weights=weights,
        grads=grads,
        optimizer=(main_bytes + moments) * optimizer_params,
        optimizer_step_transient=step,
        trainable=trainable,
        optimizer_params=optimizer_params,
        left_after_step=cast + gathered_after_step,
    )


class PinnedHostCache:
    """PyTorch's caching host allocator, which every ``pin_memory`` tensor goes through: it
    rounds each request up to a power of two, hands a freed block to the next request of the
    same size, and keeps every block until ``empty_cache``; ``torch.cuda.host_memory_stats()``
    reports them all as allocated. Requests of one kind (kept, or freed at once) are handled in
    bulk: blocks of different sizes never serve each other, so only the count per size matters."""

    def __init__(self) -> None:
        self.free: Counter[int] = Counter()
        self.total = 0

    @staticmethod
    def _sizes(nbytes: Iterable[float]) -> Counter[int]:
        # The next power of two at or above each request (1 for anything up to a byte).
        return Counter(1 << (max(math.ceil(n), 1) - 1).bit_length() for n in nbytes)

    def take(self, nbytes: Iterable[float]) -> None:
        """Requests whose blocks are kept."""
        for size, count in self._sizes(nbytes).items():
            reused = min(count, self.free[size])
            self.free[size] -= reused
            self.total += size * (count - reused)

    def transient(self, nbytes: Iterable[float]) -> None:
        """Requests each freed before the next: one block per size, cached afterwards."""
        for size in self._sizes(nbytes):
            if not self.free[size]:
                self.total += size
                self.free[size] = 1


def _offload_walk(tensors: list[ParamTensor], fraction: float) -> tuple[float, list[float]]:
    """HybridDeviceOptimizer's split (megatron-core 0.19.2,
    ``_get_sub_optimizer_param_groups``): the weight-decay group, then the group without,
    tensor by tensor; a tensor goes to the host while less than ``fraction`` of all is there,
    so the last one offloaded overshoots. Returns (numel left on the device, numel of each
    offloaded tensor)."""
    threshold = fraction * sum(t.numel for t in tensors)
    device, on_host = 0.0, 0.0
    offloaded: list[float] = []
    for tensor in [t for t in tensors if t.decayed] + [t for t in tensors if not t.decayed]:
        if on_host < threshold:
            offloaded.append(tensor.numel)
            on_host += tensor.numel
        else:
            device += tensor.numel
    return device, offloaded


def _shard_pieces(d: Derived, chunks: list[list[ParamTensor]], shards: int, rank: int) -> list[ParamTensor]:
    """The pieces of each tensor in one data-parallel rank's optimizer shard (megatron-core
    0.19.2, ``_compute_per_buffer_param_layout`` and ``_build_model_gbuf_range``): each chunk's
    gradient buffer holds its tensors in reverse order, each starting at a multiple of 64
    elements, split into buckets (one per chunk after the first, or without
    ``overlap_grad_reduce``) whose ends are padded to a multiple of lcm(shards, 128); the rank
    owns the ``rank``-th of ``shards`` equal slices of every bucket."""
    return list(_pieces_of(d.ddp_bucket_size(shards), tuple(tuple(c) for c in chunks), shards, rank))


# Cached: the planner walks the same shards once per optimizer offload fraction it tries, one
# fraction after the other (a few entries suffice; a large model's shards hold many pieces).
def _buffer_layout(
    tensors: tuple[ParamTensor, ...], bucket_size: int | None, shards: int
) -> tuple[list[tuple[int, int, ParamTensor]], list[tuple[int, int]]]:
    """One chunk's gradient buffer: where each tensor sits (in reverse order, each starting at a
    multiple of 64 elements) and the buckets, whose ends are padded to a multiple of
    lcm(shards, 128); ``bucket_size`` None makes one bucket."""
    multiple = math.lcm(shards, 128)
    buckets: list[tuple[int, int]] = []
    placed: list[tuple[int, int, ParamTensor]] = []
    position = bucket_start = 0
    for tensor in reversed(tensors):
        start = math.ceil(position / 64) * 64
        end = start + round(tensor.numel)
        placed.append((start, end, tensor))
        position = end
        if bucket_size is not None and end - bucket_start >= bucket_size:
            position = math.ceil(end / multiple) * multiple
            buckets.append((bucket_start, position))
            bucket_start = position
    if position > bucket_start:
        buckets.append((bucket_start, math.ceil(position / multiple) * multiple))
    return placed, buckets


def bucket_numels(d: Derived, chunks: list[list[ParamTensor]], shards: int) -> list[int]:
    """Elements of each gradient bucket (padding included) of the buffers holding ``chunks``'
    tensors, one buffer per chunk, sharded over ``shards`` data-parallel ranks (the first chunk
    takes ``DDP.bucket_size``, the others one bucket each: :func:`_shard_pieces`)."""
    bucket_size = d.ddp_bucket_size(shards)
    numels = []
    for index, tensors in enumerate(chunks):
        if tensors:
            _, buckets = _buffer_layout(tuple(tensors), bucket_size if index == 0 else None, shards)
            numels += [end - start for start, end in buckets]
    return numels


@functools.lru_cache(maxsize=64)
def _pieces_of(
    bucket_size: int | None, chunks: tuple[tuple[ParamTensor, ...], ...], shards: int, rank: int
) -> tuple[ParamTensor, ...]:
    """:func:`_shard_pieces` with the first chunk's bucket size (None: one bucket per chunk)."""
    pieces: list[ParamTensor] = []
    for index, tensors in enumerate(chunks):
        placed, buckets = _buffer_layout(tensors, bucket_size if index == 0 else None, shards)
        owned = [(b + (e - b) // shards * rank, b + (e - b) // shards * (rank + 1)) for b, e in buckets]
        # Tensors and owned ranges both run in buffer order: sweep them together.
        first = 0
        for start, end, tensor in placed:
            while first < len(owned) and owned[first][1] <= start:
                first += 1
            for low, high in owned[first:]:
                if low >= end:
                    break
                numel = min(end, high) - max(start, low)
                if numel > 0:
                    pieces.append(ParamTensor(numel, tensor.decayed, tensor.expert))
    return tuple(pieces)


def _hybrid_device_state(
    d: Derived,
    weights: float,
    grads: float,
    trainable: float,
    optimizer_params: float,
    moments: float,
    tensors: list[list[ParamTensor]] | None,
    shards: tuple[int, int],
    dp_ranks: tuple[int, int] | None,
) -> ModelState:
    """Megatron-Core's HybridDeviceOptimizer (``optimizer_cpu_offload``, megatron-core 0.19.2).

    ``get_megatron_optimizer`` builds one optimizer for dense parameters and one for routed
    experts, and each builds two HybridDeviceOptimizers. The first, over the whole unsharded
    parameters, already splits them (:func:`_offload_walk`): an offloaded tensor gets a
    transient pinned copy and a pageable fp32 copy, one left on the device an fp32 copy there.
    ``DistributedOptimizer.__init__`` replaces it with a second over its shard, but the first
    stays alive: its sub-optimizers' step hooks close over it, a reference cycle that only a
    full garbage collection frees. With ``train.manual_gc`` (Megatron-LM's ``--manual-gc``) one
    runs before training and its device copies are gone; otherwise the automatic collector may
    not run one for a long time, so they are counted, the bound a job must fit in. Its host
    copies count either way: the host figure is the process's peak, reached while both exist.
    The second walks the shard's pieces (:func:`_shard_pieces`), and the granularity
    is whole pieces: a rank whose shard is one piece offloads all of it for any fraction above
    0. A piece on the device gets an fp32 master copy and fp32 torch Adam moments (whatever
    ``exp_avg_dtype`` says) stepped by a fused Adam, and an fp32 copy of its gradient when the
    gradient buffer is not fp32; one on the host gets a pageable fp32 master with its moments
    and, at the first step, a pinned fp32 buffer its gradient is copied into. Without
    ``dp_ranks`` the device share is the bound every rank stays under, (1 - fraction) of the
    shard, and the host side is the first rank's.
    """
    fraction = d.job.optimizer.optimizer_offload_fraction
    master = 4 if d.half_precision else 0
    device_bytes = master + moments + (4 if DTYPE_BYTES[d.grad_dtype] < 4 else 0)
    if tensors is None or d.job.peft is not None:
        # Without the tensors (or for LoRA adapters, not walked here) the split is the fraction.
        param_bytes = DTYPE_BYTES[d.param_dtype]
        return ModelState(
            weights=weights,
            grads=grads,
            optimizer=device_bytes * (1.0 - fraction) * optimizer_params,
            optimizer_step_transient=0.0,
            trainable=trainable,
            optimizer_params=optimizer_params,
            host_pinned=(param_bytes + 4) * fraction * optimizer_params,
            host_pageable=(4 + moments) * fraction * optimizer_params,
        )
    orphaned, shard_device, host_pinned, host_pageable = _hybrid_device_walks(
        d, moments, tensors, shards, dp_ranks
    )
    return ModelState(
        weights=weights,
        grads=grads,
        optimizer=orphaned + device_bytes * shard_device,
        optimizer_step_transient=0.0,
        trainable=trainable,
        optimizer_params=optimizer_params,
        host_pinned=host_pinned,
        host_pageable=host_pageable,
        orphaned_optimizer_copies=orphaned,
    )


def _hybrid_device_walks(
    d: Derived,
    moments: float,
    tensors: list[list[ParamTensor]],
    shards: tuple[int, int],
    dp_ranks: tuple[int, int] | None,
) -> tuple[float, float, float, float]:
    """The orphaned copies' device bytes, the shard's numel on the device, pinned and pageable host bytes."""
    fraction = d.job.optimizer.optimizer_offload_fraction
    half = d.half_precision
    param_bytes = DTYPE_BYTES[d.param_dtype]
    master = 4 if half else 0
    pinned = PinnedHostCache()
    orphaned = pageable = 0.0
    shard_device = 0.0
    shard_offloaded: list[float] = []
    dense_rank, expert_rank = dp_ranks or (0, 0)
    for expert, shard_count, rank in ((False, shards[0], dense_rank), (True, shards[1], expert_rank)):
        chunks = [[t for t in chunk if t.expert == expert] for chunk in tensors]
        everything = [t for chunk in chunks for t in chunk]
        if not everything:
            continue
        first_device, first_offloaded = _offload_walk(everything, fraction)
        if not d.job.train.manual_gc:
            orphaned += master * first_device
        pieces = _shard_pieces(d, chunks, shard_count, rank)
        device, offloaded = _offload_walk(pieces, fraction)
        requests = [numel * (param_bytes if half else 4) for numel in first_offloaded + offloaded]
        if half:
            pinned.transient(requests)
        else:
            pinned.take(requests)  # an fp32 parameter's pinned copy is its host master
        pageable += master * sum(first_offloaded) + (master + moments) * sum(offloaded)
        if dp_ranks is None:
            shard = sum(p.numel for p in pieces)
            device = max(device, (1.0 - fraction) * shard)
        shard_device += device
        shard_offloaded += offloaded
    pinned.take(4 * numel for numel in shard_offloaded)
    return orphaned, shard_device, float(pinned.total), pageable
