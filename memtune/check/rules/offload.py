"""OFF: CPU offloading of activations, weights and optimizer state."""

from __future__ import annotations

from memtune.check.context import Context
from memtune.check.finding import ERROR, WARNING, Hit
from memtune.check.registry import rule
from memtune.config.derived import OFFLOAD_MODULES


@rule("OFF001", "cpu-offload-with-pp", ERROR)
def cpu_offload_with_pp(c: Context) -> Hit | None:
    """CPU activation offloading with pipeline parallelism.

    ## What it does
    Checks that `cpu_offloading: true` is used with `pipeline_model_parallel_size: 1`.

    ## Why it matters
    Megatron-Core's legacy CPU offload does not support pipelining and raises a `ValueError` at
    start-up — after the job has waited in the queue.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 2, pipeline_dtype: bf16, cpu_offloading: true, cpu_offloading_num_layers: 4}
    ```

    ## Fix
    Turn `cpu_offloading` off (use recompute or the distributed optimizer instead), or use PP = 1.
    """
    if not c.model.cpu_offloading or c.d.pp == 1:
        return None
    return Hit(
        message=f"model.cpu_offloading=true with model.pipeline_model_parallel_size={c.d.pp}",
        fix="set model.cpu_offloading=false, or model.pipeline_model_parallel_size=1",
        upstream="Currently there is no support for Pipeline parallelism with CPU offloading",
    )


@rule("OFF002", "cpu-offload-with-recompute", ERROR)
def cpu_offload_with_recompute(c: Context) -> Hit | None:
    """CPU activation offloading with activation recompute.

    ## What it does
    Checks that `cpu_offloading: true` is not combined with any `recompute_granularity`.

    ## Why it matters
    Megatron-Core raises at start-up: offloading and recompute both manage the saved activations.

    ## Example
    ```yaml
    model: {cpu_offloading: true, cpu_offloading_num_layers: 4, recompute_granularity: selective}
    ```

    ## Fix
    Choose one: unset `recompute_granularity` or set `cpu_offloading: false`.
    """
    if not c.model.cpu_offloading or c.model.recompute_granularity is None:
        return None
    return Hit(
        message=f"model.cpu_offloading=true with model.recompute_granularity={c.model.recompute_granularity}",
        fix="unset model.recompute_granularity, or set model.cpu_offloading=false",
        upstream="CPU offloading does not work when activation recomputation is enabled",
    )


@rule("OFF003", "cpu-offload-with-cuda-graphs", ERROR)
def cpu_offload_with_cuda_graphs(c: Context) -> Hit | None:
    """CPU activation offloading with per-layer CUDA graphs.

    ## What it does
    Checks that `cpu_offloading: true` is not combined with `cuda_graph_impl` `local` or
    `transformer_engine` (full-iteration graphs are exempt in current Megatron-Core).

    ## Why it matters
    Offloading moves tensors between devices at run time, which a captured graph cannot replay;
    Megatron-Core raises.

    ## Example
    ```yaml
    model: {cpu_offloading: true, cpu_offloading_num_layers: 4, cuda_graph_impl: transformer_engine}
    ```

    ## Fix
    Drop one of the two.
    """
    impl = c.model.cuda_graph_impl
    if not c.model.cpu_offloading or impl not in ("local", "transformer_engine"):
        return None
    return Hit(
        message=f"model.cpu_offloading=true with model.cuda_graph_impl={impl}",
        fix="set model.cuda_graph_impl=none, or model.cpu_offloading=false",
        upstream="CUDA graphs not supported with CPU offloading.",
    )


@rule("OFF004", "cpu-offload-layer-count", ERROR)
def cpu_offload_layer_count(c: Context) -> Hit | None:
    """`cpu_offloading_num_layers` outside 0..num_layers-1.

    ## What it does
    With `cpu_offloading: true`, checks `0 <= cpu_offloading_num_layers < num_layers`.

    ## Why it matters
    The last layer's activations are needed at once by the backward pass and cannot be offloaded;
    Megatron-Core raises otherwise.

    ## Example
    ```yaml
    model: {num_layers: 32, cpu_offloading: true, cpu_offloading_num_layers: 32}
    ```

    ## Fix
    Offload at most `num_layers - 1` layers.
    """
    m = c.model
    if not m.cpu_offloading or 0 <= m.cpu_offloading_num_layers < m.num_layers:
        return None
    return Hit(
        message=f"model.cpu_offloading_num_layers={m.cpu_offloading_num_layers} must be in 0..{m.num_layers - 1}",
        fix=f"set model.cpu_offloading_num_layers to at most {m.num_layers - 1}",
        upstream=f"CPU offloading can be done only for layers less than {m.num_layers}",
    )


