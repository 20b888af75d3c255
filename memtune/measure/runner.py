"""The measurement itself: one rank of a Megatron-Core job, trained for a few iterations.

Run as ``python -m memtune.measure.runner PLAN.json RESULT.json`` (one process per
measurement: the allocator's settings and statistics are per process). It needs torch with a
GPU and megatron-core, and nothing else from memtune (LoRA jobs use memtune.peft, which is torch-only),
so it runs where pydantic is absent.

PyTorch's fake process-group backend gives this process the identity of global rank R in a
W-rank world: every collective completes at once without moving data, and every shape is the
one rank R would see, so the model shard, gradient buffers, optimizer state and activations
allocated here are rank R's.

With a ``resume`` plan (``memtune measure --resume``) the ``save`` phase writes a checkpoint
after the last iteration and the ``load`` phase, a fresh process, loads it before the first
iteration (:mod:`memtune.measure.checkpoint`) and records the load in ``measured["resume"]``.

RESULT.json gets either ``{"measured": ..., "environment": ...}`` or
``{"error": {"kind": ..., "message": ...}}``; ``kind`` is ``missing`` (no GPU, no
megatron-core, no Transformer Engine), ``config`` (megatron-core rejected the configuration),
``oom`` (CUDA out of memory) or ``failed`` (anything else, with the exception's last line).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import json
import os
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.optimizer import MegatronOptimizer
    from megatron.core.transformer.transformer_config import TransformerConfig


class Refusal(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# Megatron's optional CUDA extensions (built from apex's sources, see
# benchmarks/gpu/build_megatron_kernels.py): which ones a plan needs, and which were loaded.
SOFTMAX_EXTENSIONS = ("scaled_upper_triang_masked_softmax_cuda", "scaled_masked_softmax_cuda")
WGRAD_EXTENSION = "fused_weight_gradient_mlp_cuda"
MEGATRON_EXTENSIONS = (*SOFTMAX_EXTENSIONS, "scaled_softmax_cuda", WGRAD_EXTENSION)


def _needed_extensions(plan: dict[str, Any]) -> list[str]:
    """Extensions megatron-core will import for this plan: the softmax kernels when unfused
    attention in half precision asks for the fused softmax, the weight-gradient GEMM for
    gradient-accumulation fusion."""
    tc = plan["transformer_config"]
    needed: list[str] = []
    half = tc["bf16"] or tc["fp16"]
    if tc.get("masked_softmax_fusion") and plan["core_attention"] == "megatron_dot_product" and half:
        needed.extend(SOFTMAX_EXTENSIONS)
    if tc.get("gradient_accumulation_fusion"):
        needed.append(WGRAD_EXTENSION)
    return needed


def _require_extensions(plan: dict[str, Any]) -> None:
    import importlib

    import torch  # noqa: F401  (the extensions link against torch's libraries)

    for name in _needed_extensions(plan):
        try:
            importlib.import_module(name)
        except ImportError:
            raise Refusal(
                "missing",
                f"needs Megatron's CUDA extension {name}, which is not importable; build it with "
                "benchmarks/gpu/build_megatron_kernels.py and put its directory on PYTHONPATH",
            ) from None


def _require_environment(plan: dict[str, Any]) -> None:
    try:
        import torch
    except ImportError:
        raise Refusal("missing", "needs PyTorch, which is not installed for this Python") from None
    if not torch.cuda.is_available():
        raise Refusal("missing", "needs a CUDA GPU, and PyTorch sees none")
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        raise Refusal("missing", "needs megatron-core, which is not installed for this Python") from None
    if plan["layer_spec"] == "transformer_engine":
        try:
            import transformer_engine  # noqa: F401
        except ImportError:
            raise Refusal(
                "missing",
                "transformer_impl: transformer_engine needs Transformer Engine, which is not installed; "
                "set model.transformer_impl=local to measure Megatron-Core's local layer spec",
            ) from None
    _require_extensions(plan)


# --- model ------------------------------------------------------------------------------


class _SequenceParallelTorchNorm:
    """Megatron's torch-norm wrapper refuses ``sequence_parallel=True``, although a norm over
    the hidden dimension works unchanged on a sequence shard and keeps the same memory. Build it
    from a copy of the config with SP off, and mark its weights as Megatron's own SP norms are
    marked (their gradients are all-reduced over TP)."""

    def __new__(cls, config: TransformerConfig, hidden_size: int, eps: float = 1e-5, **kwargs: Any) -> Any:
        from megatron.core.transformer.torch_norm import WrappedTorchNorm

        plain = copy.copy(config)
        plain.sequence_parallel = False
        norm = WrappedTorchNorm(plain, hidden_size, eps, **kwargs)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel
        return norm


def _substitute(obj: Any, table: Mapping[type[Any], type[Any]]) -> Any:
    """A copy of a layer spec with each class in ``table`` replaced, at any depth (specs nest
    ModuleSpecs, submodule dataclasses, lists and functools.partials)."""
    from megatron.core.transformer.spec_utils import ModuleSpec

    try:
        if obj in table:
            return table[obj]
    except TypeError:  # unhashable
        pass
    if isinstance(obj, ModuleSpec):
        return dataclasses.replace(
            obj,
            module=_substitute(obj.module, table),
            submodules=_substitute(obj.submodules, table),
            params={k: _substitute(v, table) for k, v in obj.params.items()},
        )
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {
            f.name: _substitute(getattr(obj, f.name), table) for f in dataclasses.fields(obj) if f.init
        }
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, functools.partial):
        return functools.partial(
            _substitute(obj.func, table),
            *(_substitute(a, table) for a in obj.args),
            **{k: _substitute(v, table) for k, v in obj.keywords.items()},
        )
    if isinstance(obj, list):
        return [_substitute(x, table) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_substitute(x, table) for x in obj)
    return obj


def _block_spec(plan: dict[str, Any], config: TransformerConfig, vp_stage: int | None, pp_rank: int) -> Any:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    if plan["layer_spec"] == "transformer_engine":
        return get_gpt_decoder_block_spec(
            config,
            use_transformer_engine=True,
            normalization=config.normalization,
            vp_stage=vp_stage,
            pp_rank=pp_rank,
        )
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from memtune.measure.sdpa_attention import SDPAttention

    spec = get_gpt_decoder_block_spec(
        config,
        use_transformer_engine=False,
        normalization=config.normalization,
        vp_stage=vp_stage,
        pp_rank=pp_rank,
    )
    table: dict[type[Any], type[Any]] = {WrappedTorchNorm: _SequenceParallelTorchNorm}
    if plan["core_attention"] == "sdpa":
        table[DotProductAttention] = SDPAttention
    return _substitute(spec, table)


def _mtp_block_spec(
    plan: dict[str, Any], config: TransformerConfig, decoder_spec: Any, vp_stage: int | None, pp_rank: int
) -> Any:
    """The multi-token-prediction block this chunk builds (None off the last stage), from the
    decoder's own last-layer spec, as Megatron-LM's GPT builder passes it to GPTModel."""
    if not getattr(config, "mtp_num_layers", None):
        return None
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

    use_te = plan["layer_spec"] == "transformer_engine"
    spec = get_gpt_mtp_block_spec(
        config, decoder_spec, use_transformer_engine=use_te, vp_stage=vp_stage, pp_rank=pp_rank
    )
    if spec is None or use_te:
        return spec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    return _substitute(spec, {WrappedTorchNorm: _SequenceParallelTorchNorm})


def _transformer_config(plan: dict[str, Any]) -> TransformerConfig:
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    activations = {"gelu": F.gelu, "silu": F.silu, "relu": F.relu}
    kwargs = dict(plan["transformer_config"])
    for key in ("params_dtype", "pipeline_dtype"):
        kwargs[key] = getattr(torch, kwargs[key])
    name = kwargs.pop("activation_func")
    if name not in activations:
        raise Refusal("config", f"model.activation_func {name!r}: memtune measure runs gelu, silu or relu")
    kwargs["activation_func"] = activations[name]
    kwargs["attention_backend"] = AttnBackend[kwargs["attention_backend"]]
    cls = MLATransformerConfig if plan["multi_latent_attention"] else TransformerConfig
    try:
        return cls(**kwargs)
    except (ValueError, AssertionError, TypeError) as exc:
        raise Refusal("config", f"megatron-core rejected the configuration: {exc}") from None


def _build_chunks(plan: dict[str, Any], config: TransformerConfig) -> list[GPTModel]:
    import torch
    from megatron.core import tensor_parallel
    from megatron.core.models.gpt import GPTModel

    chunks = []
    for chunk in plan["chunks"]:
        vp_stage = chunk["vp_stage"]
        decoder_spec = _block_spec(plan, config, vp_stage, plan["pp_rank"])
        model = GPTModel(
            config=config,
            transformer_layer_spec=decoder_spec,
            mtp_block_spec=_mtp_block_spec(plan, config, decoder_spec, vp_stage, plan["pp_rank"]),
            pre_process=chunk["pre_process"],
            post_process=chunk["post_process"],
            vp_stage=vp_stage,
            **plan["model"],
        )
        assert len(model.decoder.layers) == chunk["num_layers"], (
            f"built {len(model.decoder.layers)} layers for vp_stage {vp_stage}, planned {chunk['num_layers']}"
        )
        if plan.get("peft") is not None:
            _apply_lora(plan["peft"], model)
        for param in model.parameters():
            tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)
        model.cuda(torch.cuda.current_device())
        chunks.append(model)
    return chunks


def _apply_lora(peft: dict[str, Any], model: GPTModel) -> None:
    """Freeze the chunk and add adapters as Megatron-Bridge's LoRA would (memtune.peft)."""
    from memtune.peft.lora import LoRA

    options = dict(peft)
    options["target_modules"] = tuple(options["target_modules"])
    LoRA(**options).apply(model)


