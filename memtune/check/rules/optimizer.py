"""OPT: distributed optimizer, Megatron-FSDP and precision."""

from __future__ import annotations

from memtune.check.context import Context
from memtune.check.finding import ERROR, INFO, WARNING, Hit
from memtune.check.registry import rule


@rule("OPT001", "distopt-flags-disagree", WARNING)
def distopt_flags_disagree(c: Context) -> Hit | None:
    """`ddp.use_distributed_optimizer` and `optimizer.use_distributed_optimizer` disagree.

    ## What it does
    Checks that the two flags have the same value.

    ## Why it matters
    The DDP flag lays out the gradient buffers the distributed optimizer shards; the optimizer
    flag builds it. Megatron-Bridge turns both on (with a warning) when either is on; code that
    builds Megatron-Core's configs directly gets a mismatched layout. memtune treats the job as
    using the distributed optimizer, as Bridge does.

    ## Example
    ```yaml
    optimizer: {use_distributed_optimizer: true}
    ddp: {use_distributed_optimizer: false}
    ```

    ## Fix
    Set both to the same value.
    """
    ddp, opt = c.job.ddp.use_distributed_optimizer, c.job.optimizer.use_distributed_optimizer
    if ddp == opt:
        return None
    return Hit(
        message=f"ddp.use_distributed_optimizer={str(ddp).lower()} but optimizer.use_distributed_optimizer={str(opt).lower()}",
        fix="set optimizer.use_distributed_optimizer=true and ddp.use_distributed_optimizer=true (Megatron-Bridge forces both on when either is)",
    )


@rule("OPT002", "fsdp-no-shard", WARNING)
def fsdp_no_shard(c: Context) -> Hit | None:
    """Megatron-FSDP with sharding strategy `no_shard`.

    ## What it does
    Flags `ddp.use_megatron_fsdp: true` with `ddp.data_parallel_sharding_strategy: no_shard`.

    ## Why it matters
    `no_shard` keeps full parameters, gradients and optimizer state on every rank (ZeRO-0): FSDP's
    machinery and buffers without its memory saving.

    ## Example
    ```yaml
    ddp: {use_megatron_fsdp: true}
    ```

    ## Fix
    Use `optim_grads_params` (ZeRO-3, Megatron-Bridge's recommendation), or `optim` / `optim_grads`.
    """
    if not c.megatron_fsdp or c.job.ddp.data_parallel_sharding_strategy != "no_shard":
        return None
    return Hit(
        message="ddp.use_megatron_fsdp=true with ddp.data_parallel_sharding_strategy=no_shard shards nothing",
        fix="set ddp.data_parallel_sharding_strategy=optim_grads_params",
    )


@rule("OPT003", "sharding-strategy-without-fsdp", WARNING)
def sharding_strategy_without_fsdp(c: Context) -> Hit | None:
    """A data-parallel sharding strategy without Megatron-FSDP.

    ## What it does
    Flags `ddp.data_parallel_sharding_strategy` other than `no_shard` while
    `ddp.use_megatron_fsdp` is false.

    ## Why it matters
    Only Megatron-FSDP reads the strategy; standard DDP ignores it, so parameters and gradients
    stay unsharded.

    ## Example
    ```yaml
    ddp: {data_parallel_sharding_strategy: optim_grads_params}
    ```

    ## Fix
    Set `ddp.use_megatron_fsdp: true`, or use the distributed optimizer for optimizer-state sharding.
    """
    strategy = c.job.ddp.data_parallel_sharding_strategy
    if c.megatron_fsdp or strategy == "no_shard":
        return None
    return Hit(
        message=f"ddp.data_parallel_sharding_strategy={strategy} is ignored without ddp.use_megatron_fsdp=true",
        fix="set ddp.use_megatron_fsdp=true, or remove the strategy",
    )


