"""Model state one rank holds: weights, gradient buffers, optimizer state.

Megatron-Core keeps bf16 weights and a contiguous gradient buffer (fp32 when
``grad_reduce_in_fp32``, else the weights' dtype) whole on every data-parallel rank; the
distributed optimizer shards only the fp32 main weights and Adam moments, over DP x CP for
dense parameters and over expert-DP for routed experts.
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


def model_state(d: Derived, local: ParamCounts, lora: AdapterParams, layers: int) -> ModelState:
    """State of one rank holding ``local`` base parameters and ``lora`` adapter parameters
    (routed-expert adapters live in the expert buffers, like routed experts).

    Megatron-FSDP shards the optimizer state (``optim``), then the gradients
    (``optim_grads``), then the weights too (``optim_grads_params``, which needs a bf16
    unsharded copy of the layer being computed and of the one being prefetched).
    """
    job, opt = d.job, d.job.optimizer
    half = d.half_precision
    weight_bytes = DTYPE_BYTES[d.param_dtype]
    frozen = job.peft is not None
    adapters = lora.total
    base_trainable = 0.0 if frozen else local.total
    trainable = base_trainable + adapters

    weights = weight_bytes * (local.total + adapters)
    grad_bytes = DTYPE_BYTES[d.grad_dtype]
    grads = grad_bytes * _padded(trainable, d)

    strategy = d.fsdp_strategy
    fsdp_shard = d.dp * d.cp
    if strategy in ("optim_grads", "optim_grads_params"):
        grads /= fsdp_shard
    if strategy == "optim_grads_params":
        per_layer = (local.total + adapters) / max(layers, 1)
        weights = weights / fsdp_shard + 2 * weight_bytes * per_layer

    instances = job.ddp.num_distributed_optimizer_instances
    if d.use_distributed_optimizer or strategy != "no_shard":
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
    if job.model.transformer_impl == "local" and opt.optimizer == "adam":
        step += 4 * max(optimizer_params - expert_optimizer_params, expert_optimizer_params)
    return ModelState(
        weights=weights,
        grads=grads,
        optimizer=optimizer,
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