def _expert_mlp(chunks: list[Any]) -> str | None:
    from megatron.core.transformer.moe.moe_layer import MoELayer

    for chunk in chunks:
        for module in chunk.modules():
            if isinstance(module, MoELayer):
                return type(module.experts).__name__
    return None


# --- training step ----------------------------------------------------------------------

# What the loss function gives the schedule: the loss sum, the token count, and the values logged.
_LossResult = tuple["torch.Tensor", "torch.Tensor", dict[str, "torch.Tensor"]]


class _RandomBatches:
    """Endless random token batches shaped like pretrain_gpt's (tokens, labels, loss mask,
    position ids; causal attention without an explicit mask)."""

    def __init__(self, vocab_size: int, micro_batch_size: int, seq_length: int) -> None:
        self.shape = (micro_batch_size, seq_length)
        self.vocab_size = vocab_size

    def __iter__(self) -> _RandomBatches:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        import torch

        b, s = self.shape
        tokens = torch.randint(0, self.vocab_size, (b, s), dtype=torch.int64, device="cuda")
        return {
            "tokens": tokens,
            "labels": torch.roll(tokens, -1, dims=1),
            "loss_mask": torch.ones((b, s), dtype=torch.float32, device="cuda"),
            "position_ids": torch.arange(s, dtype=torch.int64, device="cuda").unsqueeze(0).expand(b, s),
        }


