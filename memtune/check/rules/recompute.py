"""REC: activation recompute (granularity, method, layers, selective modules)."""

from __future__ import annotations

from collections.abc import Iterable

from memtune.check.context import Context
from memtune.check.finding import ERROR, WARNING, Hit
from memtune.check.registry import rule
from memtune.config.derived import DEFAULT_RECOMPUTE_MODULES
from memtune.config.versions import Version, format_version

# Selective-recompute labels each megatron-core release accepts.
_MODULES_0_13 = frozenset({"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe"})
_MODULES_BY_VERSION: tuple[tuple[Version, frozenset[str]], ...] = (
    ((0, 20, 0), _MODULES_0_13 | {"shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"}),  # main
    ((0, 19, 0), _MODULES_0_13 | {"shared_experts", "gdn_norm_out"}),
    ((0, 14, 0), _MODULES_0_13 | {"shared_experts"}),
    ((0, 0, 0), _MODULES_0_13),
)


def allowed_recompute_modules(mcore: Version) -> frozenset[str]:
    return next(modules for since, modules in _MODULES_BY_VERSION if mcore >= since)


def _set_repr(names: Iterable[str]) -> str:
    return "{" + ", ".join(repr(n) for n in sorted(names)) + "}"


def _selective_modules(c: Context) -> tuple[str, ...]:
    return c.d.recompute_modules


@rule("REC001", "full-without-method", ERROR)
def full_without_method(c: Context) -> Hit | None:
    """Full recompute without a recompute method.

    ## What it does
    Checks that `recompute_granularity: full` comes with `recompute_method: uniform` or `block`.

    ## Why it matters
    The method decides which layers are checkpointed; Megatron-Core raises without one.

    ## Example
    ```yaml
    model: {recompute_granularity: full, recompute_num_layers: 1}
    ```

    ## Fix
    Add `recompute_method: uniform` (checkpoint every group of `recompute_num_layers` layers) or
    `block` (checkpoint the first `recompute_num_layers` layers of each stage).
    """
    if c.model.recompute_granularity != "full" or c.model.recompute_method is not None:
        return None
    return Hit(
        message="model.recompute_granularity=full but model.recompute_method is not set",
        fix="set model.recompute_method=uniform (or block)",
        upstream='Using recompute_granularity: full so recompute_method must be "block" or "uniform"',
    )


@rule("REC002", "full-num-layers-range", ERROR)
def full_num_layers_range(c: Context) -> Hit | None:
    """Full recompute with `recompute_num_layers` missing or outside 1..layers per stage.

    ## What it does
    Checks `1 <= recompute_num_layers <= num_layers // pipeline_model_parallel_size` when
    `recompute_granularity: full`.

    ## Why it matters
    Megatron-Core raises at start-up otherwise. The count is per pipeline stage (per virtual
    stage with VPP), not per model.

    ## Example
    ```yaml
    model: {num_layers: 32, pipeline_model_parallel_size: 4, pipeline_dtype: bf16,
            recompute_granularity: full, recompute_method: block, recompute_num_layers: 16}
    ```

    ## Fix
    Set `recompute_num_layers` between 1 and the layers per stage (8 above).
    """
    m = c.model
    if m.recompute_granularity != "full":
        return None
    per_rank = m.num_layers // c.d.pp
    n = m.recompute_num_layers
    if n is not None and 1 <= n <= per_rank:
        return None
    return Hit(
        message=f"model.recompute_num_layers={n} with model.recompute_granularity=full; "
        f"it must be between 1 and {per_rank} (layers per pipeline stage)",
        fix=f"set model.recompute_num_layers to a value in 1..{per_rank}",
        upstream="When using recompute_granularity: full recompute_num_layers must be between 1 and "
        f"num_layers_per_pipeline_rank: {per_rank}",
    )