@rule("OFF005", "cpu-offload-zero-layers", WARNING)
def cpu_offload_zero_layers(c: Context) -> Hit | None:
    """CPU offloading turned on for zero layers.

    ## What it does
    Flags `cpu_offloading: true` with `cpu_offloading_num_layers: 0` (the default).

    ## Why it matters
    The offload context is built but offloads no layer: no memory is saved, and the
    pinned-buffer machinery still runs.

    ## Example
    ```yaml
    model: {cpu_offloading: true}
    ```

    ## Fix
    Set `cpu_offloading_num_layers` to the number of layers to offload, or turn it off.
    """
    if not c.model.cpu_offloading or c.model.cpu_offloading_num_layers != 0:
        return None
    return Hit(
        message="model.cpu_offloading=true with model.cpu_offloading_num_layers=0 offloads nothing",
        fix="set model.cpu_offloading_num_layers to the number of layers to offload",
    )


@rule("OFF006", "optimizer-offload-without-distopt", ERROR)
def optimizer_offload_without_distopt(c: Context) -> Hit | None:
    """Optimizer CPU offload without the distributed optimizer.

    ## What it does
    Checks that `optimizer.optimizer_cpu_offload: true` comes with the distributed optimizer.

    ## Why it matters
    The hybrid-device optimizer that offloads state is built on the distributed optimizer's
    sharded main parameters (and the precision-aware flag requires it too).

    ## Example
    ```yaml
    optimizer: {optimizer_cpu_offload: true, use_precision_aware_optimizer: true}
    ```

    ## Fix
    Set `use_distributed_optimizer: true` in both `optimizer` and `ddp`.
    """
    if not c.job.optimizer.optimizer_cpu_offload or c.distributed_optimizer:
        return None
    return Hit(
        message="optimizer.optimizer_cpu_offload=true without the distributed optimizer",
        fix="set optimizer.use_distributed_optimizer=true and ddp.use_distributed_optimizer=true",
    )


@rule("OFF007", "optimizer-offload-without-precision-aware", ERROR)
def optimizer_offload_without_precision_aware(c: Context) -> Hit | None:
    """Optimizer CPU offload without the precision-aware optimizer.

    ## What it does
    Checks that `optimizer.optimizer_cpu_offload: true` comes with
    `optimizer.use_precision_aware_optimizer: true`.

    ## Why it matters
    The hybrid-device optimizer reuses the precision-aware code path; Megatron refuses it otherwise.

    ## Example
    ```yaml
    optimizer: {optimizer_cpu_offload: true, use_distributed_optimizer: true}
    ```

    ## Fix
    Set `optimizer.use_precision_aware_optimizer: true`.
    """
    opt = c.job.optimizer
    if not opt.optimizer_cpu_offload or opt.use_precision_aware_optimizer:
        return None
    return Hit(
        message="optimizer.optimizer_cpu_offload=true with optimizer.use_precision_aware_optimizer=false",
        fix="set optimizer.use_precision_aware_optimizer=true",
        upstream="The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`, "
        "as the hybrid device optimizer reuses the code path of this flag.",
    )


@rule("OFF008", "offload-fraction-without-offload", WARNING)
def offload_fraction_without_offload(c: Context) -> Hit | None:
    """`optimizer_offload_fraction` set, but optimizer offload is off.

    ## What it does
    Flags an `optimizer.optimizer_offload_fraction` strictly between 0 and 1 while
    `optimizer.optimizer_cpu_offload` is false (the defaults, 1.0 in Megatron-LM and 0.0 in
    Megatron-Core's `OptimizerConfig`, are not flagged).

    ## Why it matters
    The fraction is read only when offloading is on, so no optimizer state leaves the GPU.

    ## Example
    ```yaml
    optimizer: {optimizer_offload_fraction: 0.5}
    ```

    ## Fix
    Set `optimizer.optimizer_cpu_offload: true` (with the distributed and precision-aware
    optimizer), or remove the fraction.
    """
    opt = c.job.optimizer
    if opt.optimizer_cpu_offload or opt.optimizer_offload_fraction in (0.0, 1.0):
        return None
    return Hit(
        message=f"optimizer.optimizer_offload_fraction={opt.optimizer_offload_fraction} with "
        "optimizer.optimizer_cpu_offload=false offloads nothing",
        fix="set optimizer.optimizer_cpu_offload=true, or remove optimizer.optimizer_offload_fraction",
    )