@rule("OPT004", "overlap-param-gather-without-sharding", ERROR)
def overlap_param_gather_without_sharding(c: Context) -> Hit | None:
    """`overlap_param_gather` without the distributed optimizer or FSDP.

    ## What it does
    Checks that `ddp.overlap_param_gather: true` comes with the distributed optimizer or
    Megatron-FSDP.

    ## Why it matters
    Only sharded parameters are all-gathered; Megatron refuses the flag otherwise.

    ## Example
    ```yaml
    ddp: {overlap_grad_reduce: true, overlap_param_gather: true}
    ```

    ## Fix
    Turn on the distributed optimizer, or set `overlap_param_gather: false`.
    """
    if not c.job.ddp.overlap_param_gather or c.distributed_optimizer or c.megatron_fsdp:
        return None
    return Hit(
        message="ddp.overlap_param_gather=true without the distributed optimizer or Megatron-FSDP",
        fix="set optimizer.use_distributed_optimizer=true and ddp.use_distributed_optimizer=true, or ddp.overlap_param_gather=false",
        upstream="--overlap-param-gather only supported with distributed optimizer, megatron fsdp, or dist_muon",
    )


@rule("OPT005", "fp8-param-gather-without-sharding", ERROR)
def fp8_param_gather_without_sharding(c: Context) -> Hit | None:
    """`fp8_param_gather` without the distributed optimizer or FSDP.

    ## What it does
    Checks that `model.fp8_param_gather: true` comes with the distributed optimizer or Megatron-FSDP.

    ## Why it matters
    FP8 parameters need fp32 main copies kept by a sharded optimizer; Megatron refuses the flag
    otherwise.

    ## Example
    ```yaml
    model: {fp8: hybrid, fp8_param_gather: true}
    ```

    ## Fix
    Turn on the distributed optimizer, or set `fp8_param_gather: false`.
    """
    if not c.model.fp8_param_gather or c.distributed_optimizer or c.megatron_fsdp:
        return None
    return Hit(
        message="model.fp8_param_gather=true without the distributed optimizer or Megatron-FSDP",
        fix="set optimizer.use_distributed_optimizer=true and ddp.use_distributed_optimizer=true, or model.fp8_param_gather=false",
        upstream="--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron fsdp, or inference mode",
    )


@rule("OPT006", "fp8-param-gather-without-fp8", ERROR)
def fp8_param_gather_without_fp8(c: Context) -> Hit | None:
    """`fp8_param_gather` without FP8 training.

    ## What it does
    Checks that `model.fp8_param_gather: true` comes with `model.fp8` set.

    ## Why it matters
    FP8 parameters only exist in FP8 training; Megatron-Core raises otherwise.

    ## Example
    ```yaml
    model: {bf16: true, fp8_param_gather: true}
    ```

    ## Fix
    Set `model.fp8` (e.g. `hybrid`), or remove `fp8_param_gather`.
    """
    if not c.model.fp8_param_gather or c.model.fp8:
        return None
    return Hit(
        message="model.fp8_param_gather=true but model.fp8 is not set",
        fix="set model.fp8=hybrid (or e4m3), or model.fp8_param_gather=false",
        upstream="fp8_param must be used together with fp8 mode.",
    )


@rule("OPT007", "precision-aware-without-distopt", ERROR)
def precision_aware_without_distopt(c: Context) -> Hit | None:
    """The precision-aware optimizer without the distributed optimizer.

    ## What it does
    Checks that `optimizer.use_precision_aware_optimizer: true` comes with the distributed optimizer.

    ## Why it matters
    Megatron-Core builds it only as a distributed optimizer and raises otherwise.

    ## Example
    ```yaml
    optimizer: {use_precision_aware_optimizer: true, exp_avg_dtype: bf16, exp_avg_sq_dtype: bf16}
    ```

    ## Fix
    Set `use_distributed_optimizer: true` in `optimizer` and `ddp`.
    """
    if not c.job.optimizer.use_precision_aware_optimizer or c.distributed_optimizer:
        return None
    return Hit(
        message="optimizer.use_precision_aware_optimizer=true without the distributed optimizer",
        fix="set optimizer.use_distributed_optimizer=true and ddp.use_distributed_optimizer=true",
        upstream="--use-precision-aware-optimizer only supported with distributed optimizer",
    )


