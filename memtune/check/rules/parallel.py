"""PAR: parallel sizes and their divisibility."""

from __future__ import annotations

from memtune.check.context import Context
from memtune.check.finding import ERROR, Hit
from memtune.check.registry import rule
from memtune.config.versions import format_version

# megatron-core 0.16 accepts query groups that divide TP (KV heads are then replicated).
QUERY_GROUPS_DIVISOR_SINCE = (0, 16, 0)


@rule("PAR001", "world-size-not-divisible", ERROR)
def world_size_not_divisible(c: Context) -> Hit | None:
    """The GPU count is not a multiple of TP × PP × CP.

    ## What it does
    Checks that `cluster.num_gpus` is divisible by `tensor_model_parallel_size ×
    pipeline_model_parallel_size × context_parallel_size`.

    ## Why it matters
    Megatron derives the data-parallel size as world / (TP × PP × CP) and stops at start-up when
    that leaves a remainder, after the job has waited for its nodes.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 4, pipeline_model_parallel_size: 2}
    cluster: {num_gpus: 12}
    ```

    ## Fix
    Run on a multiple of TP × PP × CP GPUs (8 or 16 here), or choose sizes whose product divides
    the GPU count.
    """
    d = c.d
    size = d.tp * d.pp * d.cp
    if d.world_size_assumed or d.world_size % size == 0:
        return None
    return Hit(
        message=f"cluster.num_gpus={d.world_size} is not divisible by TP×PP×CP = {d.tp}×{d.pp}×{d.cp} = {size}",
        fix=f"use a multiple of {size} GPUs, or parallel sizes whose product divides {d.world_size}",
        upstream=f"world size ({d.world_size}) is not divisible by total_model_size (total_model_size={size})",
    )


@rule("PAR002", "expert-world-size-not-divisible", ERROR)
def expert_world_size_not_divisible(c: Context) -> Hit | None:
    """The GPU count is not a multiple of ETP × EP × PP in an MoE model.

    ## What it does
    For MoE models, checks that `cluster.num_gpus` is divisible by
    `expert_tensor_parallel_size × expert_model_parallel_size × pipeline_model_parallel_size`.

    ## Why it matters
    Expert layers are laid out as ETP × EP × EDP × PP over the same GPUs as the dense layers;
    Megatron's `parallel_state` refuses a world size that does not fill whole expert groups.

    ## Example
    ```yaml
    model: {num_moe_experts: 64, expert_model_parallel_size: 16, tensor_model_parallel_size: 2}
    cluster: {num_gpus: 24}
    ```

    ## Fix
    Choose EP (and ETP) so that ETP × EP × PP divides the GPU count.
    """
    d = c.d
    size = d.etp * d.ep * d.pp
    if not d.is_moe or d.world_size_assumed or d.world_size % size == 0:
        return None
    return Hit(
        message=f"cluster.num_gpus={d.world_size} is not divisible by ETP×EP×PP = {d.etp}×{d.ep}×{d.pp} = {size}",
        fix=f"choose expert_model_parallel_size / expert_tensor_parallel_size so that ETP×EP×PP divides {d.world_size}",
        upstream=f"world_size ({d.world_size}) is not divisible by expert_tensor_model_pipeline_parallel size ({size})",
    )


@rule("PAR003", "heads-not-divisible-by-tp", ERROR)
def heads_not_divisible_by_tp(c: Context) -> Hit | None:
    """`num_attention_heads` is not a multiple of the tensor-parallel size.

    ## What it does
    Checks `num_attention_heads % tensor_model_parallel_size == 0`.

    ## Why it matters
    Tensor parallelism splits attention by heads; Megatron-Core's `TransformerConfig` raises at
    construction when the heads do not split evenly.

    ## Example
    ```yaml
    model: {num_attention_heads: 40, tensor_model_parallel_size: 16}
    ```

    ## Fix
    Use a TP size that divides the head count (8 for 40 heads).
    """
    m = c.model
    if m.num_attention_heads % c.d.tp == 0:
        return None
    return Hit(
        message=f"model.num_attention_heads={m.num_attention_heads} is not a multiple of "
        f"model.tensor_model_parallel_size={c.d.tp}",
        fix=f"use a tensor_model_parallel_size that divides {m.num_attention_heads}",
        upstream=f"num_attention_heads ({m.num_attention_heads}) must be a multiple of tensor_model_parallel_size ({c.d.tp}).",
    )


