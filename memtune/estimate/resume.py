"""The resume phase of one rank: its peak while Megatron-Core loads a checkpoint and during the
first iteration after it.

When ``load_checkpoint`` runs, the model, its gradient buffers and the optimizer exist (Megatron
builds them first), no activation does and no GEMM has run yet. What the load adds beside that
model state, each named with its source in docs/resume.md:

- ``optimizer.rebuilt_by_load_state_dict``: Transformer Engine's ``FusedAdam.load_state_dict``
  allocates every state tensor anew and copies into it while the state dict it was given, whose
  tensors are the optimizer's previous state, is still referenced: one more copy of the
  optimizer's tensor state. The distributed optimizer calls it twice for a torch_dist load (the
  scaffold its ``sharded_state_dict`` builds, then the loaded state) and once for the legacy
  format; the others once. Legacy ``torch`` without the distributed optimizer hands it host
  tensors, so its device copies replace the previous ones one tensor at a time: nothing extra;
  Megatron-Bridge loads a plain distributed FusedAdam with torch's base loader, which keeps the
  scaffold (``Derived.optimizer_rebuilt_at_load``).
- ``model.linear_fc1_merged`` and ``optimizer.linear_fc1_merged``: a torch_dist load rebuilds
  every gated ``linear_fc1`` (weight and bias) from its two saved halves with ``torch.cat``; the
  rebuilt tensors stay in the loaded state dict while the model and the optimizer load from it.
  Without the distributed optimizer the optimizer's per-parameter state goes through the same
  rebuild.

The parts exist together and are added. For fsdp_dtensor the distributed optimizer first steps
once on zero gradients to create its state (``_init_optimizer_states_with_dummy_values``):
``optimizer.dummy_step``, the zero gradients in the main weights' dtype plus what the step
itself materialises (torch's foreach Adam on the local spec, nothing under FusedAdam); the
checkpoint then loads into that state in place. ``--ckpt-fully-parallel-load`` broadcasts each
shard into the tensor that receives it and adds no device memory; it changes what each rank
reads, not what it holds. After ``load_checkpoint`` returns, its state dict and copies are gone:
the first iteration's peak is the training peak, except where the optimizer state was not
loaded: then its forward and backward run before Adam's state exists, which the step creates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtune.config.derived import DTYPE_BYTES, Derived
from memtune.estimate.core import RankEstimate
from memtune.estimate.state import ModelState, foreach_adam_temporaries

# Formats whose resume is modeled (torch_dcp, torch FSDP2's, is not).
MODELED_FORMATS = ("torch_dist", "fsdp_dtensor", "torch")


@dataclass(frozen=True)
class ResumeEstimate:
    """One rank's resume phase: the load's peak and the first iteration's, in bytes."""

    load_bytes: int
    first_step_bytes: int
    resident: float  # model state that exists while the checkpoint loads
    parts: dict[str, float] = field(default_factory=dict)  # what the load adds beside it, at its peak

    @property
    def peak_bytes(self) -> int:
        return max(self.load_bytes, self.first_step_bytes)

    @property
    def phase(self) -> str:
        return "checkpoint load" if self.load_bytes >= self.first_step_bytes else "first iteration"


def optimizer_tensor_state(d: Derived, state: ModelState) -> float:
    """Bytes of the tensors the optimizer keeps in its per-parameter state: Adam's moments, and
    under the precision-aware optimizer (not Megatron-FSDP's, whose main weights are a buffer)
    the main weights too; the ordinary main weights are the optimizer's parameters."""
    opt = d.job.optimizer
    if opt.optimizer != "adam" or opt.optimizer_cpu_offload:  # the host optimizer's load is not modeled
        return 0.0
    if opt.use_precision_aware_optimizer:
        moments = DTYPE_BYTES[opt.exp_avg_dtype] + DTYPE_BYTES[opt.exp_avg_sq_dtype]
        return state.optimizer if not d.megatron_fsdp else moments * state.optimizer_params
    if d.megatron_fsdp:
        return 2 * DTYPE_BYTES[d.fsdp_main_params_dtype or d.param_dtype] * state.optimizer_params
    return 8 * state.optimizer_params


def glu_fc1_numel(d: Derived, rank: RankEstimate) -> tuple[float, float]:
    """Elements of the gated ``linear_fc1`` tensors (weights and biases) one rank holds:
    (dense and shared-expert, routed-expert)."""
    bias = 1 if d.model.add_bias_linear else 0
    h = d.model.hidden_size
    dense = expert = 0.0
    for chunk in d.chunks[rank.pp_rank]:
        for index in chunk.layers:
            if not d.moe_layer_pattern[index]:
                dense += 2 * d.ffn_hidden_size * (h + bias) / d.tp
                continue
            expert += d.local_experts * 2 * d.moe_ffn_hidden_size * (h + bias) / d.etp
            shared = d.model.moe_shared_expert_intermediate_size
            if shared:
                dense += 2 * shared * (h + bias) / d.tp
    return dense, expert


def resume_estimate(d: Derived, rank: RankEstimate) -> ResumeEstimate | None:
    """The resume phase of a rank whose training estimate is ``rank``; None when the job does
    not resume or its format is not modeled."""
    if not d.resumes or d.resume_format not in MODELED_FORMATS:
        return None
    state = rank.state
    loaded = d.optimizer_loaded_at_resume
    tensor_state = optimizer_tensor_state(d, state)
    # Without the optimizer state nothing allocates it before the first step (FusedAdam and
    # torch's Adam alike create it there).
    resident = state.total - (0.0 if loaded else tensor_state)
    parts: dict[str, float] = {}
    if d.optimizer_rebuilt_at_load:
        parts["optimizer.rebuilt_by_load_state_dict"] = tensor_state
    if d.glu_fc1_merged_at_load:
        dense, expert = glu_fc1_numel(d, rank)
        frozen = d.job.peft is not None
        parts["model.linear_fc1_merged"] = DTYPE_BYTES[d.param_dtype] * (dense + expert)
        if loaded and not d.use_distributed_optimizer and not frozen and state.optimizer_params:
            per_param = state.optimizer / state.optimizer_params
            parts["optimizer.linear_fc1_merged"] = per_param * (dense + expert)
    if d.optimizer_state_made_by_dummy_step_at_load:
        main_bytes = DTYPE_BYTES[d.fsdp_main_params_dtype or d.param_dtype]
        step = foreach_adam_temporaries(d, state.optimizer_params, 0.0)
        parts["optimizer.dummy_step"] = main_bytes * state.optimizer_params + step
    parts = {name: nbytes for name, nbytes in parts.items() if nbytes}
    return ResumeEstimate(
        load_bytes=round(resident + sum(parts.values())),
        first_step_bytes=rank.peak_bytes
        if loaded
        else first_step_without_optimizer_state(rank, tensor_state),
        resident=resident,
        parts=parts,
    )


def first_step_without_optimizer_state(rank: RankEstimate, tensor_state: float) -> int:
    """The first iteration after a load that left the optimizer out: forward and backward run
    without Adam's tensor state, then the step creates it and runs as every step does."""
    step_peak = rank.state.total + rank.state.optimizer_step_transient + rank.buffers
    if rank.peak_phase != "forward/backward":
        return round(step_peak)
    return round(max(rank.peak_bytes - tensor_state, step_peak))