@rule("REC003", "selective-with-num-layers", ERROR)
def selective_with_num_layers(c: Context) -> Hit | None:
    """Selective recompute with `recompute_num_layers` set.

    ## What it does
    Checks that `recompute_num_layers` is unset when `recompute_granularity: selective`.

    ## Why it matters
    Selective recompute applies to every layer; Megatron-Core raises when a layer count is given.

    ## Example
    ```yaml
    model: {recompute_granularity: selective, recompute_num_layers: 4}
    ```

    ## Fix
    Remove `recompute_num_layers` (use `recompute_modules` to choose what is recomputed).
    """
    m = c.model
    if m.recompute_granularity != "selective" or m.recompute_num_layers is None:
        return None
    return Hit(
        message=f"model.recompute_num_layers={m.recompute_num_layers} with model.recompute_granularity=selective",
        fix="remove model.recompute_num_layers",
        upstream="When using recompute_granularity: selective recompute_num_layers must be None.",
    )


@rule("REC004", "recompute-options-without-granularity", WARNING)
def recompute_options_without_granularity(c: Context) -> Hit | None:
    """`recompute_method` / `recompute_num_layers` set, but recompute is off.

    ## What it does
    Flags `recompute_method` or `recompute_num_layers` without `recompute_granularity`.

    ## Why it matters
    Without a granularity Megatron ignores both, so no layer is recomputed and the memory you
    expected to save is still spent.

    ## Example
    ```yaml
    model: {recompute_method: uniform, recompute_num_layers: 1}
    ```

    ## Fix
    Add `recompute_granularity: full`, or remove the two keys.
    """
    m = c.model
    stray = [
        f"model.{k}={getattr(m, k)}"
        for k in ("recompute_method", "recompute_num_layers")
        if getattr(m, k) is not None
    ]
    if m.recompute_granularity is not None or not stray:
        return None
    return Hit(
        message=f"{', '.join(stray)} but model.recompute_granularity is not set, so nothing is recomputed",
        fix="set model.recompute_granularity=full, or remove the recompute keys",
    )


@rule("REC005", "modules-without-selective", WARNING)
def modules_without_selective(c: Context) -> Hit | None:
    """`recompute_modules` set, but selective recompute is off.

    ## What it does
    Flags a non-empty `recompute_modules` when `recompute_granularity` is not `selective`.
    Megatron-Core's own default, `[core_attn]`, is not flagged: Megatron-Bridge writes it into
    every config it dumps.

    ## Why it matters
    The list is read only by selective recompute. With no granularity nothing is recomputed;
    with `full` whole layers are recomputed and the list is ignored.

    ## Example
    ```yaml
    model: {recompute_modules: [mla_up_proj, moe_act]}
    ```

    ## Fix
    Add `recompute_granularity: selective`, or remove `recompute_modules`.
    """
    m = c.model
    if m.recompute_granularity == "selective" or not m.recompute_modules:
        return None
    if tuple(m.recompute_modules) == DEFAULT_RECOMPUTE_MODULES:
        return None
    granularity = (
        f"with model.recompute_granularity={m.recompute_granularity}"
        if m.recompute_granularity
        else "while model.recompute_granularity is not set"
    )
    return Hit(
        message=f"model.recompute_modules={m.recompute_modules} is ignored {granularity}",
        fix="set model.recompute_granularity=selective, or remove model.recompute_modules",
    )


@rule("REC006", "unknown-recompute-module", ERROR)
def unknown_recompute_module(c: Context) -> Hit | None:
    """A `recompute_modules` name that this megatron-core version does not know.

    ## What it does
    Checks each selective-recompute label against the set the configured
    `env.megatron_core_version` accepts: 0.13 knows core_attn, moe_act, layernorm, mla_up_proj,
    mlp, moe; 0.14 adds shared_experts; 0.19 adds gdn_norm_out; main (treated as 0.20+) adds
    gdp_in_proj, gdp_qkv and mhc.

    ## Why it matters
    Megatron-Core asserts at start-up on an unknown label (often a typo, or a label from a newer
    release or a dev branch).

    ## Example
    ```yaml
    model: {recompute_granularity: selective, recompute_modules: [shared_experts]}
    env: {megatron_core_version: "0.13.1"}
    ```

    ## Fix
    Use only the labels listed in the message, or upgrade megatron-core.
    """
    if c.model.recompute_granularity != "selective":
        return None
    allowed = allowed_recompute_modules(c.mcore)
    unknown = sorted(set(_selective_modules(c)) - allowed)
    if not unknown:
        return None
    return Hit(
        message=f"model.recompute_modules has {', '.join(unknown)}, unknown to megatron-core {format_version(c.mcore)}",
        fix=f"use only {', '.join(sorted(allowed))}",
        upstream=f"Invalid choices for recompute_modules: {_set_repr(unknown)}. Allowed modules are: {_set_repr(allowed)}",
    )


