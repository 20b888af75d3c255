"""PIP: how layers are split over pipeline stages and virtual stages."""

from __future__ import annotations

from dataclasses import dataclass

from memtune.check.context import Context
from memtune.check.finding import ERROR, INFO, Hit
from memtune.check.registry import rule


def _layers_with_accounting(c: Context) -> int:
    """Layers plus the embedding and loss slots Megatron counts when asked to."""
    m = c.model
    return (
        m.num_layers
        + int(m.account_for_embedding_in_pipeline_split)
        + int(m.account_for_loss_in_pipeline_split)
    )


def _uneven_layout(c: Context) -> bool:
    m = c.model
    return c.d.pp > 1 and (
        m.num_layers_in_first_pipeline_stage is not None or m.num_layers_in_last_pipeline_stage is not None
    )


@dataclass(frozen=True)
class _Middle:
    """What is left for the middle stages once the first/last stage sizes are taken."""

    layers: int
    stages: int


def _middle(c: Context) -> _Middle | None:
    """The middle of an uneven layout, or None when there is none or its edge sizes are invalid."""
    m = c.model
    edges = [
        n
        for n in (m.num_layers_in_first_pipeline_stage, m.num_layers_in_last_pipeline_stage)
        if n is not None
    ]
    if not _uneven_layout(c) or any(n <= 0 for n in edges):
        return None
    return _Middle(layers=m.num_layers - sum(edges), stages=c.d.pp - len(edges))


@rule("PIP001", "layers-not-divisible-by-pp", ERROR)
def layers_not_divisible_by_pp(c: Context) -> Hit | None:
    """The layers do not split evenly over the pipeline stages.

    ## What it does
    Without `num_layers_in_first/last_pipeline_stage`, checks that `num_layers` (plus one for the
    embedding and one for the loss when `account_for_embedding/loss_in_pipeline_split` are set) is
    divisible by `pipeline_model_parallel_size`.

    ## Why it matters
    Megatron gives every stage the same number of layers and refuses a remainder at start-up.

    ## Example
    ```yaml
    model: {num_layers: 30, pipeline_model_parallel_size: 4, pipeline_dtype: bf16}
    ```

    ## Fix
    Pick a PP size that divides the layer count, or place the remainder with
    `num_layers_in_first_pipeline_stage` / `num_layers_in_last_pipeline_stage`.
    """
    layers, pp = _layers_with_accounting(c), c.d.pp
    if pp == 1 or _uneven_layout(c) or c.d.stage_layout is not None or layers % pp == 0:
        return None
    counted = "num_layers" if layers == c.model.num_layers else "num_layers plus the accounted embedding/loss"
    return Hit(
        message=f"{counted} = {layers} is not divisible by model.pipeline_model_parallel_size={pp}",
        fix=f"use a pipeline_model_parallel_size that divides {layers}, or set num_layers_in_first/last_pipeline_stage",
        upstream="Number of layers should be divisible by the pipeline-model-parallel size"
        if c.d.vpp == 1
        else None,
    )


@rule("PIP002", "vpp-chunks-uneven", ERROR)
def vpp_chunks_uneven(c: Context) -> Hit | None:
    """A stage's layers do not split evenly into its virtual-pipeline chunks.

    ## What it does
    With `virtual_pipeline_model_parallel_size` (VPP) and an even layout, checks that the layers
    per pipeline stage are divisible by VPP.

    ## Why it matters
    Every model chunk must have the same number of layers on every stage; Megatron-Bridge refuses
    the model otherwise.

    ## Example
    ```yaml
    model: {num_layers: 32, pipeline_model_parallel_size: 4, virtual_pipeline_model_parallel_size: 3}
    ```

    ## Fix
    Choose a VPP that divides the layers per stage (1, 2, 4 or 8 here).
    """
    layers, pp, vpp = _layers_with_accounting(c), c.d.pp, c.d.vpp
    if pp == 1 or vpp == 1 or _uneven_layout(c) or c.d.stage_layout is not None or layers % pp:
        return None
    per_stage = layers // pp
    if per_stage % vpp == 0:
        return None
    accounted = layers != c.model.num_layers
    return Hit(
        message=f"{per_stage} layers per pipeline stage do not divide into "
        f"model.virtual_pipeline_model_parallel_size={vpp} chunks",
        fix=f"use a virtual_pipeline_model_parallel_size that divides {per_stage}",
        upstream=None
        if accounted
        else "Make sure the number of model chunks is the same across all pipeline stages.",
    )


