"""LoRA adapters in the estimate, priced from the LoRA model (memtune/peft/model.py, which also
decides which adapters re-gather their input).

Megatron-Core runs a frozen base linear through ``linear_with_frozen_weight``, which keeps no
input for backward (it computes no weight gradient). With LoRA the base linears' inputs are
therefore kept only where something else keeps the same tensor: the adapter on that linear
(LoRA-A needs its input), or, for ``linear_proj``, a flash attention kernel that keeps its
output (a view of that input with one sequence per microbatch). The same holds for the routed
and shared experts of MoE layers.
"""

from __future__ import annotations

from memtune.config.derived import Derived
from memtune.estimate.activations import Dims, Saved
from memtune.estimate.flavour import Flavour
from memtune.peft.model import Adapter, AdapterParams, adapters_in_layer, kept_input_bytes
from memtune.peft.model import adapter_params as adapter_params

__all__ = ["AdapterParams", "adapter_params", "apply_lora"]


def apply_lora(d: Derived, x: Dims, fl: Flavour, saved: Saved, is_moe: bool) -> None:
    """Adjust one layer's kept tensors (``transformer_layer``'s names) for a LoRA job: frozen
    base linears drop their inputs; adapters add what they keep."""
    if d.job.peft is None:
        return
    dense = {a.target: a for a in adapters_in_layer(d, is_moe) if a.kind == "dense"}
    t = saved.tensors
    mlp_replayed = "mlp" in d.recompute_modules  # the checkpoint keeps fc1's input itself
    t.pop("self_attention.linear_qkv.input", None)
    proj_kept_by_attention = fl.flash_attention and (fl.transformer_engine or x.mbs == 1)
    if "linear_proj" not in dense and not proj_kept_by_attention:
        t.pop("self_attention.linear_proj.input", None)
    if not is_moe and not mlp_replayed:
        t.pop("mlp.linear_fc1.input", None)
        if "linear_fc2" not in dense:
            t.pop("mlp.linear_fc2.input", None)
    if is_moe:
        _drop_frozen_expert_inputs(d, t)
    for a in adapters_in_layer(d, is_moe):
        if a.kind == "routed_expert":
            continue  # their inputs are kept under the expert names (_drop_frozen_expert_inputs)
        name = f"lora.{a.target}" if a.kind == "dense" else f"lora.shared_experts.{a.target}"
        # LoRA-A's output and LoRA-B's input are small (rank-wide); the adapter's output is not kept.
        saved.add(f"{name}.rank_tensors", 2 * x.activation_bytes * x.tokens * d.job.peft.dim)
        saved.add(f"{name}.input", kept_input_bytes(d, a))
    scaled_copy = max((output_scale_copy_bytes(d, x, a) for a in adapters_in_layer(d, is_moe)), default=0.0)
    saved.fwd_transient = max(saved.fwd_transient, scaled_copy)
    saved.bwd_transient = max(saved.bwd_transient, scaled_copy)


def output_scale_copy_bytes(d: Derived, x: Dims, adapter: Adapter) -> float:
    """With ``peft.scale_position: output`` the adapter's full-width output and its scaled copy
    are alive together while the multiply runs, and in backward so are the output's gradient
    and its scaled copy: one more tensor of the adapter's output, a transient of one call. On the
    bottleneck the copy is rank-wide (``rank_tensors``). Routed experts are left out: each
    expert's call sees only its share of the tokens."""
    peft = d.job.peft
    if peft is None or peft.scale_position != "output" or adapter.kind == "routed_expert":
        return 0.0
    if adapter.parallel == "column":  # the whole (gathered) sequence, output split over TP
        return x.activation_bytes * x.tokens * adapter.out_features / adapter.split
    return x.activation_bytes * x.residual_tokens * adapter.out_features  # reduced, scattered under SP


def _drop_frozen_expert_inputs(d: Derived, kept: dict[str, float]) -> None:
    """Frozen expert linears keep no input either (megatron-core 0.19.2): ``SequentialMLP`` runs
    each expert through Megatron's column/row-parallel linears, which take
    ``linear_with_frozen_weight`` (or Transformer Engine's ``Linear`` on its spec), and
    Transformer Engine's ``GroupedLinear`` (``TEGroupedMLP``); both of TE's save no input when
    their weights do not require grad (``backward_needs_input``). So the dispatched tokens stay only for
    a routed ``linear_fc1`` adapter and the expert ``linear_fc2`` input only for a ``linear_fc2``
    adapter; likewise for the shared experts' ``linear_fc2``. What the router (its gating
    function saves its input whatever the weight), the activation and the probability scaling
    keep is unchanged: the gradient still flows through them to the attention's adapters. A
    layer under selective ``moe`` recompute keeps only its input, so there is nothing to drop."""
    adapted = {(a.kind, a.target) for a in adapters_in_layer(d, True)}
    frozen = (
        ("routed_expert", "linear_fc1", "mlp.experts.input"),
        ("routed_expert", "linear_fc2", "mlp.experts.linear_fc2.input"),
        ("shared_expert", "linear_fc2", "mlp.shared_experts.linear_fc2.input"),
    )
    for kind, target, name in frozen:
        if (kind, target) not in adapted:
            kept.pop(name, None)