@rule("OPT008", "precision-aware-needs-adam", ERROR)
def precision_aware_needs_adam(c: Context) -> Hit | None:
    """The precision-aware optimizer with SGD.

    ## What it does
    Checks that `optimizer.use_precision_aware_optimizer: true` uses `optimizer: adam`.

    ## Why it matters
    It is Transformer Engine's FusedAdam; Megatron-Core raises for other optimizers.

    ## Example
    ```yaml
    optimizer: {optimizer: sgd, use_precision_aware_optimizer: true, use_distributed_optimizer: true}
    ```

    ## Fix
    Use Adam, or turn the precision-aware optimizer off.
    """
    opt = c.job.optimizer
    if not opt.use_precision_aware_optimizer or opt.optimizer == "adam":
        return None
    return Hit(
        message=f"optimizer.use_precision_aware_optimizer=true with optimizer.optimizer={opt.optimizer}",
        fix="set optimizer.optimizer=adam, or optimizer.use_precision_aware_optimizer=false",
        upstream="--use-precision-aware-optimizer only supported with adam",
    )


_STATE_DTYPES = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")


@rule("OPT009", "low-precision-states-without-precision-aware", ERROR)
def low_precision_states_without_precision_aware(c: Context) -> Hit | None:
    """Reduced-precision optimizer state without the precision-aware optimizer.

    ## What it does
    Checks that `main_grads_dtype`, `main_params_dtype`, `exp_avg_dtype` and `exp_avg_sq_dtype`
    are fp32 unless `use_precision_aware_optimizer: true`.

    ## Why it matters
    Only the precision-aware optimizer can store these in lower precision; Megatron-Core asserts
    otherwise — so the saving you planned (e.g. bf16 Adam moments, 50 % of optimizer state)
    needs that flag.

    ## Example
    ```yaml
    optimizer: {exp_avg_dtype: bf16, exp_avg_sq_dtype: bf16}
    ```

    ## Fix
    Set `optimizer.use_precision_aware_optimizer: true` (with the distributed optimizer).
    """
    opt = c.job.optimizer
    reduced = [k for k in _STATE_DTYPES if getattr(opt, k) != "fp32"]
    if opt.use_precision_aware_optimizer or not reduced:
        return None
    shown = ", ".join(f"optimizer.{k}={getattr(opt, k)}" for k in reduced)
    return Hit(
        message=f"{shown} without optimizer.use_precision_aware_optimizer=true",
        fix="set optimizer.use_precision_aware_optimizer=true, or keep the dtypes at fp32",
        upstream=f"{reduced[0]} can only be fp32 when not using precision-aware optimizer",
    )


@rule("OPT010", "fp16-and-bf16", ERROR)
def fp16_and_bf16(c: Context) -> Hit | None:
    """Both `fp16` and `bf16` are on.

    ## What it does
    Checks that at most one of `model.fp16` and `model.bf16` is true.

    ## Why it matters
    Megatron-Core's `TransformerConfig` raises at start-up.

    ## Example
    ```yaml
    model: {fp16: true, bf16: true}
    ```

    ## Fix
    Keep one (bf16 on Ampere and newer).
    """
    if not (c.model.fp16 and c.model.bf16):
        return None
    return Hit(
        message="model.fp16=true and model.bf16=true",
        fix="set model.fp16=false (or model.bf16=false)",
        upstream="Only one of self.fp16: True and self.bf16 True should be True.",
    )


