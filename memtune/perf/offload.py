"""What copying training state over the host link costs a step: layer-wise and fine-grained
activation offload, and the optimizer's CPU offload.

Each GPU copies over its own link to host memory (``Derived.network.host_link_bytes_per_s``, the
line rate of ``memtune/catalog/data/networks.yaml``) at the share of it pinned copies reach
(``HOST_COPY_EFFICIENCY``, measured on an H100: 0.86 of PCIe Gen5's 63 GB/s). Every GPU of a node offloads at the same time, each over its
own link; what the node's host memory can serve beside that is not modelled.

- Fine-grained offload (megatron-core ``fine_grained_activation_offload.py``) copies each group
  to the host on a side stream at its commit during the forward and reloads it ahead of its
  backward: the copies of one microbatch's chunk hide behind that chunk's forward and backward
  compute, and only what is longer shows.
- Layer-wise offload (``cpu_offloading``, megatron-core ``cpu_offload.py``) double-buffers one
  layer at a time: a layer's copy must finish before the layer after next runs, so each copy
  hides only behind one layer's compute.
- The CPU-offloading optimizer sends the gradient of each host-held parameter down and brings
  the updated weight back, and the host runs Adam on it, after the last backward.
"""

from __future__ import annotations

from memtune.config.derived import Chunk, Derived
from memtune.estimate.core import offloaded_per_microbatch
from memtune.perf import constants as K


def host_bytes_per_s(d: Derived) -> float:
    """What a GPU's pinned copies to or from the host reach, one direction."""
    return d.network.host_link_bytes_per_s * K.HOST_COPY_EFFICIENCY


def copy_seconds(d: Derived, chunk: Chunk) -> float:
    """Seconds a chunk's activation offload copies take one way per microbatch, at the pinned
    copies' share of the host link."""
    return offloaded_per_microbatch(d, chunk) / host_bytes_per_s(d)


def activation_offload_s(
    d: Derived, chunk: Chunk, forward_s: float, backward_s: float
) -> tuple[float, float]:
    """Seconds a chunk's activation offload adds to one microbatch's forward and backward
    passes, given the passes' own compute: the copies beyond what that compute hides, and for
    fine-grained offload at least the share of them a step shows even where the compute is
    longer (``FINE_GRAINED_OFFLOAD_EXPOSED_SHARE``, larger with one hardware queue)."""
    copy = copy_seconds(d, chunk)
    if copy == 0.0:
        return 0.0, 0.0
    if d.model.cpu_offloading:
        layers = max(1, len(chunk.layers))
        offloaded = min(d.activation_offload_layers, layers)
        # one layer's copy against one layer's compute, for each offloaded layer
        per_layer = copy / offloaded
        return (
            offloaded * max(0.0, per_layer - forward_s / layers),
            offloaded * max(0.0, per_layer - backward_s / layers),
        )
    share = K.FINE_GRAINED_OFFLOAD_EXPOSED_SHARE[d.one_hardware_queue]
    return max(copy - forward_s, share * copy), max(0.0, copy - backward_s)


def optimizer_offload_s(d: Derived, host_params: float) -> float:
    """Seconds the CPU-offloading optimizer spends on ``host_params`` parameters held on the
    host: their gradients down and weights up over the host link, and Adam on the CPU."""
    return host_params * (
        K.OPTIMIZER_OFFLOAD_BYTES_PER_PARAM / host_bytes_per_s(d) + 1 / K.CPU_ADAM_PARAMS_PER_S_PER_GPU
    )