@rule("PIP003", "edge-stage-not-positive", ERROR)
def edge_stage_not_positive(c: Context) -> Hit | None:
    """`num_layers_in_first/last_pipeline_stage` is zero or negative.

    ## What it does
    Checks that explicit first/last stage sizes are at least 1.

    ## Why it matters
    Megatron-Core's `TransformerConfig` refuses empty edge stages; to move all layers off the
    first stage, use `account_for_embedding_in_pipeline_split` or a pipeline layout instead.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 4, num_layers_in_first_pipeline_stage: 0}
    ```

    ## Fix
    Give the stage at least one layer, or leave the key unset.
    """
    if c.d.pp == 1:
        return None
    for edge in ("first", "last"):
        n = getattr(c.model, f"num_layers_in_{edge}_pipeline_stage")
        if n is not None and n <= 0:
            return Hit(
                message=f"model.num_layers_in_{edge}_pipeline_stage={n} must be at least 1",
                fix=f"set model.num_layers_in_{edge}_pipeline_stage to 1 or more, or unset it",
                upstream=f"num_layers_in_{edge}_pipeline_stage must be larger than 0",
            )
    return None


@rule("PIP004", "uneven-with-accounting", ERROR)
def uneven_with_accounting(c: Context) -> Hit | None:
    """Explicit first/last stage sizes combined with embedding/loss accounting.

    ## What it does
    Checks that `num_layers_in_first/last_pipeline_stage` and
    `account_for_embedding/loss_in_pipeline_split` are not used together.

    ## Why it matters
    They are two ways to balance the edge stages; Megatron-Core refuses both at once.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 4, num_layers_in_last_pipeline_stage: 6,
            account_for_loss_in_pipeline_split: true}
    ```

    ## Fix
    Keep one mechanism: either the explicit stage sizes or the accounting flags.
    """
    m = c.model
    explicit = [
        k
        for k in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")
        if getattr(m, k) is not None
    ]
    accounting = [
        k
        for k in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
        if getattr(m, k)
    ]
    if not explicit or not accounting:
        return None
    return Hit(
        message=f"model.{explicit[0]} is set together with model.{accounting[0]}=true",
        fix="use either num_layers_in_first/last_pipeline_stage or account_for_*_in_pipeline_split, not both",
        upstream="num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage cannot beset at the same time "
        "with account_for_embedding_in_pipeline_splitand account_for_loss_in_pipeline_split",
    )


@rule("PIP005", "edge-stage-not-divisible-by-vpp", ERROR)
def edge_stage_not_divisible_by_vpp(c: Context) -> Hit | None:
    """An explicit first/last stage size is not divisible by the virtual-pipeline size.

    ## What it does
    With VPP, checks `num_layers_in_first_pipeline_stage % VPP == 0` and the same for the last stage.

    ## Why it matters
    Each stage's layers are dealt out over VPP chunks of equal size; Megatron-Core raises otherwise.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 4, virtual_pipeline_model_parallel_size: 2,
            num_layers_in_first_pipeline_stage: 3}
    ```

    ## Fix
    Make the edge stage sizes multiples of VPP.
    """
    vpp = c.d.vpp
    if vpp == 1 or not _uneven_layout(c):
        return None
    for edge in ("first", "last"):
        n = getattr(c.model, f"num_layers_in_{edge}_pipeline_stage")
        if n is not None and n > 0 and n % vpp:
            return Hit(
                message=f"model.num_layers_in_{edge}_pipeline_stage={n} is not divisible by "
                f"model.virtual_pipeline_model_parallel_size={vpp}",
                fix=f"make num_layers_in_{edge}_pipeline_stage a multiple of {vpp}",
                upstream=f"number of layers at {edge} stage: {n}must be divisible by virtual pipelineparallel degree {vpp}",
            )
    return None


@rule("PIP006", "middle-stages-mismatch", ERROR)
def middle_stages_mismatch(c: Context) -> Hit | None:
    """The first/last stage sizes leave layers without a stage, or take more layers than exist.

    ## What it does
    With explicit edge stage sizes, checks that the layers left for the middle stages are zero
    when there are no middle stages, and never negative.

    ## Why it matters
    With PP = 2 and both edge sizes set, they must add up to `num_layers`; Megatron-Core raises
    otherwise. A negative remainder cannot be built at all.

    ## Example
    ```yaml
    model: {num_layers: 32, pipeline_model_parallel_size: 2,
            num_layers_in_first_pipeline_stage: 15, num_layers_in_last_pipeline_stage: 15}
    ```

    ## Fix
    Make the edge sizes add up to `num_layers` minus what the middle stages take.
    """
    mid = _middle(c)
    if mid is None or (mid.layers == 0 if mid.stages == 0 else mid.layers >= 0):
        return None
    return Hit(
        message=f"num_layers_in_first/last_pipeline_stage leave {mid.layers} layers for {mid.stages} middle stages "
        f"(model.num_layers={c.model.num_layers}, model.pipeline_model_parallel_size={c.d.pp})",
        fix="make the first and last stage sizes add up to num_layers minus the middle stages' layers",
        upstream=f"Mismatch: {mid.layers} middle layers remaining but {mid.stages} middle PP stages available."
        if mid.stages == 0
        else None,
    )


