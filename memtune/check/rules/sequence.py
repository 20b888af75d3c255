"""SEQ: sequence parallelism, context parallelism and the attention variants they meet."""

from __future__ import annotations

import math

from memtune.check.context import Context
from memtune.check.finding import ERROR, INFO, WARNING, Hit
from memtune.check.registry import rule
from memtune.config import derive
from memtune.config.changes import Change, with_changes
from memtune.peft.model import inputs_sp_leaves_whole
from memtune.units import MiB


@rule("SEQ001", "sp-without-tp", ERROR)
def sp_without_tp(c: Context) -> Hit | None:
    """Sequence parallelism requested with tensor-parallel size 1.

    ## What it does
    Checks the config as written: `sequence_parallel: true` needs `tensor_model_parallel_size > 1`.

    ## Why it matters
    Sequence parallelism shards the activations outside the TP regions over the TP group; with
    no TP group there is nothing to shard. Megatron-Core's `ModelParallelConfig` raises at
    start-up (an error for `defaults: megatron-core`); Megatron-LM's argument parser and
    Megatron-Bridge's `finalize()` turn SP off with a warning (a warning here too), so the
    memory saving you planned for never happens.

    ## Example
    ```yaml
    defaults: megatron-core
    model: {tensor_model_parallel_size: 1, sequence_parallel: true}
    ```

    ## Fix
    Set `sequence_parallel: false`, or raise TP.
    """
    if not c.model.sequence_parallel or c.d.tp > 1:
        return None
    if c.d.stack != "megatron-core":
        return Hit(
            message=f"model.sequence_parallel=true with model.tensor_model_parallel_size=1: {c.d.stack} turns "
            "sequence parallelism off",
            fix="set model.sequence_parallel=false, or raise model.tensor_model_parallel_size",
            upstream="Disabling sequence parallelism because tensor model parallelism is disabled",
            severity=WARNING,
        )
    return Hit(
        message="model.sequence_parallel=true with model.tensor_model_parallel_size=1",
        fix="set model.sequence_parallel=false, or raise model.tensor_model_parallel_size",
        upstream="Cannot use sequence parallelism without tensor parallelism",
    )


@rule("SEQ002", "seq-not-divisible-by-2cp", ERROR)
def seq_not_divisible_by_2cp(c: Context) -> Hit | None:
    """The sequence length is not a multiple of 2 × CP.

    ## What it does
    With `context_parallel_size > 1`, checks `seq_length % (2 × context_parallel_size) == 0`.

    ## Why it matters
    Context parallelism cuts each sequence into 2 × CP chunks to balance the causal-attention
    work; Megatron-Bridge and Megatron-LM refuse other lengths.

    ## Example
    ```yaml
    model: {seq_length: 8190, context_parallel_size: 2}
    ```

    ## Fix
    Use a sequence length that is a multiple of 2 × CP (pad the data to it), or change CP.
    """
    cp, seq = c.d.cp, c.model.seq_length
    if cp == 1 or seq % (2 * cp) == 0:
        return None
    return Hit(
        message=f"model.seq_length={seq} is not a multiple of 2×model.context_parallel_size = {2 * cp}",
        fix=f"use a seq_length that is a multiple of {2 * cp}",
        upstream="Sequence length must be divisible by 2 * context parallel size if context parallel is used.",
    )