@rule("REC007", "moe-act-without-grouped-gemm", ERROR)
def moe_act_without_grouped_gemm(c: Context) -> Hit | None:
    """`moe_act` recompute without grouped GEMM.

    ## What it does
    Checks that `moe_act` in `recompute_modules` comes with `moe_grouped_gemm: true`.

    ## Why it matters
    The activation recompute hooks into the grouped-GEMM expert MLP; Megatron-Core raises otherwise.

    ## Example
    ```yaml
    model: {num_moe_experts: 64, recompute_granularity: selective, recompute_modules: [moe_act]}
    ```

    ## Fix
    Set `moe_grouped_gemm: true`, or drop `moe_act`.
    """
    if "moe_act" not in _selective_modules(c) or c.model.moe_grouped_gemm:
        return None
    return Hit(
        message="model.recompute_modules includes moe_act but model.moe_grouped_gemm=false",
        fix="set model.moe_grouped_gemm=true, or remove moe_act from model.recompute_modules",
        upstream="moe_act in recompute_modules is only supported with moe_grouped_gemm.",
    )


@rule("REC008", "mla-up-proj-without-mla", ERROR)
def mla_up_proj_without_mla(c: Context) -> Hit | None:
    """`mla_up_proj` recompute in a model without multi-latent attention.

    ## What it does
    Checks that `mla_up_proj` in `recompute_modules` comes with `multi_latent_attention: true`.

    ## Why it matters
    The label recomputes MLA's query/key-value up-projections; Megatron-Core raises without MLA.

    ## Example
    ```yaml
    model: {recompute_granularity: selective, recompute_modules: [mla_up_proj]}
    ```

    ## Fix
    Remove `mla_up_proj` (for standard attention, `core_attn` or `layernorm` are the candidates).
    """
    if "mla_up_proj" not in _selective_modules(c) or c.model.multi_latent_attention:
        return None
    return Hit(
        message="model.recompute_modules includes mla_up_proj but model.multi_latent_attention=false",
        fix="remove mla_up_proj from model.recompute_modules",
        upstream="mla_up_proj in recompute_modules is only supported with multi_latent_attention.",
    )


@rule("REC009", "shared-experts-recompute-with-overlap", ERROR)
def shared_experts_recompute_with_overlap(c: Context) -> Hit | None:
    """`shared_experts` recompute together with shared-expert overlap.

    ## What it does
    Checks that `shared_experts` in `recompute_modules` is not combined with
    `moe_shared_expert_overlap: true`.

    ## Why it matters
    An overlapped shared expert runs on a side stream that checkpointing cannot wrap;
    Megatron-Core raises.

    ## Example
    ```yaml
    model: {num_moe_experts: 64, moe_shared_expert_intermediate_size: 2816, moe_shared_expert_overlap: true,
            moe_token_dispatcher_type: alltoall, recompute_granularity: selective, recompute_modules: [shared_experts]}
    ```

    ## Fix
    Drop one of the two.
    """
    m = c.model
    if "shared_experts" not in _selective_modules(c) or not (
        m.moe_shared_expert_intermediate_size and m.moe_shared_expert_overlap
    ):
        return None
    return Hit(
        message="model.recompute_modules includes shared_experts with model.moe_shared_expert_overlap=true",
        fix="remove shared_experts from model.recompute_modules, or set model.moe_shared_expert_overlap=false",
        upstream="shared_experts recompute cannot work with --moe-shared-expert-overlap.",
    )