def _loss(loss_mask: torch.Tensor, output_tensor: torch.Tensor) -> _LossResult:
    """Sum of per-token losses and the token count, as pretrain_gpt reduces them."""
    import torch

    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.detach().view(1), num_tokens.view(1)])}


def _forward_step(
    data_iterator: Iterator[dict[str, torch.Tensor]], model: Any
) -> tuple[torch.Tensor, functools.partial[_LossResult]]:
    batch = next(data_iterator)
    output: torch.Tensor = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    return output, functools.partial(_loss, batch["loss_mask"])


def _wire_grad_sync(
    config: TransformerConfig, model: list[Any], ddp: dict[str, Any], optimizer: MegatronOptimizer
) -> None:
    """The hooks Megatron-LM's train() installs: gradient sync is deferred to the last
    microbatch, gradients are finalised after the schedule, and losses are scaled."""
    from megatron.core.distributed import finalize_model_grads

    def one_or_list(fns: list[Callable[..., Any]]) -> Callable[..., Any] | list[Callable[..., Any]]:
        return fns[0] if len(fns) == 1 else fns

    if ddp["overlap_grad_reduce"]:
        config.no_sync_func = one_or_list([chunk.no_sync for chunk in model])
        config.grad_sync_func = one_or_list([chunk.start_grad_sync for chunk in model])
    if ddp["overlap_param_gather"]:
        config.param_sync_func = one_or_list([chunk.start_param_sync for chunk in model])
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss


# --- measurement ------------------------------------------------------------------------


class _HostMemory:
    """Host memory the job takes: pinned bytes from PyTorch's caching host allocator (where
    ``torch.cuda.host_memory_stats`` exists; every ``pin_memory`` tensor goes through it) and
    the process's resident-set peak (``getrusage``, which also counts unpinned host tensors such
    as CPU optimizer state) above its level before the model was built."""

    def __init__(self) -> None:
        import torch

        self.pinned_stats = hasattr(torch.cuda, "host_memory_stats")
        self.rss_before = _peak_rss_bytes()

    def reset_peak(self) -> None:
        import torch

        if self.pinned_stats and hasattr(torch.cuda, "reset_peak_host_memory_stats"):
            torch.cuda.reset_peak_host_memory_stats()

    def _pinned(self) -> tuple[int, int] | None:
        import torch

        if not self.pinned_stats:
            return None
        stats = torch.cuda.host_memory_stats()
        return stats.get("allocated_bytes.current", 0), stats.get("allocated_bytes.peak", 0)

    def iteration(self) -> dict[str, Any]:
        pinned = self._pinned()
        record = {"host_peak_rss_bytes": _peak_rss_bytes()}
        if pinned is not None:
            record["host_pinned_bytes"], record["host_pinned_peak_bytes"] = pinned
        return record

    def summary(self, steady: list[dict[str, Any]]) -> dict[str, Any]:
        peak_rss = max(it["host_peak_rss_bytes"] for it in steady)
        record = {
            "host_rss_before_build_bytes": self.rss_before,
            "host_rss_growth_bytes": peak_rss - self.rss_before,
            "host_pinned_source": "torch.cuda.host_memory_stats" if self.pinned_stats else None,
        }
        if self.pinned_stats:
            record["host_pinned_peak_bytes"] = max(it["host_pinned_peak_bytes"] for it in steady)
        return record


def _peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


SNAPSHOT_ENTRIES = 200_000  # allocator events kept for the snapshot of the last iteration


def _stand_in_for_te_offload_flag(plan: dict[str, Any]) -> bool:
    """Let fine-grained activation offloading run without Transformer Engine.

    megatron-core 0.19.2's offload context (``pipeline_parallel/fine_grained_activation_offload.py``,
    ``__enter__``/``__exit__``) sets ``CPUOffloadEnabled`` on Transformer Engine's ``cpu_offload``
    module and raises when that module is absent. Only Transformer Engine's own layers read the
    flag, and the local spec builds none, so a module holding just the flag changes nothing
    else; every offload and reload is Megatron-Core's own. True when the stand-in was installed.
    """
    if not plan["transformer_config"].get("fine_grained_activation_offloading"):
        return False
    from megatron.core.extensions import transformer_engine as te_extension

    if te_extension.cpu_offload is not None:
        return False
    te_extension.cpu_offload = types.SimpleNamespace(CPUOffloadEnabled=False)
    return True