@rule("PAR004", "query-groups-vs-tp", ERROR)
def query_groups_vs_tp(c: Context) -> Hit | None:
    """`num_query_groups` does not fit the tensor-parallel size (version-dependent).

    ## What it does
    Up to megatron-core 0.15 the query groups (KV heads) must be a multiple of
    `tensor_model_parallel_size`; from 0.16 a divisor of it is accepted too (each TP rank then
    holds a replicated KV head). Reads `env.megatron_core_version`.

    ## Why it matters
    Megatron-Core's `TransformerConfig` raises at start-up otherwise. Llama-3 with 8 KV heads at
    TP 16 fails on 0.15 and runs on 0.16.

    ## Example
    ```yaml
    model: {num_attention_heads: 32, num_query_groups: 8, tensor_model_parallel_size: 16}
    env: {megatron_core_version: "0.15.0"}
    ```

    ## Fix
    Use a TP size that divides the query groups, or (for a divisor) megatron-core 0.16 or newer.
    """
    groups, tp = c.d.num_query_groups, c.d.tp
    if groups % tp == 0:
        return None
    if c.mcore >= QUERY_GROUPS_DIVISOR_SINCE:
        if tp % groups == 0:
            return None
        relation = "a multiple or divisor of"
    else:
        relation = "a multiple of"
    return Hit(
        message=f"model.num_query_groups={groups} is not {relation} model.tensor_model_parallel_size={tp} "
        f"(megatron-core {format_version(c.mcore)})",
        fix=f"use a tensor_model_parallel_size that divides {groups}"
        + (", or megatron-core >= 0.16, which accepts a divisor" if tp % groups == 0 else ""),
        upstream=f"num_query_groups ({groups}) must be {relation} tensor_model_parallel_size ({tp}).",
    )


@rule("PAR005", "ffn-not-divisible-by-tp", ERROR)
def ffn_not_divisible_by_tp(c: Context) -> Hit | None:
    """The dense MLP width is not divisible by the tensor-parallel size.

    ## What it does
    For models with at least one dense layer, checks `ffn_hidden_size % tensor_model_parallel_size == 0`
    (`ffn_hidden_size` defaults to 4 × `hidden_size`).

    ## Why it matters
    The MLP's fc1 is column-parallel and fc2 row-parallel over TP; the split is Megatron's
    `divide()`, which asserts at model construction.

    ## Example
    ```yaml
    model: {hidden_size: 4096, ffn_hidden_size: 10900, tensor_model_parallel_size: 8}
    ```

    ## Fix
    Use a TP size that divides `ffn_hidden_size`.
    """
    ffn, tp = c.d.ffn_hidden_size, c.d.tp
    if not c.any_dense_layer or ffn % tp == 0:
        return None
    return Hit(
        message=f"model.ffn_hidden_size={ffn} is not divisible by model.tensor_model_parallel_size={tp}",
        fix=f"use a tensor_model_parallel_size that divides {ffn}",
        upstream=f"{ffn} is not divisible by {tp}",
    )


@rule("PAR006", "pipeline-dtype-missing", ERROR)
def pipeline_dtype_missing(c: Context) -> Hit | None:
    """Pipeline parallelism without `pipeline_dtype`.

    ## What it does
    Checks that `model.pipeline_dtype` is set when `pipeline_model_parallel_size > 1`.

    ## Why it matters
    Pipeline stages exchange activations through pre-allocated buffers of that dtype;
    Megatron-Core's `ModelParallelConfig` refuses PP > 1 without it. Megatron-LM's argument
    parser and Megatron-Bridge's `finalize()` fill it from the parameter dtype, so this is an
    error only for jobs with `defaults: megatron-core`.

    ## Example
    ```yaml
    defaults: megatron-core
    model: {pipeline_model_parallel_size: 4, bf16: true, pipeline_dtype: null}
    ```

    ## Fix
    Set `model.pipeline_dtype` to the training dtype, e.g. `bf16`.
    """
    if c.d.pp == 1 or c.model.pipeline_dtype is not None or c.d.stack != "megatron-core":
        return None
    dtype = c.d.param_dtype
    return Hit(
        message=f"model.pipeline_model_parallel_size={c.d.pp} but model.pipeline_dtype is not set "
        "(Megatron-Core requires it; Megatron-LM and Megatron-Bridge fill it in)",
        fix=f"set model.pipeline_dtype={dtype}",
        upstream="When using pipeline parallelism, pipeline_dtype must be specified",
    )
