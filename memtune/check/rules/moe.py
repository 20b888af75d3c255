"""MOE: experts, expert parallelism and MoE-only settings."""

from __future__ import annotations

from memtune.check.context import Context
from memtune.check.finding import ERROR, WARNING, Hit
from memtune.check.registry import rule


@rule("MOE001", "ep-without-experts", ERROR)
def ep_without_experts(c: Context) -> Hit | None:
    """Expert parallelism in a model without experts.

    ## What it does
    Checks that `expert_model_parallel_size > 1` comes with `num_moe_experts`.

    ## Why it matters
    Megatron-Core raises at start-up; with no experts there is nothing to distribute.

    ## Example
    ```yaml
    model: {expert_model_parallel_size: 8}
    ```

    ## Fix
    Set `expert_model_parallel_size: 1` for a dense model, or set `num_moe_experts`.
    """
    if c.d.ep == 1 or c.d.is_moe:
        return None
    return Hit(
        message=f"model.expert_model_parallel_size={c.d.ep} but model.num_moe_experts is not set",
        fix="set model.expert_model_parallel_size=1, or set model.num_moe_experts",
        upstream="num_moe_experts must be non None to use expert-parallel.",
    )


@rule("MOE002", "experts-not-divisible-by-ep", ERROR)
def experts_not_divisible_by_ep(c: Context) -> Hit | None:
    """The expert count is not a multiple of the expert-parallel size.

    ## What it does
    Checks `num_moe_experts % expert_model_parallel_size == 0`.

    ## Why it matters
    Each EP rank holds num_moe_experts / EP experts; Megatron refuses a remainder.

    ## Example
    ```yaml
    model: {num_moe_experts: 60, expert_model_parallel_size: 8}
    ```

    ## Fix
    Use an EP size that divides the expert count.
    """
    experts, ep = c.model.num_moe_experts, c.d.ep
    if not experts or experts % ep == 0:
        return None
    return Hit(
        message=f"model.num_moe_experts={experts} is not a multiple of model.expert_model_parallel_size={ep}",
        fix=f"use an expert_model_parallel_size that divides {experts}",
        upstream="Number of experts should be a multiple of expert model parallel_size.",
    )


@rule("MOE003", "ep-tp-without-sp", WARNING)
def ep_tp_without_sp(c: Context) -> Hit | None:
    """Expert and tensor parallelism without sequence parallelism.

    ## What it does
    Flags `expert_model_parallel_size > 1` with `tensor_model_parallel_size > 1` and
    `sequence_parallel: false`.

    ## Why it matters
    Megatron-Core warns that SP must be used in this layout: the token dispatcher expects
    sequence-sharded input, and without SP every TP rank holds (and dispatches) the full set of
    tokens, replicating activations TP times.

    ## Example
    ```yaml
    model: {num_moe_experts: 64, expert_model_parallel_size: 8, tensor_model_parallel_size: 2,
            sequence_parallel: false}
    ```

    ## Fix
    Set `sequence_parallel: true`.
    """
    if c.d.ep == 1 or c.d.tp == 1 or c.model.sequence_parallel:
        return None
    return Hit(
        message=f"model.expert_model_parallel_size={c.d.ep} and model.tensor_model_parallel_size={c.d.tp} "
        "with model.sequence_parallel=false",
        fix="set model.sequence_parallel=true",
        upstream="When using expert parallelism and tensor parallelism for training, sequence parallelism must be used",
    )


@rule("MOE004", "expert-ffn-not-divisible-by-etp", ERROR)
def expert_ffn_not_divisible_by_etp(c: Context) -> Hit | None:
    """The expert MLP width is not divisible by the expert tensor-parallel size.

    ## What it does
    Checks `moe_ffn_hidden_size % expert_tensor_parallel_size == 0` (ETP defaults to TP,
    `moe_ffn_hidden_size` to `ffn_hidden_size`).

    ## Why it matters
    Each expert's fc1/fc2 are split over ETP ranks with Megatron's `divide()`, which asserts at
    model construction.

    ## Example
    ```yaml
    model: {num_moe_experts: 8, moe_ffn_hidden_size: 1404, tensor_model_parallel_size: 8}
    ```

    ## Fix
    Set `expert_tensor_parallel_size` to a divisor of `moe_ffn_hidden_size` (often 1).
    """
    d = c.d
    if not d.is_moe or d.moe_ffn_hidden_size % d.etp == 0:
        return None
    return Hit(
        message=f"moe_ffn_hidden_size={d.moe_ffn_hidden_size} is not divisible by expert tensor-parallel size {d.etp}",
        fix=f"set model.expert_tensor_parallel_size to a divisor of {d.moe_ffn_hidden_size}",
        upstream=f"{d.moe_ffn_hidden_size} is not divisible by {d.etp}",
    )