@rule("OFF009", "fine-grained-offload-settings", ERROR)
def fine_grained_offload_settings(c: Context) -> Hit | None:
    """Fine-grained activation offloading with settings Megatron-Core refuses.

    ## What it does
    With `fine_grained_activation_offloading: true`, checks that `cpu_offloading` is off and
    that `offload_modules` names at least one module, only modules Megatron-Core knows
    (`attn_norm`, `qkv_linear`, `core_attn`, `attn_proj`, `mlp_norm`, `expert_fc1`, `moe_act`,
    `fused_group_mlp`), `core_attn` whenever it names `attn_proj`, no module inside an MoE layer
    that selective recompute (`moe`) recomputes whole, no `attn_norm` with full recompute where
    the input norm is a module of its own (the local spec, or multi-latent attention), and, for
    Megatron-LM and Megatron-Bridge, Transformer Engine's layer implementation (for Bridge under
    Transformer Engine 2.10 and newer also `env.NVTE_CPU_OFFLOAD_V1: "1"`).

    ## Why it matters
    Megatron-Core asserts on each at start-up: both offloads take over the saved activations,
    `attn_proj`'s input is `core_attn`'s output, which the attention's backward needs, and a
    recomputed MoE layer saves nothing inside it to offload. `attn_norm`'s commit frees the
    layer's input storage (`forced_released_tensors=[residual]`), which a full-recompute
    checkpoint needs to replay the layer: measured on the H200 (`memtune measure`), the first
    backward then fails inside the norm. Megatron-LM's argument checks and Megatron-Bridge's
    config validation accept the feature only with Transformer Engine's layers, and Bridge also
    insists that Transformer Engine 2.10+ be told not to offload weights.

    ## Example
    ```yaml
    model: {fine_grained_activation_offloading: true, offload_modules: [attn_proj]}
    ```

    ## Fix
    Turn `cpu_offloading` off, and list the modules whose activations should move to the host,
    with `core_attn` beside `attn_proj`.
    """
    m = c.model
    if not m.fine_grained_activation_offloading:
        return None
    if m.cpu_offloading:
        return Hit(
            message="model.fine_grained_activation_offloading=true with model.cpu_offloading=true",
            fix="set model.cpu_offloading=false, or model.fine_grained_activation_offloading=false",
            upstream="fine_grained_activation_offloading cannot be enabled with cpu_offloading.",
        )
    modules = m.offload_modules or []
    return (
        _unknown_offload_modules(modules)
        or _offload_module_conflicts(c, modules)
        or _fine_grained_offload_stack(c)
    )


def _unknown_offload_modules(modules: list[str]) -> Hit | None:
    """The hit for an empty ``offload_modules``, or one naming modules Megatron-Core does not know."""
    unknown = sorted(set(modules) - set(OFFLOAD_MODULES))
    if modules and not unknown:
        return None
    allowed = ", ".join(OFFLOAD_MODULES)
    return Hit(
        message=f"model.offload_modules={modules} with model.fine_grained_activation_offloading=true"
        + (f": unknown {', '.join(unknown)}" if unknown else ": no module named"),
        fix=f"name some of {allowed} in model.offload_modules",
        upstream=f"Invalid choices for offload_modules: {{{', '.join(repr(u) for u in unknown)}}}."
        if unknown
        else None,
    )


