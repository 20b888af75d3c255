"""Model state one rank holds: weights, gradient buffers, optimizer state.

Megatron-Core keeps bf16 weights and a contiguous gradient buffer (fp32 when
``grad_reduce_in_fp32``, else the weights' dtype) whole on every data-parallel rank; the
distributed optimizer shards only the fp32 main weights and Adam moments, over DP x CP for
dense parameters and over expert-DP for routed experts. Megatron-FSDP keeps its own buffers
(:func:`_fsdp_state`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.estimate.params import ParamCounts
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
    bucket = d.job.ddp.bucket_size or max(DEFAULT_BUCKET_PARAMS, 1_000_000 * d.dp)
    multiple = math.lcm(d.dp * d.cp, 128)
    buckets = math.ceil(numel / bucket)
    return numel + buckets * multiple / 2


def model_state(
    d: Derived, local: ParamCounts, lora: AdapterParams, units: ParamCounts | None = None
) -> ModelState:
    """State of one rank holding ``local`` base parameters and ``lora`` adapter parameters
    (routed-expert adapters live in the expert buffers, like routed experts); ``units`` are the
    base parameters inside transformer layers (Megatron-FSDP's units)."""
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
        return _hybrid_device_state(d, weights, grads, trainable, optimizer_params, moments)
    optimizer = (master + moments) * optimizer_params

    # bf16 gradients are copied to fp32 for the step; torch's foreach Adam (used where neither
    # Transformer Engine nor Apex provides FusedAdam) also materialises sqrt(v) for every
    # parameter of one param group at a time, and Megatron puts routed experts in their own groups.
    step = 0.0
    if half and grad_bytes < 4 and not opt.use_precision_aware_optimizer:
        step += 4 * optimizer_params
    step += _foreach_adam_temporaries(d, optimizer_params, expert_optimizer_params)
    return ModelState(
        weights=weights,
        grads=grads,
        optimizer=optimizer,
        optimizer_step_transient=step,
        trainable=trainable,
        optimizer_params=optimizer_params,
    )


def _foreach_adam_temporaries(d: Derived, optimizer_params: float, expert_optimizer_params: float) -> float:
    if d.model.transformer_impl != "local" or d.job.optimizer.optimizer != "adam":
        return 0.0
    return 4 * max(optimizer_params - expert_optimizer_params, expert_optimizer_params)


def fsdp_gathered(d: Derived, params: ParamCounts) -> float:
    """Of ``params``, those whose Megatron-FSDP group is really sharded: a group over a
    single rank (DP x CP for dense parameters, expert-DP for routed experts) keeps its whole
    buffer and needs no unsharded temporary to gather or reduce."""
    dense = params.dense + params.replicated if d.dp * d.cp > 1 else 0.0
    return dense + (params.expert if d.edp > 1 else 0.0)


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
        weights = weight_bytes * (shard(total, local.expert) + total - units.total)
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
    foreach = _foreach_adam_temporaries(d, optimizer_params, 0.0)
    step = cast + max(foreach, gathered_after_step)
    return ModelState(
        weights=weights,
        grads=grads,
        optimizer=(main_bytes + moments) * optimizer_params,
        optimizer_step_transient=step,
        trainable=trainable,
        optimizer_params=optimizer_params,
    )


def _hybrid_device_state(
    d: Derived, weights: float, grads: float, trainable: float, optimizer_params: float, moments: float
) -> ModelState:
    """Megatron-Core's HybridDeviceOptimizer (``optimizer_cpu_offload``) over the distributed
    optimizer's shard of ``optimizer_params`` parameters.

    It walks the shard in order and moves parameters to the host until ``offload_fraction`` of
    it is there. Every parameter is updated in fp32 (``param_update_in_fp32``): one on the device
    gets an fp32 master copy and torch Adam moments (fp32 whatever ``exp_avg_dtype`` says) on
    the device, stepped by a fused Adam (no foreach temporaries); one on the host gets a pinned
    copy of the weight, an unpinned fp32 master with its moments, and a pinned fp32 buffer its
    gradient is copied into. Gradients that are not fp32 get a persistent fp32 copy on the
    device for the device part.
    """
    opt = d.job.optimizer
    host_share = opt.optimizer_offload_fraction
    device_params = (1.0 - host_share) * optimizer_params
    host_params = host_share * optimizer_params
    optimizer = (4 + moments) * device_params
    if DTYPE_BYTES[d.grad_dtype] < 4:
        optimizer += 4 * device_params
    pinned = (DTYPE_BYTES[d.param_dtype] + 4) * host_params
    return ModelState(
        weights=weights,
        grads=grads,
        optimizer=optimizer,
        optimizer_step_transient=0.0,
        trainable=trainable,
        optimizer_params=optimizer_params,
        host_pinned=pinned,
        host_pageable=(4 + moments) * host_params,
    )