@rule("MOE005", "shared-expert-overlap-dispatcher", ERROR)
def shared_expert_overlap_dispatcher(c: Context) -> Hit | None:
    """Shared-expert overlap with the all-gather token dispatcher.

    ## What it does
    Checks that `moe_shared_expert_overlap: true` (with shared experts) uses the `alltoall` or
    `flex` dispatcher.

    ## Why it matters
    The overlap hides the shared expert behind the all-to-all; Megatron-Core refuses it with the
    default `allgather` dispatcher.

    ## Example
    ```yaml
    model: {num_moe_experts: 64, moe_shared_expert_intermediate_size: 2816,
            moe_shared_expert_overlap: true, moe_token_dispatcher_type: allgather}
    ```

    ## Fix
    Set `moe_token_dispatcher_type: alltoall`, or turn the overlap off.
    """
    m = c.model
    if not (c.d.is_moe and m.moe_shared_expert_intermediate_size and m.moe_shared_expert_overlap):
        return None
    if m.moe_token_dispatcher_type in ("alltoall", "flex"):
        return None
    return Hit(
        message=f"model.moe_shared_expert_overlap=true with model.moe_token_dispatcher_type={m.moe_token_dispatcher_type}",
        fix="set model.moe_token_dispatcher_type=alltoall, or model.moe_shared_expert_overlap=false",
        upstream="moe_shared_expert_overlap only works with alltoall or flex token dispatcher.",
    )


# MoE-only keys and their defaults: set on a dense model they do nothing.
_MOE_ONLY_DEFAULTS = {
    "moe_grouped_gemm": False,
    "moe_shared_expert_intermediate_size": None,
    "moe_shared_expert_overlap": False,
    "moe_expert_capacity_factor": None,
    "moe_pad_expert_input_to_capacity": False,
    "moe_token_dispatcher_type": "allgather",
    "moe_router_num_groups": None,
    "moe_router_group_topk": None,
}


@rule("MOE006", "moe-settings-without-experts", WARNING)
def moe_settings_without_experts(c: Context) -> Hit | None:
    """MoE settings in a model without experts.

    ## What it does
    Flags MoE-only keys changed from their defaults (`moe_grouped_gemm`, shared-expert,
    capacity, dispatcher and group-routing keys) when `num_moe_experts` is not set.

    ## Why it matters
    They silently do nothing in a dense model, which usually means the expert count was lost
    (for example by a converter) and the model you are about to train is not the one you meant.

    ## Example
    ```yaml
    model: {moe_grouped_gemm: true, moe_token_dispatcher_type: alltoall}
    ```

    ## Fix
    Set `num_moe_experts`, or remove the MoE keys.
    """
    if c.d.is_moe:
        return None
    changed = [k for k, default in _MOE_ONLY_DEFAULTS.items() if getattr(c.model, k) != default]
    if not changed:
        return None
    shown = ", ".join(f"model.{k}={getattr(c.model, k)}" for k in changed)
    return Hit(
        message=f"{shown} set but model.num_moe_experts is not set, so they do nothing",
        fix="set model.num_moe_experts, or remove the MoE keys",
    )


@rule("MOE007", "expert-bias-with-etp", ERROR)
def expert_bias_with_etp(c: Context) -> Hit | None:
    """Linear biases in experts split over more than one expert tensor-parallel rank.

    ## What it does
    Checks that an MoE model with `add_bias_linear: true` (Megatron's default) uses
    `expert_tensor_parallel_size: 1` (ETP defaults to TP).

    ## Why it matters
    Megatron-Core supports expert biases only without expert tensor parallelism and raises at
    start-up.

    ## Example
    ```yaml
    model: {num_moe_experts: 8, tensor_model_parallel_size: 2}   # add_bias_linear defaults to true
    ```

    ## Fix
    Set `expert_tensor_parallel_size: 1`, or `add_bias_linear: false` if the architecture has no biases.
    """
    if not c.d.is_moe or c.d.etp == 1 or not c.model.add_bias_linear:
        return None
    return Hit(
        message=f"model.add_bias_linear=true with expert tensor-parallel size {c.d.etp}",
        fix="set model.expert_tensor_parallel_size=1, or model.add_bias_linear=false",
        upstream="Bias in Moe is only supported when ETP==1",
    )