def _init_distributed(plan: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.cuda.set_device(0)
    if plan.get("resume") and plan["world_size"] == 1:
        # The distributed checkpoint gathers metadata with object collectives, which the fake
        # group cannot answer; one real rank can (plan.py's resume refusals keep it to world 1).
        store = dist.HashStore()  # type: ignore[attr-defined]  # exported at run time, absent from torch's stubs
        dist.init_process_group("cpu:gloo,cuda:nccl", store=store, rank=0, world_size=1)
    else:
        dist.init_process_group("fake", store=FakeStore(), rank=plan["rank"], world_size=plan["world_size"])
    gloo = bool(plan.get("resume") and plan["resume"].get("gloo"))  # the Gloo gathers of a save
    parallel_state.initialize_model_parallel(**plan["parallel_state"], create_gloo_process_groups=gloo)
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    assert pp_rank == plan["pp_rank"], (
        f"megatron placed rank {plan['rank']} on stage {pp_rank}, planned {plan['pp_rank']}"
    )
    model_parallel_cuda_manual_seed(1234)


@dataclasses.dataclass
class _Built:
    """The rank's model chunks wrapped as Megatron-LM's ``get_model`` wraps them, its optimizer,
    and the memory allocated after each of the three was built."""

    chunks: list[Any]  # the GPT chunks, in Float16Module where the job trains in bf16 or fp16
    model: list[Any]  # each chunk in Megatron DDP or Megatron-FSDP
    optimizer: MegatronOptimizer
    after_build: int
    after_ddp: int
    after_optimizer: int


def _build(plan: dict[str, Any]) -> _Built:
    import torch
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        FullyShardedDataParallel,
    )
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    config = _transformer_config(plan)
    chunks = _build_chunks(plan, config)
    after_build = torch.cuda.memory_allocated()

    if config.bf16 or config.fp16:
        chunks = [Float16Module(config, chunk) for chunk in chunks]
    ddp_kwargs = dict(plan["ddp"])
    for key in ("megatron_fsdp_main_params_dtype", "megatron_fsdp_main_grads_dtype"):
        if key in ddp_kwargs:
            ddp_kwargs[key] = ddp_kwargs[key] and getattr(torch, ddp_kwargs[key])
    ddp_config = DistributedDataParallelConfig(**ddp_kwargs)
    # Megatron-LM's get_model picks the wrapper: Megatron-FSDP or Megatron DDP.
    wrapper = FullyShardedDataParallel if ddp_config.use_megatron_fsdp else DistributedDataParallel
    model = [
        wrapper(config=config, ddp_config=ddp_config, module=chunk, disable_bucketing=index > 0)
        for index, chunk in enumerate(chunks)
    ]
    after_ddp = torch.cuda.memory_allocated()

    opt_kwargs = dict(plan["optimizer"])
    opt_kwargs["params_dtype"] = getattr(torch, opt_kwargs["params_dtype"])
    gloo = bool(plan.get("resume") and plan["resume"].get("gloo"))
    optimizer = get_megatron_optimizer(OptimizerConfig(**opt_kwargs), model, use_gloo_process_groups=gloo)
    after_optimizer = torch.cuda.memory_allocated()
    _wire_grad_sync(config, model, plan["ddp"], optimizer)
    return _Built(chunks, model, optimizer, after_build, after_ddp, after_optimizer)


def _train(plan: dict[str, Any], built: _Built, host: _HostMemory) -> list[dict[str, Any]]:
    """``plan["iterations"]`` training iterations as Megatron-LM's loop runs them, each with
    its memory, time and host-memory record; the last one's allocator history dumped where
    ``MEMTUNE_MEASURE_SNAPSHOT`` names a file."""
    import torch
    from megatron.core.pipeline_parallel import get_forward_backward_func

    model, optimizer = built.model, built.optimizer
    schedule = plan["schedule"]
    vocab = plan["model"]["vocab_size"]
    batches = [_RandomBatches(vocab, schedule["micro_batch_size"], schedule["seq_length"]) for _ in model]
    forward_backward = get_forward_backward_func()
    snapshot = os.environ.get("MEMTUNE_MEASURE_SNAPSHOT")
    iterations = []
    for index in range(1, plan["iterations"] + 1):
        torch.cuda.synchronize()
        if snapshot and index == plan["iterations"]:
            torch.cuda.memory._record_memory_history(max_entries=SNAPSHOT_ENTRIES, stacks="python")
        torch.cuda.reset_peak_memory_stats()
        host.reset_peak()
        tick = time.monotonic()
        for chunk in model:
            chunk.zero_grad_buffer()
        optimizer.zero_grad()
        forward_backward(
            forward_step_func=_forward_step,
            data_iterator=batches if len(model) > 1 else batches[0],
            model=model if len(model) > 1 else model[0],
            num_microbatches=schedule["num_microbatches"],
            seq_length=schedule["seq_length"],
            micro_batch_size=schedule["micro_batch_size"],
            decoder_seq_length=schedule["seq_length"],
            forward_only=False,
        )
        torch.cuda.synchronize()
        forward_backward_done = time.monotonic()
        fwd_bwd_peak = torch.cuda.max_memory_allocated()
        # False when the fp16 loss scaler found an overflow and skipped the update: then Adam's
        # state is not created (megatron-core's MixedPrecisionOptimizer.step).
        stepped = bool(optimizer.step()[0])
        torch.cuda.synchronize()
        optimizer_done = time.monotonic()
        iterations.append(
            {
                "iteration": index,
                "optimizer_stepped": stepped,
                "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                "fwd_bwd_peak_bytes": fwd_bwd_peak,
                "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                "allocated_after_step": torch.cuda.memory_allocated(),
                "reserved_after_step": torch.cuda.memory_reserved(),
                "num_alloc_retries": torch.cuda.memory_stats()["num_alloc_retries"],
                "seconds": round(time.monotonic() - tick, 3),
                # the step's compute apart (benchmarks/compute_accuracy.py): zeroing the gradient
                # buffers and the forward and backward passes of every microbatch, then the
                # optimizer step (gradient norm, Adam, the copy back into the model's weights)
                "forward_backward_seconds": round(forward_backward_done - tick, 4),
                "optimizer_seconds": round(optimizer_done - forward_backward_done, 4),
                **host.iteration(),
            }
        )
        if snapshot and index == plan["iterations"]:
            torch.cuda.memory._dump_snapshot(snapshot)  # type: ignore[no-untyped-call]  # private, unannotated in torch
            torch.cuda.memory._record_memory_history(enabled=None)
    return iterations