@rule("OPT011", "fp32-training", INFO)
def fp32_training(c: Context) -> Hit | None:
    """Neither `bf16` nor `fp16`: the model trains in fp32.

    ## What it does
    Notes configs with `model.bf16` and `model.fp16` both false.

    ## Why it matters
    Megatron's precision flags default to off, so a config that forgot them trains without
    `Float16Module`: weights and activations are fp32, 4 bytes per element where bf16 has 2. What
    a bf16 job already keeps in fp32 (the loss's softmax, norm statistics, the fp32 softmax of
    unfused attention) does not grow, so the saved activations grow by up to 2x, less where the
    loss over a large vocabulary or unfused attention's scores weigh most; the estimate counts
    each tensor so. Matmuls are much slower, and
    unfused attention cannot use the fused softmax kernel. The weights double too, but Adam
    keeps no separate fp32 copy of fp32 weights, so weights, gradients and optimizer state stay
    about the size of a bf16 job's (16 against 18 bytes per parameter with fp32 gradients).

    ## Example
    ```yaml
    model: {bf16: false, fp16: false}
    ```

    ## Fix
    Set `model.bf16: true` unless fp32 training is intended.
    """
    if c.model.bf16 or c.model.fp16:
        return None
    return Hit(
        message="model.bf16 and model.fp16 are both false: weights and activations are fp32, twice as wide "
        "as bf16 except what a bf16 job keeps in fp32 already (the loss's softmax, norm statistics), so the "
        "saved activations grow by up to 2x; the model state stays about the same (Adam keeps no separate "
        "fp32 copy)",
        fix="set model.bf16=true unless fp32 training is intended",
    )


# Megatron-LM's and Megatron-Bridge's texts for the same refusals differ by a word or a sign.
_FSDP_FORMAT = {
    "megatron-lm": "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format.",
    "megatron-bridge": "Megatron-FSDP requires the fsdp_dtensor checkpointing format!",
}
_DTENSOR_WITHOUT_FSDP = {
    "megatron-lm": "--ckpt-format fsdp_dtensor is only tested with Megatron FSDP.",
    "megatron-bridge": "fsdp_dtensor checkpoint format only supports Megatron FSDP",
}


@rule("OPT012", "fsdp-checkpoint-format", ERROR)
def fsdp_checkpoint_format(c: Context) -> Hit | None:
    """Megatron-FSDP with a checkpoint format other than `fsdp_dtensor`.

    ## What it does
    Checks that a Megatron-FSDP job sets `checkpoint.ckpt_format: fsdp_dtensor`: always under
    Megatron-LM, and under Megatron-Bridge when the job loads or saves a checkpoint.

    ## Why it matters
    Megatron-LM's `validate_args` and Megatron-Bridge's config validation assert the format at
    start-up. Switching is more than a key: `fsdp_dtensor` checkpoints are not interchangeable
    with `torch_dist` ones, so a job that resumes a `torch_dist` checkpoint cannot load it under
    Megatron-FSDP without converting it first.

    ## Example
    ```yaml
    defaults: megatron-lm
    ddp: {use_megatron_fsdp: true, data_parallel_sharding_strategy: optim_grads_params}
    checkpoint: {ckpt_format: torch_dist}
    ```

    ## Fix
    Set `checkpoint.ckpt_format: fsdp_dtensor` (and convert an existing checkpoint), or leave
    Megatron-FSDP off.
    """
    if not c.megatron_fsdp or not c.d.checkpoint_format_tied_to_fsdp:
        return None
    if c.job.checkpoint.ckpt_format == "fsdp_dtensor":
        return None
    return Hit(
        message=f"ddp.use_megatron_fsdp=true with checkpoint.ckpt_format={c.job.checkpoint.ckpt_format}",
        fix="set checkpoint.ckpt_format=fsdp_dtensor (an existing torch_dist checkpoint must be converted), "
        "or ddp.use_megatron_fsdp=false",
        upstream=_FSDP_FORMAT[c.d.stack],
    )