@rule("PIP007", "middle-layers-not-divisible", ERROR)
def middle_layers_not_divisible(c: Context) -> Hit | None:
    """The layers left for the middle pipeline stages do not split evenly over them.

    ## What it does
    With explicit edge stage sizes, checks that `num_layers` minus the edge layers is divisible by
    the number of middle stages.

    ## Why it matters
    Middle stages all get the same number of layers; Megatron-Core raises otherwise.

    ## Example
    ```yaml
    model: {num_layers: 32, pipeline_model_parallel_size: 4, num_layers_in_first_pipeline_stage: 7}
    ```

    ## Fix
    Adjust the edge sizes so the remainder divides by the middle stage count.
    """
    mid = _middle(c)
    if mid is None or mid.stages == 0 or mid.layers < 0 or mid.layers % mid.stages == 0:
        return None
    return Hit(
        message=f"{mid.layers} middle layers do not divide over {mid.stages} middle pipeline stages",
        fix=f"change num_layers_in_first/last_pipeline_stage so the rest divides by {mid.stages}",
        upstream=f"number of layers at middle stage: {mid.layers} must be divisible bythe middle pipeline model "
        f"parallel size {mid.stages}",
    )


@rule("PIP008", "middle-rank-not-divisible-by-vpp", ERROR)
def middle_rank_not_divisible_by_vpp(c: Context) -> Hit | None:
    """Each middle stage's layers do not split into its virtual-pipeline chunks.

    ## What it does
    With explicit edge stage sizes and VPP, checks that the layers on each middle stage are
    divisible by `virtual_pipeline_model_parallel_size`.

    ## Why it matters
    Megatron-Core raises at start-up: every chunk on a rank must have the same number of layers.

    ## Example
    ```yaml
    model: {num_layers: 30, pipeline_model_parallel_size: 4, virtual_pipeline_model_parallel_size: 2,
            num_layers_in_first_pipeline_stage: 6, num_layers_in_last_pipeline_stage: 6}
    ```

    ## Fix
    Pick edge sizes so each middle stage holds a multiple of VPP layers.
    """
    mid, vpp = _middle(c), c.d.vpp
    if mid is None or vpp == 1 or mid.stages == 0 or mid.layers < 0 or mid.layers % mid.stages:
        return None
    per_rank = mid.layers // mid.stages
    if per_rank % vpp == 0:
        return None
    return Hit(
        message=f"{per_rank} layers on each middle pipeline stage are not divisible by "
        f"model.virtual_pipeline_model_parallel_size={vpp}",
        fix=f"change the edge stage sizes so each middle stage holds a multiple of {vpp} layers",
        upstream=f"number of layers on each middle pipeline rank:{per_rank} must be divisible by virtualpipeline "
        f"parallel degree {vpp}",
    )


@rule("PIP009", "vpp-without-pp", ERROR)
def vpp_without_pp(c: Context) -> Hit | None:
    """A virtual-pipeline size without pipeline parallelism.

    ## What it does
    Checks that `virtual_pipeline_model_parallel_size > 1` comes with `pipeline_model_parallel_size > 1`.

    ## Why it matters
    The interleaved schedule needs several pipeline stages; Megatron refuses it with PP = 1.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 1, virtual_pipeline_model_parallel_size: 2}
    ```

    ## Fix
    Unset `virtual_pipeline_model_parallel_size`, or raise PP.
    """
    if c.d.vpp == 1 or c.d.pp > 1:
        return None
    return Hit(
        message=f"model.virtual_pipeline_model_parallel_size={c.d.vpp} with model.pipeline_model_parallel_size=1",
        fix="unset model.virtual_pipeline_model_parallel_size",
        upstream="pipeline-model-parallel size should be greater than 1 with interleaved schedule",
    )