def measure(plan: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    host = _HostMemory()
    te_offload_flag_stand_in = _stand_in_for_te_offload_flag(plan)
    _init_distributed(plan)
    built = _build(plan)
    # A resume loads in setup, before train() (and its --manual-gc collection) starts.
    resume = plan.get("resume")
    resumed = None
    if resume and resume["phase"] == "load":
        resumed = _load_checkpoint(resume, built.model, built.optimizer)
    if plan["manual_gc"]:
        # Megatron-LM's and Megatron-Bridge's train() with --manual-gc: one full collection,
        # then the automatic collector stays off (memtune/measure/plan.py says why it matters).
        gc.disable()
        gc.collect()
    iterations = _train(plan, built, host)
    saved = (
        _save_checkpoint(resume, built.model, built.optimizer)
        if resume and resume["phase"] == "save"
        else None
    )
    # After a load the first iteration is the one measured.
    steady = iterations if resumed else [it for it in iterations if it["iteration"] >= 2]
    measured = {
        "peak_allocated_bytes": max(it["peak_allocated_bytes"] for it in steady),
        "fwd_bwd_peak_bytes": max(it["fwd_bwd_peak_bytes"] for it in steady),
        "peak_reserved_bytes": max(it["peak_reserved_bytes"] for it in steady),
        "allocated_after_build": built.after_build,
        "allocated_after_ddp": built.after_ddp,
        "allocated_after_optimizer": built.after_optimizer,
        "state_bytes": iterations[-1]["allocated_after_step"],
        "num_alloc_retries": iterations[-1]["num_alloc_retries"],
        **host.summary(steady),
        "iterations": iterations,
    }
    if resumed:
        measured["resume"] = {**resumed, "first_step_peak_bytes": iterations[0]["peak_allocated_bytes"]}
    if saved:
        measured["save"] = saved
    return {
        "measured": measured,
        "environment": _environment(plan, built.chunks, built.optimizer)
        | ({"te_cpu_offload_flag": "stand-in"} if te_offload_flag_stand_in else {}),
        "pp_rank": plan["pp_rank"],
        "wall_seconds": round(time.monotonic() - started, 1),
    }


def _save_checkpoint(
    resume: dict[str, Any], model: list[Any], optimizer: MegatronOptimizer
) -> dict[str, Any]:
    """Save the checkpoint after the last iteration, as Megatron-LM's train loop does between
    iterations; the allocator's peak while it saves, and the host memory it takes."""
    import torch

    from memtune.measure import checkpoint

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    pinned = hasattr(torch.cuda, "host_memory_stats")
    if pinned and hasattr(torch.cuda, "reset_peak_host_memory_stats"):
        torch.cuda.reset_peak_host_memory_stats()
    rss_before = _current_rss_bytes()
    checkpoint.save(resume, model, optimizer)
    torch.cuda.synchronize()
    record = {
        "format": resume["format"],
        "allocated_before_save": before,
        "save_peak_bytes": torch.cuda.max_memory_allocated(),
        "save_peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "allocated_after_save": torch.cuda.memory_allocated(),
        "host_rss_before_save_bytes": rss_before,
        "host_peak_rss_bytes": _peak_rss_bytes(),
        "host_rss_after_save_bytes": _current_rss_bytes(),
    }
    if pinned:  # the caching host allocator's counters (pinned staging), all of them
        record["host_memory_stats"] = {
            key: value for key, value in torch.cuda.host_memory_stats().items() if isinstance(value, int)
        }
    return record


def _current_rss_bytes() -> int:
    """The process's resident set now (``/proc/self/statm``), where the peak alone cannot tell."""
    import resource

    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def _load_checkpoint(
    resume: dict[str, Any], model: list[Any], optimizer: MegatronOptimizer
) -> dict[str, Any]:
    """Load the checkpoint the save phase wrote; the allocator's peak while it loads."""
    import torch

    from memtune.measure import checkpoint

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    # Megatron-FSDP's fsdp_dtensor path creates its optimizer state itself (with a dummy step).
    fsdp = resume["format"] == "fsdp_dtensor"
    stand_in = resume["load_optim"] and not fsdp and _stand_in_for_empty_optimizer_state(optimizer)
    checkpoint.load(resume, model, optimizer)
    torch.cuda.synchronize()
    return {
        "format": resume["format"],
        "optimizer_state_stand_in": stand_in,
        "allocated_before_load": before,
        "load_peak_bytes": torch.cuda.max_memory_allocated(),
        "load_peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "allocated_after_load": torch.cuda.memory_allocated(),
    }


def _stand_in_for_empty_optimizer_state(optimizer: MegatronOptimizer) -> bool:
    """Create the distributed optimizer's Adam state as torch's AdamW creates it at its first
    step, inside the load's peak. megatron-core 0.19.2's ``DistributedOptimizer.state_dict()``
    without Transformer Engine or Apex reads the step from torch's per-parameter state and
    asserts it exists, so a fresh process cannot build the state dict a load needs; with TE's
    FusedAdam the same call allocates this state itself (its ``load_state_dict(state_dict())``
    before a load). True when a stand-in was made."""
    import torch
    from megatron.core.optimizer.distrib_optimizer import HAVE_APEX_OR_TE, DistributedOptimizer

    made = False
    for part in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = part.optimizer
        if HAVE_APEX_OR_TE or not isinstance(part, DistributedOptimizer) or inner.state:
            continue
        for group in inner.param_groups:
            for param in group["params"]:
                inner.state[param] = {
                    "step": torch.tensor(0.0),
                    "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
                }
        made = True
    return made


def _environment(plan: dict[str, Any], chunks: list[Any], optimizer: MegatronOptimizer) -> dict[str, Any]:
    import torch
    from megatron.core import package_info

    inner = [getattr(chunk, "module", chunk) for chunk in chunks]
    adam = getattr(optimizer, "chained_optimizers", [optimizer])[0].optimizer
    return {
        "torch": torch.__version__,
        "megatron_core": package_info.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "moe_router_force_load_balancing": bool(
            plan["transformer_config"].get("moe_router_force_load_balancing", False)
        ),
        "expert_mlp": _expert_mlp(inner),
        "core_attention": plan["core_attention"],
        "layer_spec": plan["layer_spec"],
        "optimizer_class": f"{type(adam).__module__}.{type(adam).__name__}",
        "allocator_conf": {k: v for k, v in plan["env"].items() if "ALLOC_CONF" in k},
        "megatron_extensions": sorted(name for name in MEGATRON_EXTENSIONS if name in sys.modules),
    }


def main(argv: list[str]) -> int:
    plan_path, result_path = argv
    with open(plan_path) as fh:
        plan = json.load(fh)
    try:
        _require_environment(plan)
        result = measure(plan)
    except Refusal as exc:
        result = {"error": {"kind": exc.kind, "message": str(exc)}}
    except Exception as exc:  # the record must say why a run failed, whatever failed
        traceback.print_exc()
        kind = "oom" if "out of memory" in str(exc).lower() else "failed"
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
        result = {"error": {"kind": kind, "message": f"{type(exc).__name__}: {last}"}}
    with open(result_path, "w") as fh:
        json.dump(result, fh)
    return 0 if "measured" in result else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