@rule("REC010", "fp8-delayed-recompute-modules", ERROR)
def fp8_delayed_recompute_modules(c: Context) -> Hit | None:
    """`moe_act` or `layernorm` recompute with FP8 delayed scaling.

    ## What it does
    Checks that FP8 with `fp8_recipe: delayed` does not recompute `moe_act` or `layernorm`.

    ## Why it matters
    These labels discard outputs that delayed scaling's amax history needs; Megatron-Core raises.

    ## Example
    ```yaml
    model: {fp8: hybrid, fp8_recipe: delayed, recompute_granularity: selective, recompute_modules: [layernorm]}
    ```

    ## Fix
    Use another FP8 recipe (`tensorwise`, `blockwise`, `mxfp8`), or drop those labels.
    """
    m = c.model
    clash = sorted({"moe_act", "layernorm"} & set(_selective_modules(c)))
    if not m.fp8 or m.fp8_recipe != "delayed" or not clash:
        return None
    return Hit(
        message=f"model.recompute_modules includes {', '.join(clash)} with model.fp8={m.fp8} and model.fp8_recipe=delayed",
        fix="remove those labels, or use fp8_recipe tensorwise/blockwise/mxfp8",
        upstream="Delayed scaling does not support moe_act and layernorm recompute for fp8.",
    )


@rule("REC011", "core-attn-with-fused-attention", WARNING)
def core_attn_with_fused_attention(c: Context) -> Hit | None:
    """`core_attn` recompute with flash/fused attention saves almost nothing.

    ## What it does
    Flags selective recompute of `core_attn` (also the default when `recompute_modules` is unset)
    when attention runs in a flash or fused kernel (`attention_backend` flash/fused, or auto with
    Transformer Engine).

    ## Why it matters
    `core_attn` recompute drops the s×s attention scores, which flash/fused attention never keeps
    (it saves only softmax statistics). The step still pays for the recompute: Megatron-Bridge
    measured −0.01 % memory for +3.9 % step time on Moonlight-16B, and a Qwen3-30B run whose peak
    rose. Megatron-Core itself warns about this.

    ## Example
    ```yaml
    model: {recompute_granularity: selective, attention_backend: flash}
    ```

    ## Fix
    Recompute what is actually stored: `mla_up_proj` (MLA), `moe_act` (grouped MoE), `layernorm`
    (MoE), `mlp` or `moe`; or use `recompute_modules: []` as a no-recompute control.
    """
    if "core_attn" not in _selective_modules(c) or not c.d.flash_attention:
        return None
    default = " (the default)" if c.model.recompute_modules is None else ""
    return Hit(
        message=f"model.recompute_modules includes core_attn{default} with model.attention_backend={c.model.attention_backend}: "
        "flash/fused attention keeps no s×s scores, so this recomputes for almost no saving",
        fix="set model.recompute_modules to the labels that matter (mla_up_proj, moe_act, layernorm, mlp, moe) or []",
    )


def _untargeted_modules(c: Context) -> list[str]:
    """Selective labels with nothing to recompute in this model, each with the reason."""
    d, m = c.d, c.model
    modules = set(_selective_modules(c))
    reasons = []
    if "mlp" in modules and c.all_layers_moe:
        reasons.append("mlp (every layer is an MoE layer)")
    if "moe" in modules and not d.is_moe:
        reasons.append("moe (no MoE layers)")
    if "shared_experts" in modules and not (d.is_moe and m.moe_shared_expert_intermediate_size):
        reasons.append("shared_experts (no shared experts)")
    if (
        "layernorm" in modules
        and m.transformer_impl == "transformer_engine"
        and not d.is_moe
        and not m.multi_latent_attention
    ):
        reasons.append("layernorm (Transformer Engine fuses both LayerNorms into the following linears)")
    return reasons


@rule("REC012", "recompute-module-without-target", WARNING)
def recompute_module_without_target(c: Context) -> Hit | None:
    """A selective-recompute label that has nothing to recompute in this model.

    ## What it does
    Flags `mlp` when every layer is an MoE layer, `moe` in a dense model, `shared_experts`
    without shared experts, and `layernorm` in a dense Transformer Engine model without MLA
    (TE fuses both LayerNorms into the next linear layer, leaving identity modules).

    ## Why it matters
    The label is accepted and silently saves nothing, so the memory you planned for is still spent.

    ## Example
    ```yaml
    model: {recompute_granularity: selective, recompute_modules: [moe]}   # dense model
    ```

    ## Fix
    Remove the label; pick one that targets stored activations in this architecture.
    """
    untargeted = _untargeted_modules(c)
    if not untargeted:
        return None
    return Hit(
        message=f"model.recompute_modules: {'; '.join(untargeted)} recompute nothing in this model",
        fix="remove those labels from model.recompute_modules",
    )