@rule("SEQ003", "seq-not-divisible-by-tp-with-sp", ERROR)
def seq_not_divisible_by_tp_with_sp(c: Context) -> Hit | None:
    """With sequence parallelism, the per-CP-rank sequence does not split over TP.

    ## What it does
    With sequence parallelism on (and TP > 1), checks `(seq_length / context_parallel_size) %
    tensor_model_parallel_size == 0`.

    ## Why it matters
    SP scatters the [s, b, h] activations along the sequence over the TP ranks; the scatter
    asserts on the first forward pass, after start-up has already paid for model and optimizer.

    ## Example
    ```yaml
    model: {seq_length: 4100, tensor_model_parallel_size: 8, sequence_parallel: true}
    ```

    ## Fix
    Pad the sequence length to a multiple of TP × CP.
    """
    d, seq = c.d, c.model.seq_length
    if not d.sequence_parallel or seq % d.cp or (seq // d.cp) % d.tp == 0:
        return None
    return Hit(
        message=f"model.seq_length={seq} is not divisible by TP×CP = {d.tp}×{d.cp} with model.sequence_parallel=true",
        fix=f"use a seq_length that is a multiple of {d.tp * d.cp}",
        upstream="First dimension of the tensor should be divisible by tensor parallel size",
    )


@rule("SEQ004", "tp-without-sp", INFO)
def tp_without_sp(c: Context) -> Hit | None:
    """Tensor parallelism without sequence parallelism replicates part of the activations.

    ## What it does
    Notes configs with `tensor_model_parallel_size > 1` and `sequence_parallel: false`, with the
    activation memory SP would save.

    ## Why it matters
    TP shards the activations inside attention and the MLP, but the LayerNorm inputs, dropout
    masks and residuals (about 10·s·b·h bytes per layer in 16-bit training, Korthikanti et al.
    2022) stay whole on every TP rank. SP shards them at the same communication volume.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 4, sequence_parallel: false}
    ```

    ## Fix
    Set `sequence_parallel: true`.
    """
    d = c.d
    if d.tp == 1 or c.model.sequence_parallel:
        return None
    tokens = c.model.seq_length // d.cp * d.micro_batch_size
    per_input = 2 * tokens * c.model.hidden_size * (1 - 1 / d.tp)
    saved = 5 * per_input
    lora = ""
    if c.job.peft is not None:
        # Two of the five layer-input-sized tensors are the inputs of linear_qkv and linear_fc1;
        # in a LoRA job SP shards them only where an adapter re-gathers (memtune/peft/model.py).
        whole = inputs_sp_leaves_whole(derive(with_changes(c.job, [Change("model.sequence_parallel", True)])))
        saved -= len(whole) * per_input
        if whole:
            lora = f" (LoRA: the inputs of {', '.join(whole)} stay whole or unkept either way)"
    return Hit(
        message=f"model.tensor_model_parallel_size={d.tp} with model.sequence_parallel=false: about {saved / MiB:.0f} MiB "
        f"of activations per layer per microbatch are replicated on every TP rank{lora}",
        fix="set model.sequence_parallel=true",
    )


@rule("SEQ005", "cp-a2a-heads", ERROR)
def cp_a2a_heads(c: Context) -> Hit | None:
    """CP's all-to-all cannot split the attention heads evenly.

    ## What it does
    With `cp_comm_type` `a2a` (or `a2a+p2p`), checks that the query heads and the key/value
    heads on one TP rank are multiples of the all-to-all group: CP under `a2a`, the first of
    `hierarchical_context_parallel_sizes` under `a2a+p2p`.

    ## Why it matters
    The all-to-all path (DeepSpeed-Ulysses style) gives every CP rank the whole sequence for a
    share of the heads. Transformer Engine asserts on the first forward pass under `a2a`, and
    under `a2a+p2p` the head split's reshape fails there: after start-up has paid for the model,
    the optimizer and the checkpoint load.

    ## Example
    ```yaml
    model: {num_attention_heads: 32, num_query_groups: 8, tensor_model_parallel_size: 4,
            context_parallel_size: 4, cp_comm_type: a2a, seq_length: 8192}
    ```

    ## Fix
    Use an all-to-all group that divides the heads on a TP rank, lower TP, or use `p2p`.
    """
    d, m = c.d, c.model
    size = d.cp_all_to_all_size
    if size == 1:
        return None
    heads = m.num_attention_heads // d.tp
    kv_heads = heads if m.multi_latent_attention else int(d.query_groups_per_tp_rank)
    if heads % size == 0 and kv_heads % size == 0:
        return None
    group = "model.context_parallel_size" if m.cp_comm_type == "a2a" else "the first hierarchical CP group"
    return Hit(
        message=f"model.cp_comm_type={m.cp_comm_type}: {heads} query and {kv_heads} key/value heads per TP rank "
        f"do not split over {group} ({size})",
        fix=f"use an all-to-all group that divides {math.gcd(heads, kv_heads)}, or model.cp_comm_type=p2p",
        upstream="cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q, K, V. Found num_heads_q = "
        f"{heads}, num_heads_kv = {kv_heads}, cp_size = {size}.",
    )


@rule("SEQ006", "cp-hierarchy", ERROR)
def cp_hierarchy(c: Context) -> Hit | None:
    """Hierarchical CP (`a2a+p2p`) without two group sizes whose product is CP.

    ## What it does
    Checks `hierarchical_context_parallel_sizes`: `a2a+p2p` needs it; its product must be
    `context_parallel_size`; and Transformer Engine takes exactly two levels (the all-to-all
    group, then the ring).

    ## Why it matters
    Megatron-LM refuses `a2a+p2p` without the sizes and asserts on their product at start-up;
    Megatron-Core builds the groups from them, and Transformer Engine's attention asserts on
    anything but two.

    ## Example
    ```yaml
    model: {context_parallel_size: 8, cp_comm_type: a2a+p2p, hierarchical_context_parallel_sizes: [2, 2]}
    ```

    ## Fix
    Give two sizes, the all-to-all group first, whose product is CP (for CP 8: `[2, 4]` or
    `[4, 2]`), or use `a2a` or `p2p`.
    """
    d, m = c.d, c.model
    sizes = m.hierarchical_context_parallel_sizes
    if d.cp == 1 or m.cp_comm_type != "a2a+p2p":
        return None
    two_groups = "CP implementation a2a+p2p requires cp_group = [a2a_cp_group, p2p_cp_group]!"
    if not sizes:
        return Hit(
            message="model.cp_comm_type=a2a+p2p without model.hierarchical_context_parallel_sizes",
            fix="set model.hierarchical_context_parallel_sizes to [all-to-all group, ring], whose product is CP",
            # Megatron-LM's argument check; elsewhere Transformer Engine's, on the first forward
            upstream="--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm"
            if d.stack == "megatron-lm"
            else two_groups,
        )
    if math.prod(sizes) != d.cp:
        return Hit(
            message=f"model.hierarchical_context_parallel_sizes={sizes} multiply to {math.prod(sizes)}, "
            f"not model.context_parallel_size={d.cp}",
            fix=f"give sizes whose product is {d.cp}",
            upstream="assert args.context_parallel_size == prod(args.hierarchical_context_parallel_sizes)",
        )
    if len(sizes) != 2:
        return Hit(
            message=f"model.hierarchical_context_parallel_sizes={sizes}: a2a+p2p takes two levels, "
            "the all-to-all group and the ring",
            fix="give two sizes, the all-to-all group first",
            upstream=two_groups,
        )
    return None


@rule("SEQ007", "cp-window-attention", ERROR)
def cp_window_attention(c: Context) -> Hit | None:
    """Sliding-window attention under context parallelism's ring.

    ## What it does
    With `context_parallel_size > 1` and layers that attend within `window_size`, checks that
    `cp_comm_type` is `a2a` or `all_gather`.

    ## Why it matters
    Transformer Engine's ring (`p2p`, and the ring of `a2a+p2p`) has no sliding window; its
    context-parallel attention asserts on the first forward pass of the first windowed layer,
    after start-up has paid for the model, the optimizer and the checkpoint load.

    ## Example
    ```yaml
    model: {window_size: [127, 0], window_attn_skip_freq: 2, context_parallel_size: 2,
            seq_length: 8192}
    ```

    ## Fix
    Set `cp_comm_type: a2a` (the heads on a TP rank must split over CP) or `all_gather`.
    """
    m = c.model
    if c.d.cp == 1 or not any(c.d.window_attention_pattern) or m.cp_comm_type in ("a2a", "all_gather"):
        return None
    return Hit(
        message=f"model.window_size={m.window_size} with model.context_parallel_size={c.d.cp} and "
        f"model.cp_comm_type={m.cp_comm_type}: the ring has no sliding window",
        fix="set model.cp_comm_type=a2a or all_gather",
        upstream=f"Context parallelism does not support sliding window attention with cp_comm_type='{m.cp_comm_type}'!",
    )


@rule("SEQ008", "cp-softmax-type", ERROR)
def cp_softmax_type(c: Context) -> Hit | None:
    """An offset softmax (attention sinks) under context parallelism other than all-to-all.

    ## What it does
    With `context_parallel_size > 1` and `softmax_type` `off-by-one` or `learnable`, checks
    that `cp_comm_type` is `a2a`.

    ## Why it matters
    Only Transformer Engine's all-to-all path carries the softmax offsets across CP ranks; the
    others assert on the first forward pass.

    ## Example
    ```yaml
    model: {softmax_type: learnable, context_parallel_size: 2, seq_length: 8192}
    ```

    ## Fix
    Set `cp_comm_type: a2a` (the heads on a TP rank must split over CP).
    """
    m = c.model
    if c.d.cp == 1 or m.softmax_type == "vanilla" or m.cp_comm_type == "a2a":
        return None
    return Hit(
        message=f"model.softmax_type={m.softmax_type} with model.context_parallel_size={c.d.cp} and "
        f"model.cp_comm_type={m.cp_comm_type}: only the all-to-all path carries the offsets",
        fix="set model.cp_comm_type=a2a",
        upstream=f"Context parallelism only supports softmax_type='{m.softmax_type}' with cp_comm_type = 'a2a'!",
    )


@rule("SEQ009", "flash-backend-with-softmax-offset", ERROR)
def flash_backend_with_softmax_offset(c: Context) -> Hit | None:
    """An offset softmax (attention sinks) with the attention backend forced to flash.

    ## What it does
    On Transformer Engine's layers, checks that `softmax_type` `off-by-one` or `learnable` does
    not meet `attention_backend: flash`.

    ## Why it matters
    Transformer Engine's FlashAttention has no softmax offset, and Megatron-Core's `flash`
    setting turns TE's fused and unfused attention off (`NVTE_FUSED_ATTN=0`,
    `NVTE_UNFUSED_ATTN=0`): no backend is left, and the first forward pass raises.

    ## Example
    ```yaml
    model: {softmax_type: learnable, attention_backend: flash}
    ```

    ## Fix
    Set `attention_backend: auto` or `fused` (cuDNN's fused attention takes the offsets).
    """
    m = c.model
    # on Transformer Engine's layers the flash kernel is priced only where the backend forces it
    if not c.d.transformer_engine or c.d.attention_kernel != "flash" or m.softmax_type == "vanilla":
        return None
    return Hit(
        message=f"model.softmax_type={m.softmax_type} with model.attention_backend=flash: Transformer Engine's "
        "FlashAttention has no softmax offset, and the flash setting turns its other backends off",
        fix="set model.attention_backend=auto (cuDNN's fused attention takes the offsets)",
        upstream="No dot product attention backend is available for the provided inputs. Please run with "
        "NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons for disabling all backends.",
    )


@rule("SEQ010", "tp-comm-overlap-without-sp", ERROR)
def tp_comm_overlap_without_sp(c: Context) -> Hit | None:
    """TP communication overlap asked for without sequence parallelism in effect.

    ## What it does
    Checks that `tp_comm_overlap: true` meets `sequence_parallel: true` at
    `tensor_model_parallel_size > 1`.

    ## Why it matters
    Transformer Engine's userbuffers overlap the all-gathers and reduce-scatters of sequence
    parallelism with the GEMMs; without them there is nothing to overlap. Megatron-LM's argument
    checks refuse it at start-up (an error for `defaults: megatron-lm`); Megatron-Bridge turns the
    overlap off with a warning, and Megatron-Core's Transformer Engine layers leave it off (a
    warning here): the overlap you planned for never runs.

    ## Example
    ```yaml
    defaults: megatron-lm
    model: {tensor_model_parallel_size: 4, sequence_parallel: false, tp_comm_overlap: true}
    ```

    ## Fix
    Set `sequence_parallel: true` (with TP > 1), or `tp_comm_overlap: false`.
    """
    m = c.model
    if not m.tp_comm_overlap or c.d.sequence_parallel:
        return None
    why = "model.sequence_parallel=false" if c.d.tp > 1 else f"model.tensor_model_parallel_size={c.d.tp}"
    fix = "set model.sequence_parallel=true" if c.d.tp > 1 else "set model.tp_comm_overlap=false"
    if c.d.stack == "megatron-lm":
        return Hit(
            message=f"model.tp_comm_overlap=true with {why}: sequence parallelism is not in effect",
            fix=f"{fix}, or set model.tp_comm_overlap=false",
            upstream="Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled",
        )
    return Hit(
        message=f"model.tp_comm_overlap=true with {why}: {c.d.stack} leaves the overlap off",
        fix=f"{fix}, or set model.tp_comm_overlap=false",
        upstream="Disabling tensor parallel communication overlap due to sequence_parallel=False."
        if c.d.stack == "megatron-bridge" and c.d.tp > 1
        else None,
        severity=WARNING,
    )


@rule("SEQ011", "tp-comm-overlap-cfg-unused", INFO)
def tp_comm_overlap_cfg_unused(c: Context) -> Hit | None:
    """Userbuffer overlap settings for a job that runs no userbuffer overlap.

    ## What it does
    Notes a `tp_comm_overlap_cfg` where the overlap is not in effect (`tp_comm_overlap` off, or
    sequence parallelism off).

    ## Why it matters
    Megatron-LM and Megatron-Bridge hand the per-GEMM settings to Transformer Engine only when
    they set up the overlap; otherwise nothing reads them, and a job tuned with them runs
    without it.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 2, sequence_parallel: true, tp_comm_overlap: false,
            tp_comm_overlap_cfg: {proj_fprop: {method: ring_exchange}}}
    ```

    ## Fix
    Set `tp_comm_overlap: true`, or remove `tp_comm_overlap_cfg`.
    """
    if c.model.tp_comm_overlap_cfg is None or c.d.userbuffer_overlap:
        return None
    return Hit(
        message="model.tp_comm_overlap_cfg is set but no userbuffer overlap runs "
        "(model.tp_comm_overlap with sequence parallelism): nothing reads it",
        fix="unset model.tp_comm_overlap_cfg, or set model.tp_comm_overlap=true",
    )


@rule("SEQ012", "test-mode-consistency-tests", WARNING)
def test_mode_consistency_tests(c: Context) -> Hit | None:
    """Megatron-Core's real-time consistency tests run in every attention forward.

    ## What it does
    Flags `test_mode: true` (Megatron-LM's `--test-mode`) where the tests run: with
    `qk_layernorm` on attention other than multi-latent attention.

    ## Why it matters
    `SelfAttention.run_realtime_tests` all-gathers the Q and K norms' weights and biases over
    the data-parallel and the tensor-parallel group in each attention forward, and asserts each
    gathered copy equal to the rank's own: 4 x (DP + TP) reads of a CUDA tensor on the host, each
    a wait for the GPU. The setting is meant for Megatron-LM's functional tests: the one that
    sets it logs 0.41 s a step on a DGX H100, twice the 0.20 s of its TP 4 sibling without the
    tests and the Q/K norms. memtune's step model prices the tests.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 2, qk_layernorm: true, test_mode: true}
    ```

    ## Fix
    Set `test_mode: false` (drop `--test-mode`) outside of tests.
    """
    checks = c.d.qk_norm_consistency_checks
    if not checks:
        return None
    layers = max(c.d.layers_per_stage)
    per_step = checks * layers * c.d.num_microbatches
    return Hit(
        message=f"model.test_mode=true with model.qk_layernorm=true: each attention forward reads "
        f"{checks} consistency comparisons on the host, {per_step:,} a step on a pipeline rank "
        f"of {layers} layers, each a wait for the GPU",
        fix="set model.test_mode=false outside of Megatron-LM's functional tests",
    )


@rule("SEQ013", "test-mode-rmsnorm-qk-norms", ERROR)
def test_mode_rmsnorm_qk_norms(c: Context) -> Hit | None:
    """`test_mode`'s consistency tests on Q/K norms that have no bias.

    ## What it does
    Checks `test_mode: true` with `qk_layernorm: true` against `normalization: RMSNorm`
    (attention other than multi-latent attention).

    ## Why it matters
    `SelfAttention.run_realtime_tests` stacks `q_layernorm.bias` and `k_layernorm.bias` with the
    weights. An RMSNorm (Transformer Engine's, or torch's on the local spec) has no bias, so the
    first attention forward raises and the job stops in its first iteration, after start-up and
    any checkpoint load.

    ## Example
    ```yaml
    model: {normalization: RMSNorm, qk_layernorm: true, test_mode: true}
    ```

    ## Fix
    Set `test_mode: false`; the tests are meant for Megatron-LM's functional tests, whose
    `test_mode` case runs LayerNorm.
    """
    m = c.model
    if not c.d.qk_norm_consistency_checks or m.normalization != "RMSNorm":
        return None
    return Hit(
        message="model.test_mode=true with model.qk_layernorm=true and model.normalization=RMSNorm: "
        "the consistency tests read the Q/K norms' biases, which an RMSNorm does not have",
        fix="set model.test_mode=false",
        upstream="AttributeError: 'RMSNorm' object has no attribute 'bias'",
    )


_NO_ATTENTION_BACKEND = (
    "No dot product attention backend is available for the provided inputs. Please run with "
    "NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons for disabling all backends."
)


@rule("SEQ014", "fp8-attention-without-fused-backend", ERROR)
def fp8_attention_without_fused_backend(c: Context) -> Hit | None:
    """FP8 attention with the attention backend forced to one that has no FP8 training path.

    ## What it does
    Checks that `fp8_dot_product_attention` on an FP8 job of Transformer Engine's layers does
    not meet an `attention_backend` other than `auto` or `fused`.

    ## Why it matters
    Transformer Engine trains FP8 attention only on cuDNN's fused kernel: for FP8 training it
    turns its FlashAttention (2, 3 and 4) and its unfused attention off
    (TransformerEngine d0067d0, `get_attention_backend`). Megatron-Core's `flash`, `unfused`
    and `local` settings turn the fused kernel off (`NVTE_FUSED_ATTN=0`), so no backend is left
    and the first forward pass raises.

    ## Example
    ```yaml
    model: {fp8: hybrid, fp8_recipe: delayed, fp8_dot_product_attention: true, attention_backend: flash}
    ```

    ## Fix
    Set `attention_backend: auto` or `fused`, or drop `fp8_dot_product_attention`.
    """
    kernel = c.d.attention_kernel
    if not c.d.fp8_attention_requested or kernel == "cudnn":
        return None
    return Hit(
        message=f"model.fp8_dot_product_attention=true on Transformer Engine's {kernel} attention "
        "(model.attention_backend): TE trains FP8 attention only on cuDNN's fused kernel",
        fix="set model.attention_backend=auto (or fused), or model.fp8_dot_product_attention=false",
        upstream=_NO_ATTENTION_BACKEND,
    )


@rule("SEQ015", "fp8-attention-recipe-before-blackwell", ERROR)
def fp8_attention_recipe_before_blackwell(c: Context) -> Hit | None:
    """FP8 attention under current or MXFP8 scaling on a GPU older than Blackwell.

    ## What it does
    Checks that FP8 attention (`fp8_dot_product_attention`) whose recipe is current scaling
    (`fp8_recipe: tensorwise`, TE's `Float8CurrentScaling`) or MXFP8 runs on a Blackwell GPU,
    with Transformer Engine 2.8 or newer. The attention's recipe is the linears' unless
    `env.NVTE_DPA_FP8_RECIPE` names another.

    ## Why it matters
    Transformer Engine runs FP8 attention under those recipes only on cuDNN's fused kernel for
    compute capability 10.0 and later (TransformerEngine d0067d0, `get_attention_backend`:
    "Disabling FusedAttention for FP8 current scaling on arch < sm100", the same for MXFP8),
    and no other kernel trains FP8 attention. On a Hopper GPU the first forward pass raises.
    Delayed scaling runs FP8 attention on Hopper.

    ## Example
    ```yaml
    model: {fp8: hybrid, fp8_recipe: tensorwise, fp8_dot_product_attention: true}
    cluster: {gpu: H100-80GB}
    ```

    ## Fix
    Drop `fp8_dot_product_attention`, or run the attention in delayed scaling
    (`env.NVTE_DPA_FP8_RECIPE: DelayedScaling`, or `fp8_recipe: delayed`).
    """
    recipe = c.d.attention_fp8_recipe
    if not c.d.fp8_attention_needs_blackwell or c.blackwell_or_newer:
        return None
    return Hit(
        message=f"FP8 attention (model.fp8_dot_product_attention=true) in {recipe} scaling on "
        f"{c.job.cluster.gpu}: Transformer Engine runs it only on Blackwell and later",
        fix="set model.fp8_dot_product_attention=false, or env.NVTE_DPA_FP8_RECIPE=DelayedScaling",
        upstream=_NO_ATTENTION_BACKEND,
    )


@rule("SEQ016", "fp8-attention-unused", WARNING)
def fp8_attention_unused(c: Context) -> Hit | None:
    """`fp8_dot_product_attention` where the attention stays in bf16.

    ## What it does
    Flags `fp8_dot_product_attention: true` without FP8 training, on the local layer spec, or
    with `fp8_recipe: blockwise`.

    ## Why it matters
    The setting asks Transformer Engine's attention for FP8. Without `fp8` TE runs no FP8 at
    all; the local spec has no TE attention; and Megatron-Core builds the `blockwise` recipe
    (`Float8BlockScaling`) without it (`fp8_utils.py` at core_v0.19.0). The attention runs in
    bf16, as it would without the setting.

    ## Example
    ```yaml
    model: {fp8: hybrid, fp8_recipe: blockwise, fp8_dot_product_attention: true}
    ```

    ## Fix
    Drop `fp8_dot_product_attention`, or train in FP8 with a recipe that takes it (`delayed`,
    `tensorwise`, `mxfp8`) on Transformer Engine's layers.
    """
    m = c.model
    if not m.fp8_dot_product_attention or c.d.fp8_attention_requested:
        return None
    if m.fp8 is None:
        why = "model.fp8 is not set"
    elif not c.d.transformer_engine:
        why = "the local spec has no Transformer Engine attention"
    else:
        why = "Megatron-Core builds the blockwise recipe without it"
    return Hit(
        message=f"model.fp8_dot_product_attention=true has no effect: {why}; the attention runs in bf16",
        fix="set model.fp8_dot_product_attention=false",
    )