def _offload_module_conflicts(c: Context, modules: list[str]) -> Hit | None:
    """The hit for offloaded modules that the job's other modules or its recompute need kept."""
    m = c.model
    if "attn_proj" in modules and "core_attn" not in modules:
        return Hit(
            message="model.offload_modules has attn_proj without core_attn",
            fix="add core_attn to model.offload_modules, or remove attn_proj",
            upstream="attn_proj cannot be set to offload_modules alone without core_attn because the input of "
            "attn_proj is the output of core_attn, which is needed in core_attn.backward().",
        )
    inside_moe = sorted({"moe_act", "expert_fc1", "fused_group_mlp"} & set(modules))
    if inside_moe and "moe" in c.d.recompute_modules:
        return Hit(
            message=f"model.offload_modules has {', '.join(inside_moe)} while recompute_modules recomputes "
            "the whole MoE layer",
            fix=f"remove {', '.join(inside_moe)} from model.offload_modules, or moe from model.recompute_modules",
            upstream=f"Cannot offload {{{', '.join(repr(x) for x in inside_moe)}}} while recomputing the entire "
            "MoE layer.",
        )
    if "attn_norm" in modules and c.d.separate_input_norm and m.recompute_granularity == "full":
        return Hit(
            message="model.offload_modules has attn_norm with model.recompute_granularity=full: at attn_norm's "
            "commit megatron-core 0.19.2 frees the layer's input, which a full-recompute checkpoint keeps to "
            "replay the layer, so the first backward fails",
            fix="remove attn_norm from model.offload_modules, or use selective recompute",
            upstream="The tensor has a non-zero number of elements, but its data is not allocated yet.",
        )
    return None


def _fine_grained_offload_stack(c: Context) -> Hit | None:
    """The hit for a layer implementation or TE setting the stack refuses fine-grained offloading with."""
    m = c.model
    if c.d.stack != "megatron-core" and m.transformer_impl != "transformer_engine":
        upstream = (
            "Fine-grained activation offloading is only supported with transformer_engine implementation"
        )
        if c.d.stack == "megatron-bridge":
            upstream += f". Current transformer_impl: {m.transformer_impl}"
        return Hit(
            message=f"model.fine_grained_activation_offloading=true with model.transformer_impl={m.transformer_impl}",
            fix="set model.transformer_impl=transformer_engine",
            upstream=upstream,
        )
    if c.d.fine_grained_offload_needs_te_cpu_offload_v1 and c.job.env.NVTE_CPU_OFFLOAD_V1 != "1":
        return Hit(
            message="model.fine_grained_activation_offloading=true under Transformer Engine "
            f"{c.job.env.transformer_engine_version} without env.NVTE_CPU_OFFLOAD_V1=1",
            fix='set env.NVTE_CPU_OFFLOAD_V1="1"',
            upstream="For fine-grained activation offloading with TE >= 2.10.0, NVTE_CPU_OFFLOAD_V1 environment "
            "variable should be set to 1 to avoid offloading weights.",
        )
    return None


@rule("OFF010", "fine-grained-offload-vpp-full-recompute", ERROR)
def fine_grained_offload_vpp_full_recompute(c: Context) -> Hit | None:
    """Fine-grained activation offloading with interleaved VPP and full recompute.

    ## What it does
    Flags `fine_grained_activation_offloading: true` together with
    `virtual_pipeline_model_parallel_size` > 1 and `recompute_granularity: full`.

    ## Why it matters
    The offload manager queues one chunk handler per virtual stage and microbatch in forward
    order and expects each layer group's backward to commit on the handler at the front of that
    queue (`ChunkOffloadHandler.on_group_commit_backward`, megatron-core 0.19.2
    `pipeline_parallel/fine_grained_activation_offload.py`). Full recompute replays each
    checkpointed layer's forward inside the backward, and with interleaved stages the replayed
    groups commit on another chunk's handler: the first backward fails with
    `AssertionError: Chunk mismatch`, after the job has waited for its GPUs (measured on the
    H200). The same offload without VPP runs, and so does VPP without recompute.

    ## Example
    ```yaml
    model: {fine_grained_activation_offloading: true, offload_modules: [core_attn],
            virtual_pipeline_model_parallel_size: 2,
            recompute_granularity: full, recompute_method: uniform, recompute_num_layers: 1}
    ```

    ## Fix
    Turn fine-grained offloading off, drop VPP, or use selective recompute instead of full.
    """
    m = c.model
    if not m.fine_grained_activation_offloading or c.d.vpp == 1 or m.recompute_granularity != "full":
        return None
    return Hit(
        message=f"model.fine_grained_activation_offloading=true with {c.d.vpp} virtual pipeline stages per "
        "rank and model.recompute_granularity=full: "
        "megatron-core's offload manager loses track of the virtual-stage chunks when full recompute "
        "replays layers in backward",
        fix="set model.fine_grained_activation_offloading=false, or unset "
        "model.virtual_pipeline_model_parallel_size, or use selective recompute",
        upstream="Chunk mismatch",
    )