@rule("REC013", "distribute-saved-with-sp", ERROR)
def distribute_saved_with_sp(c: Context) -> Hit | None:
    """`distribute_saved_activations` with sequence parallelism.

    ## What it does
    Checks that `distribute_saved_activations: true` is not combined with `sequence_parallel: true`.

    ## Why it matters
    Both split the checkpointed layer input over the TP ranks; SP already does it, and
    Megatron-Core raises.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 4, sequence_parallel: true, distribute_saved_activations: true,
            recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1}
    ```

    ## Fix
    Set `distribute_saved_activations: false` (SP gives the same saving).
    """
    if not (c.model.distribute_saved_activations and c.model.sequence_parallel):
        return None
    return Hit(
        message="model.distribute_saved_activations=true with model.sequence_parallel=true",
        fix="set model.distribute_saved_activations=false",
        upstream="distribute_saved_activations: True must be false when sequence parallel is enabled: True",
    )


@rule("REC014", "distribute-saved-without-effect", WARNING)
def distribute_saved_without_effect(c: Context) -> Hit | None:
    """`distribute_saved_activations` where it cannot split anything.

    ## What it does
    Flags `distribute_saved_activations: true` (without SP) when recompute is not `full` or
    `tensor_model_parallel_size` is 1.

    ## Why it matters
    It only splits the inputs that full recompute checkpoints, and only across TP ranks; otherwise
    it silently does nothing (Megatron-LM's argument parser refuses it outright).

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 1, sequence_parallel: false, distribute_saved_activations: true}
    ```

    ## Fix
    Remove it, or use it with full recompute and TP > 1.
    """
    m = c.model
    if not m.distribute_saved_activations or m.sequence_parallel:
        return None
    reasons = []
    if m.recompute_granularity != "full":
        setting = f"={m.recompute_granularity}" if m.recompute_granularity else " not set"
        reasons.append(f"model.recompute_granularity{setting} (needs full)")
    if c.d.tp == 1:
        reasons.append("model.tensor_model_parallel_size=1 (needs TP > 1)")
    if not reasons:
        return None
    return Hit(
        message=f"model.distribute_saved_activations=true does nothing: {'; '.join(reasons)}",
        fix="remove model.distribute_saved_activations, or use full recompute with TP > 1",
    )


@rule("REC015", "layernorm-recompute-without-te", WARNING)
def layernorm_recompute_without_te(c: Context) -> Hit | None:
    """Selective `layernorm` recompute on the local spec, which needs Transformer Engine anyway.

    ## What it does
    Flags `layernorm` in `recompute_modules` with `transformer_impl: local`.

    ## Why it matters
    Megatron-Core checkpoints the norms with `CheckpointWithoutOutput()`, whose default
    `fp8=False` it reads as "FP8 on" (`self.fp8 = fp8 is not None`,
    `tensor_parallel/random.py`, megatron-core 0.13 to 0.19.2), so the first forward calls
    Transformer Engine's `FP8GlobalStateManager`. Where Transformer Engine is not installed, as
    is usual with the local spec, the job fails at its first step with a `NameError` (measured
    on the H200 with megatron-core 0.19.2). With Transformer Engine installed it runs.

    ## Example
    ```yaml
    model: {transformer_impl: local, attention_backend: flash,
            recompute_granularity: selective, recompute_modules: [layernorm]}
    ```

    ## Fix
    Drop `layernorm` from `recompute_modules`, or make sure Transformer Engine is installed.
    """
    modules = _selective_modules(c)
    if "layernorm" not in modules or c.model.transformer_impl != "local":
        return None
    rest = [m for m in modules if m != "layernorm"]
    # A fix line spells one list value only without commas (memtune/check/finding.py changes_in).
    drop = (
        f"set model.recompute_modules=[{rest[0] if rest else ''}]"
        if len(rest) <= 1
        else ("remove layernorm from model.recompute_modules")
    )
    return Hit(
        message="model.recompute_modules includes layernorm with model.transformer_impl=local: "
        "megatron-core's norm checkpoint calls Transformer Engine, and fails where it is not installed",
        fix=f"{drop}, or install Transformer Engine",
        upstream="name 'FP8GlobalStateManager' is not defined",
    )
