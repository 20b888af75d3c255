"""The checkpoint round trip of ``memtune measure --resume``, inside the measurement process.

It saves and loads with Megatron-Core's own calls in the order Megatron-LM's
``megatron/training/checkpointing.py`` makes them (``generate_state_dict``,
``_load_global_dist_base_checkpoint``, ``_load_base_checkpoint``, ``load_checkpoint``), which
megatron-core's package does not ship: the sharded state dict of every model chunk and of the
optimizer (built ``is_loading`` before a load, which allocates the optimizer's state), the
distributed checkpoint's save and load (wrapped for a fully parallel load), then each chunk's
``load_state_dict`` and the optimizer's. Like the runner it needs torch and megatron-core, imports
them only inside its functions, and nothing else from memtune.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from megatron.core.optimizer import MegatronOptimizer

LEGACY_FILE = "model_optim_rng.pt"


def _key(index: int, count: int) -> str:
    return "model" if count == 1 else f"model{index}"


def _metadata(resume: dict[str, Any]) -> dict[str, Any]:
    """What Megatron-LM's ``_build_sharded_state_dict_metadata`` gives both state dicts."""
    from megatron.core import parallel_state

    metadata: dict[str, Any] = {
        "singleton_local_shards": False,
        "dp_cp_group": parallel_state.get_data_parallel_group(with_context_parallel=True),
    }
    if resume["distrib_optim_sharding_type"]:
        metadata["distrib_optim_sharding_type"] = resume["distrib_optim_sharding_type"]
    if resume["distrib_optim_sharding_type"] == "fully_reshardable":
        metadata["distrib_optim_fully_reshardable_mem_efficient"] = resume.get(
            "fully_reshardable_mem_efficient", False
        )
    return metadata


def _sharded(resume: dict[str, Any], model: list[Any], optimizer: MegatronOptimizer, loading: bool) -> Any:
    """The state dict Megatron-LM's ``generate_state_dict`` builds, from the unwrapped chunks
    (its ``save_checkpoint`` and ``load_checkpoint`` call ``unwrap_model`` first)."""
    from megatron.core.utils import unwrap_model

    metadata = _metadata(resume)
    state: dict[str, Any] = {}
    chunks = unwrap_model(model)
    for index, chunk in enumerate(chunks):
        if resume["format"] == "torch_dist":
            state[_key(index, len(model))] = chunk.sharded_state_dict(metadata=metadata)
        else:
            state[_key(index, len(model))] = chunk.state_dict_for_save_checkpoint()
    if (resume.get("save_optim", True) and not loading) or (loading and resume["load_optim"]):
        state["optimizer"] = optimizer.sharded_state_dict(state, is_loading=loading, metadata=metadata)
    if resume["format"] == "fsdp_dtensor" and resume["gated_linear_unit"]:
        from megatron.core.transformer.fsdp_dtensor_checkpoint import handle_swiglu_in_state_dict

        # Megatron-LM's preprocess_fsdp_dtensor_state_dict splits fused SwiGLU halves so.
        state["model"], optimizer_state = handle_swiglu_in_state_dict(
            chunks[0], state["model"], state.get("optimizer")
        )
        if "optimizer" in state:
            state["optimizer"] = optimizer_state
    return state


def save(resume: dict[str, Any], model: list[Any], optimizer: MegatronOptimizer) -> None:
    """Save as Megatron-LM's ``save_checkpoint`` does for the plan's format and options: the
    distributed optimizer's own file first for the legacy format (``save_parameter_state``), a
    fully parallel save strategy, an async save through the persistent worker."""
    import torch

    directory = resume["directory"]
    os.makedirs(directory, exist_ok=True)
    if resume["format"] == "torch":
        from megatron.core.utils import unwrap_model

        if resume["distrib_optim_sharding_type"] and resume.get("save_optim", True):
            optimizer.save_parameter_state(os.path.join(directory, "distrib_optim.pt"))
        chunks = unwrap_model(model)
        state = {_key(i, len(chunks)): c.state_dict_for_save_checkpoint() for i, c in enumerate(chunks)}
        if resume.get("save_optim", True):
            state["optimizer"] = optimizer.state_dict()
        torch.save(state, os.path.join(directory, LEGACY_FILE))
        return
    state = _sharded(resume, model, optimizer, loading=False)
    if resume["format"] == "torch_dist":
        _save_torch_dist(resume, state, directory)
    else:
        from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

        dcp_save(state, checkpoint_id=directory)


def _save_torch_dist(resume: dict[str, Any], state: Any, directory: str) -> None:
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.dist_checkpointing.strategies.fully_parallel import (
        FullyParallelSaveStrategyWrapper,
    )
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

    strategy: Any = TorchDistSaveShardedStrategy()
    if resume.get("fully_parallel_save"):
        group = parallel_state.get_data_parallel_group(with_context_parallel=True)
        strategy = FullyParallelSaveStrategyWrapper(strategy, group)
    if not resume.get("async_save"):
        dist_checkpointing.save(state, directory, strategy)
        return
    # Megatron-LM runs --async-save in a persistent worker process (AsyncCallsQueue(persistent=True));
    # "mcore" is the async strategy megatron-core ships (Megatron-LM's default "nvrx" needs
    # nvidia-resiliency-ext, which is not installed here).
    from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

    queue = AsyncCallsQueue(persistent=True)
    request = dist_checkpointing.save(
        state, directory, strategy, async_sharded_save=True, async_strategy="mcore"
    )
    queue.schedule_async_request(request)
    queue.maybe_finalize_async_calls(blocking=True)
    queue.close()


def load(resume: dict[str, Any], model: list[Any], optimizer: MegatronOptimizer) -> None:
    """Load what :func:`save` wrote into ``model`` and ``optimizer``; every copy it makes is
    released when it returns, as when Megatron-LM's ``load_checkpoint`` returns."""
    import torch

    directory = resume["directory"]
    if resume["format"] == "torch":
        state = torch.load(os.path.join(directory, LEGACY_FILE), map_location="cpu", weights_only=False)
    elif resume["format"] == "torch_dist":
        from megatron.core import dist_checkpointing, parallel_state
        from megatron.core.dist_checkpointing.strategies.fully_parallel import (
            FullyParallelLoadStrategyWrapper,
        )
        from megatron.core.dist_checkpointing.strategies.torch import TorchDistLoadShardedStrategy

        strategy: Any = TorchDistLoadShardedStrategy()
        if resume["fully_parallel_load"]:
            group = parallel_state.get_data_parallel_group(with_context_parallel=True)
            strategy = FullyParallelLoadStrategyWrapper(strategy, group)
        state = dist_checkpointing.load(_sharded(resume, model, optimizer, loading=True), directory, strategy)
    else:
        from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

        state = _sharded(resume, model, optimizer, loading=True)
        dcp_load(state_dict=state, checkpoint_id=directory)
    if resume["format"] != "fsdp_dtensor":  # Megatron-FSDP's DTensors were loaded in place
        for index, chunk in enumerate(model):  # the wrapped chunks, as load_checkpoint's ddp_model
            chunk.load_state_dict(state[_key(index, len(model))], strict=True)
    if resume["load_optim"]:
        optimizer.load_state_dict(state["optimizer"])
    del state
