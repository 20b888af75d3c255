"""What Transformer Engine allocates through PyTorch beyond what the local spec keeps.

Each term is read from Transformer Engine's and Megatron-Core's source (``docs/fusions.md``,
section "Transformer Engine's own allocations"); none applies to the local spec, so the measured
set's figures do not move. All of them are allocated once and kept for the whole run, so they
count beside every moment of the step, like the cuBLAS workspaces of ``core.persistent_buffers``.

- GEMM workspaces: TE's GEMMs take their own cuBLAS workspace from PyTorch, cached per device
  (``transformer_engine/pytorch/cpp_extensions/gemm.py`` ``get_cublas_workspace``): 32 MiB +
  1 KiB on Hopper and newer. Grouped GEMMs (``GroupedLinear``, Megatron's ``TEGroupedMLP``) take
  one such workspace per compute stream, and TE has 4 of them
  (``transformer_engine/common/util/multi_stream.cpp`` ``get_num_compute_streams``); GEMMs that
  overlap with userbuffers take one workspace of 3 times the size (``_NUM_MAX_UB_STREAMS``).
  The userbuffers themselves are ``cudaMalloc``/``cuMemCreate`` memory registered with the
  communicator (``transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers-host.cpp``
  ``register_user_buffer_collective``): outside PyTorch's counters.
- FP8 weight caches (``Derived.fp8_weight_copies == "cached"``): with Megatron's
  ``is_first_microbatch``, every TE linear keeps its FP8 weight in
  ``_fp8_workspaces["weight"]`` with the row-wise data and the column-wise copy backward needs:
  2 bytes per weight element, for the whole run. With ``fp8_param_gather`` the weights are FP8
  tensors themselves (1 byte plus their column-wise copy), which the weights' 2 bytes already
  cover, and no cache is made; with ``disable_parameter_transpose_cache`` each microbatch's
  forward saves a fresh copy for its backward instead, an activation
  (``activations.fp8_weight_copies``).
"""

from __future__ import annotations

from memtune.config.derived import Chunk, Derived
from memtune.estimate.params import ParamCounts, chunk_transformer_layer_params
from memtune.units import MiB

TE_GEMM_WORKSPACE = 32 * MiB + 1024  # get_cublas_workspace_size_bytes on Hopper and newer
TE_COMPUTE_STREAMS = 4  # multi_stream.cpp: num_compute_streams
USERBUFFERS_GEMM_STREAMS = 3  # gemm.py: _NUM_MAX_UB_STREAMS
FP8_WEIGHT_COPY_BYTES = 2  # row-wise FP8 data + its column-wise copy, per weight element


def persistent_allocations(d: Derived, chunks: tuple[Chunk, ...]) -> dict[str, float]:
    """TE's run-long allocations on a rank holding ``chunks``, by name (empty on the local spec)."""
    if not d.transformer_engine:
        return {}
    m = d.model
    allocations: dict[str, float] = {}
    # An MTP layer is built like the last decoder layer (params.chunk_transformer_layer_params).
    has_moe_layer = any(d.moe_layer_pattern[i] for c in chunks for i in c.layers) or any(
        c.mtp_layers and d.moe_layer_pattern[-1] for c in chunks
    )
    if m.moe_grouped_gemm and has_moe_layer:
        allocations["te.grouped_gemm_workspaces"] = TE_COMPUTE_STREAMS * TE_GEMM_WORKSPACE
    if m.tp_comm_overlap and d.tp > 1:
        allocations["te.userbuffers_gemm_workspace"] = USERBUFFERS_GEMM_STREAMS * TE_GEMM_WORKSPACE
    if d.fp8_weight_copies == "cached":
        # The TP-split and expert linears; norms, routers and biases (``replicated``) are not
        # quantized, nor are the embedding and the output layer (not TE modules in GPTModel).
        linear = sum((chunk_transformer_layer_params(d, c) for c in chunks), ParamCounts())
        allocations["te.fp8_weight_caches"] = FP8_WEIGHT_COPY_BYTES * (linear.dense + linear.expert)
    return allocations
