"""The data-parallel collectives of one model chunk under each sharding strategy, priced on the
declared fabric at the data-parallel group's real span.

What each strategy moves and when, read from Megatron-Core at NVIDIA/Megatron-LM d98e8a64dd:

- **DDP** (``distributed/distributed_data_parallel.py``, ``param_and_grad_buffer.py``): the
  gradients are all-reduced once a step, bucket by bucket during the last microbatch's backward
  with ``overlap_grad_reduce`` (``bucket_size``: max(4e7, 1e6 x DP) parameters), else after it.
- **Distributed optimizer**: the same buckets reduce-scattered, and the updated weights
  all-gathered once a step, during the next step's forwards with ``overlap_param_gather``
  (``align_param_gather`` issues every chunk's gather at once), else after the optimizer.
- **Megatron-FSDP** (``distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py``), each
  ``TransformerLayer`` one unit (``mcore_fsdp_adapter.py``), the group DP x CP:

  | strategy | per microbatch | once a step |
  |---|---|---|
  | ``no_shard`` | nothing | gradient all-reduce (last microbatch) |
  | ``optim`` | nothing | gradient reduce-scatter (last microbatch); weight all-gather |
  | ``optim_grads`` | gradient reduce-scatter (``grad_reduce_every_bprop``) | weight all-gather |
  | ``optim_grads_params`` | weight all-gather before each unit's forward and again before its backward (released after each: ``_post_forward``, ``_post_backward_release_module``), gradient reduce-scatter after its backward | nothing (the next forward gathers) |

  The gathers run on their own stream, prefetched ahead of compute in module order
  (``AllGatherPipeline.all_gather_params``, up to half the communication unit, at least 5e8
  elements, ahead); nothing before a pass gathers its first unit, so that gather is exposed. The
  reduce-scatters share the gathers' process group, whose NCCL communicator runs them in launch
  order (``fsdp/src/docs/runtime_schedule.md``), so a backward's communication is its gathers
  plus its reduce-scatters. Activation recompute keeps the units gathered through the backward
  (``TrainingState.PRE_BACKWARD``): no extra gather. Torch FSDP2 and ZeRO-3 move the same bytes
  on the same schedule and are priced alike.

A pass with Megatron-FSDP then takes its compute or its communication, whichever is longer,
plus the first unit's gather (:func:`exposed`). Weights are gathered in their own dtype (FP8
with ``fp8_param_gather``), gradients reduced in the gradient buffer's (``Derived.grad_dtype``).
Dense parameters go over the DP x CP group (stride TP), routed experts over the expert-DP group
(stride ETP x EP), each costed by :func:`memtune.perf.collectives.collective`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memtune.catalog.network import Network
from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.perf.collectives import Group, Op, collective

FSDP_PER_MICROBATCH_GATHER = "optim_grads_params"
FSDP_PER_MICROBATCH_REDUCE = ("optim_grads", "optim_grads_params")


@dataclass(frozen=True)
class DataParallelWork:
    """One chunk's data-parallel collectives, in seconds on the data-parallel stream."""

    forward_s: float  # per microbatch, during the chunk's forward (FSDP weight gathers)
    backward_s: float  # per microbatch, during its backward (FSDP gathers and reduce-scatters)
    first_gather_s: float  # the gather of a pass's first unit, which nothing ahead of it hides
    grad_reduce_s: float  # once a step: the gradient all-reduce or reduce-scatter
    param_gather_s: float  # once a step: the updated weights' all-gather
    buckets: int  # DDP buckets the two once-a-step collectives are split into


def groups(d: Derived) -> tuple[Group, Group]:
    """The dense data-parallel group (DP x CP, consecutive members TP ranks apart: Megatron's
    order ``tp-cp-ep-dp-pp``) and the expert data-parallel group (members ETP x EP apart)."""
    return Group(d.dp * d.cp, stride=d.tp), Group(d.edp, stride=d.etp * d.ep)


def gather_bytes_per_param(d: Derived) -> float:
    """Bytes an all-gather moves per weight: one with ``fp8_param_gather`` under an FP8 recipe
    (the quantised copy; MXFP8 gathers its row- and column-wise copies, two), else the
    weights' own dtype."""
    if d.model.fp8 is not None and d.model.fp8_param_gather:
        return 2.0 if d.model.fp8_recipe == "mxfp8" else 1.0
    return float(DTYPE_BYTES[d.param_dtype])


def exposed(communication_s: float, first_s: float, compute_s: float) -> float:
    """What a pass's prefetched communication adds to it: the first unit's gather, then
    whatever of the rest its compute does not cover."""
    return first_s + max(0.0, communication_s - first_s - compute_s)


def chunk_work(
    d: Derived,
    network: Network,
    gpu_name: str,
    dense_params: float,
    expert_params: float,
    units: int,
    adapters: tuple[float, float] | None,
) -> DataParallelWork:
    """The data-parallel collectives of a chunk whose rank holds ``dense_params`` and
    ``expert_params`` (before data-parallel sharding) in ``units`` FSDP units (its layers).
    Under LoRA, ``adapters`` are the (dense, routed-expert) adapter parameters: the frozen base
    has no gradient and DDP's buffers hold the adapters alone, so they are what is reduced and,
    under a sharded optimizer, gathered back (in the weights' dtype: FP8 covers the base)."""
    dense, experts = groups(d)
    grad = DTYPE_BYTES[d.grad_dtype]
    if adapters is None:
        trainable_dense, trainable_experts = dense_params, expert_params
        updated_weight = weight = gather_bytes_per_param(d)
    else:
        trainable_dense, trainable_experts = adapters
        weight, updated_weight = gather_bytes_per_param(d), float(DTYPE_BYTES[d.param_dtype])
    bucket = d.ddp_bucket_size(d.dp * d.cp)  # None: one bucket per buffer
    buckets = max(1, math.ceil((trainable_dense + trainable_experts) / bucket)) if bucket else 1

    def each(op: Op, bytes_dense: float, bytes_experts: float, pieces: int) -> float:
        """``pieces`` collectives (units or buckets) of an equal share of the bytes each."""
        return pieces * (
            collective(op, bytes_dense / pieces, dense, network, gpu_name).seconds
            + collective(op, bytes_experts / pieces, experts, network, gpu_name).seconds
        )

    strategy = d.fsdp_strategy
    units = max(1, units)
    forward = backward = first = grad_reduce = param_gather = 0.0
    if strategy == FSDP_PER_MICROBATCH_GATHER:
        forward = backward = each(Op.ALL_GATHER, weight * dense_params, weight * expert_params, units)
        first = forward / units
    # Megatron-FSDP's strategy decides alone; without it, the distributed optimizer does
    sharded = strategy != "no_shard" if d.job.ddp.use_megatron_fsdp else d.use_distributed_optimizer
    if strategy in FSDP_PER_MICROBATCH_REDUCE:
        backward += each(Op.REDUCE_SCATTER, grad * trainable_dense, grad * trainable_experts, units)
    else:
        op = Op.REDUCE_SCATTER if sharded else Op.ALL_REDUCE
        grad_reduce = each(op, grad * trainable_dense, grad * trainable_experts, buckets)
    if sharded and strategy != FSDP_PER_MICROBATCH_GATHER:
        param_gather = each(
            Op.ALL_GATHER, updated_weight * trainable_dense, updated_weight * trainable_experts, buckets
        )
    return DataParallelWork(forward, backward, first, grad_reduce, param_gather, buckets)