@rule("PIP010", "vpp-microbatch-group", ERROR)
def vpp_microbatch_group(c: Context) -> Hit | None:
    """Too few microbatches for the interleaved pipeline schedule.

    ## What it does
    With VPP, checks that the microbatch group per virtual stage
    (`microbatch_group_size_per_vp_stage`, default PP) lies in [PP, number of microbatches].

    ## Why it matters
    The interleaved schedule raises a `ValueError` on its first step otherwise: with the default
    group size it needs at least PP microbatches per step.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 4, virtual_pipeline_model_parallel_size: 2}
    train: {micro_batch_size: 1, global_batch_size: 2}
    ```

    ## Fix
    Raise `global_batch_size` (or lower `micro_batch_size`) to give at least PP microbatches, or
    drop VPP.
    """
    d = c.d
    if d.vpp == 1 or d.pp == 1:
        return None
    group = c.model.microbatch_group_size_per_vp_stage or d.pp
    if d.pp <= group <= d.num_microbatches:
        return None
    return Hit(
        message=f"microbatch_group_size_per_vp_stage={group} is outside [PP={d.pp}, microbatches={d.num_microbatches}] "
        f"(GBS {d.global_batch_size} / (MBS {d.micro_batch_size} × DP {d.dp}))",
        fix=f"give at least {max(group, d.pp)} microbatches per step (raise train.global_batch_size), or drop VPP",
        upstream=f"The number of contiguous micro-batches in a virtual pipeline stageshould range in "
        f"[PP={d.pp} , M={d.num_microbatches}]",
    )


@rule("PIP011", "vpp-not-a-memory-fix", INFO)
def vpp_not_a_memory_fix(c: Context) -> Hit | None:
    """Virtual pipelining shortens the pipeline bubble; it does not lower peak memory.

    ## What it does
    Notes every config that uses `virtual_pipeline_model_parallel_size > 1`.

    ## Why it matters
    VPP interleaves smaller model chunks to cut idle time. The first stage still holds the
    activations of about PP microbatches (slightly more with interleaving), so raising VPP to get
    out of an OOM does not help; Megatron-Bridge's memory-tuning guide saw peak memory rise a
    little in such a case, and the real fix there was `expandable_segments:True`.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 4, virtual_pipeline_model_parallel_size: 4}
    ```

    ## Fix
    Keep VPP for throughput; for memory, look at recompute, the distributed optimizer, more
    PP/TP/CP, or fragmentation (`memtune estimate` shows which term dominates).
    """
    if c.d.vpp == 1 or c.d.pp == 1:
        return None
    return Hit(
        message=f"model.virtual_pipeline_model_parallel_size={c.d.vpp} shortens the pipeline bubble but does not lower "
        "peak memory (the first stage may hold slightly more activations)",
        fix="do not raise VPP to fix an OOM; use recompute, the distributed optimizer or more model parallelism",
    )


@rule("PIP012", "vpp-final-microbatch-group", ERROR)
def vpp_final_microbatch_group(c: Context) -> Hit | None:
    """The last microbatch group of the interleaved schedule is smaller than PP.

    ## What it does
    With VPP, checks that the microbatches left over after whole groups of
    `microbatch_group_size_per_vp_stage` (default PP) are none, or at least PP.

    ## Why it matters
    The interleaved schedule raises a `RuntimeError` on its first step otherwise
    (megatron-core 0.19.2, `schedules.py`, `forward_backward_pipelining_with_interleaving`): a
    last group of fewer than PP microbatches leaves stages waiting for each other.

    ## Example
    ```yaml
    model: {pipeline_model_parallel_size: 4, virtual_pipeline_model_parallel_size: 2}
    train: {micro_batch_size: 1, global_batch_size: 6}
    ```

    ## Fix
    Make the number of microbatches a multiple of the group size (`train.global_batch_size`), or
    leave a remainder of at least PP.
    """
    d = c.d
    if d.vpp == 1 or d.pp == 1:
        return None
    group = c.model.microbatch_group_size_per_vp_stage or d.pp
    final = d.num_microbatches % group
    if not 0 < final < d.pp:
        return None
    return Hit(
        message=f"{d.num_microbatches} microbatches leave a last group of {final} (groups of {group}), fewer than "
        f"PP={d.pp} (GBS {d.global_batch_size} / (MBS {d.micro_batch_size} × DP {d.dp}))",
        fix=f"give a multiple of {group} microbatches per step (train.global_batch_size), or drop VPP",
        upstream="The remainder of M (the total micro-batches) divided by N (number of contiguous micro-batches "
        "in a virtual pipeline stage) should be 0, or larger than or equal to the pipeline-parallel size, but it "
        f"is {final}. Otherwise, it introduces dependency bubbles in the pipeline and reduces throughput.",
    )