@rule("OPT013", "fsdp-single-device-connection", ERROR)
def fsdp_single_device_connection(c: Context) -> Hit | None:
    """Megatron-FSDP with `CUDA_DEVICE_MAX_CONNECTIONS=1`.

    ## What it does
    Checks that a Megatron-FSDP job built by Megatron-LM or Megatron-Bridge does not set
    `env.CUDA_DEVICE_MAX_CONNECTIONS: "1"`.

    ## Why it matters
    FSDP overlaps its parameter all-gathers and gradient reduce-scatters with compute on other
    streams, which one hardware queue would serialise; both launchers assert the variable is
    unset or above 1. Jobs with tensor-parallel communication overlap set it to 1, so turning
    Megatron-FSDP on for such a job also means unsetting the variable.

    ## Example
    ```yaml
    defaults: megatron-bridge
    ddp: {use_megatron_fsdp: true, data_parallel_sharding_strategy: optim_grads_params}
    env: {CUDA_DEVICE_MAX_CONNECTIONS: "1"}
    ```

    ## Fix
    Unset `env.CUDA_DEVICE_MAX_CONNECTIONS` (or set it above 1), or leave Megatron-FSDP off.
    """
    if not c.megatron_fsdp or not c.d.fsdp_device_connections_refused:
        return None
    return Hit(
        message="ddp.use_megatron_fsdp=true with env.CUDA_DEVICE_MAX_CONNECTIONS=1",
        fix="unset env.CUDA_DEVICE_MAX_CONNECTIONS, or set ddp.use_megatron_fsdp=false",
        upstream="FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.",
    )


@rule("OPT014", "fsdp-dtensor-without-fsdp", ERROR)
def fsdp_dtensor_without_fsdp(c: Context) -> Hit | None:
    """The `fsdp_dtensor` checkpoint format without Megatron-FSDP.

    ## What it does
    Checks that `checkpoint.ckpt_format: fsdp_dtensor` comes with `ddp.use_megatron_fsdp: true`:
    always under Megatron-LM, and under Megatron-Bridge when the job loads or saves a checkpoint.

    ## Why it matters
    Both launchers assert it at start-up: only Megatron-FSDP writes and reads that format.

    ## Example
    ```yaml
    defaults: megatron-lm
    checkpoint: {ckpt_format: fsdp_dtensor}
    ```

    ## Fix
    Use `torch_dist`, or turn Megatron-FSDP on.
    """
    if c.megatron_fsdp or c.job.checkpoint.ckpt_format != "fsdp_dtensor":
        return None
    if not c.d.checkpoint_format_tied_to_fsdp:
        return None
    return Hit(
        message="checkpoint.ckpt_format=fsdp_dtensor without ddp.use_megatron_fsdp=true",
        fix="set checkpoint.ckpt_format=torch_dist, or ddp.use_megatron_fsdp=true",
        upstream=_DTENSOR_WITHOUT_FSDP[c.d.stack],
    )


@rule("OPT015", "fp8-weights-quantized-every-microbatch", WARNING)
def fp8_weights_quantized_every_microbatch(c: Context) -> Hit | None:
    """`disable_parameter_transpose_cache` on FP8 weights that are not FP8 parameters.

    ## What it does
    Flags `disable_parameter_transpose_cache: true` in an FP8 job on Transformer Engine's layers
    without `fp8_param_gather`.

    ## Why it matters
    Without the cache, Megatron-Core calls Transformer Engine's linears with
    `is_first_microbatch=None`, and every forward quantizes the bf16 weights afresh and saves
    the FP8 copy (row-wise and column-wise, 2 bytes per weight) for its backward
    (TransformerEngine `module/linear.py`, `module/base.py` `quantize_weight`). Every
    microbatch in flight then holds a copy of its layers' weights, where the cache holds one
    for the run: with a pipeline's many microbatches in flight, tens of GiB. Each microbatch
    also pays the weights' cast. Megatron-Bridge's perf recipes set it beside
    `fp8_param_gather`, whose weights are FP8 tensors already: there it costs nothing.

    ## Example
    ```yaml
    model: {fp8: hybrid, fp8_recipe: tensorwise, transformer_impl: transformer_engine, disable_parameter_transpose_cache: true}
    ```

    ## Fix
    Drop `disable_parameter_transpose_cache`, or keep the weights in FP8 with
    `fp8_param_gather: true` (with the distributed optimizer).
    """
    if not c.model.disable_parameter_transpose_cache or c.d.fp8_weight_copies != "per_microbatch":
        return None
    return Hit(
        message=(
            "model.disable_parameter_transpose_cache=true without model.fp8_param_gather: every "
            "microbatch in flight keeps an FP8 copy of its layers' weights and casts them again"
        ),
        fix="set model.disable_parameter_transpose_cache=false, or model.fp8_param_gather=true",
    )
