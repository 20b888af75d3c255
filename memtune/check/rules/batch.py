"""BAT: global batch, micro-batch and data-parallel size."""

from __future__ import annotations

from memtune.check.context import Context
from memtune.check.finding import ERROR, INFO, Hit
from memtune.check.registry import rule


@rule("BAT001", "gbs-not-divisible", ERROR)
def gbs_not_divisible(c: Context) -> Hit | None:
    """The global batch is not a multiple of micro-batch × data-parallel size.

    ## What it does
    Checks `global_batch_size % (micro_batch_size × DP) == 0`, with DP = GPUs / (TP × PP × CP).

    ## Why it matters
    Every DP rank runs the same whole number of microbatches per step; Megatron's microbatch
    calculator raises at start-up otherwise.

    ## Example
    ```yaml
    train: {micro_batch_size: 2, global_batch_size: 100}
    cluster: {num_gpus: 16}
    ```

    ## Fix
    Make the global batch a multiple of MBS × DP (96 or 128 above).
    """
    d, gbs = c.d, c.job.train.global_batch_size
    if gbs is None or gbs % (d.micro_batch_size * d.dp) == 0:
        return None
    unit = d.micro_batch_size * d.dp
    lower, upper = gbs // unit * unit, (gbs // unit + 1) * unit
    assumed = " (DP assumed: cluster.num_gpus not set)" if d.world_size_assumed else ""
    suggestion = f"{lower} or {upper}" if lower else str(upper)
    return Hit(
        message=f"train.global_batch_size={gbs} is not divisible by train.micro_batch_size={d.micro_batch_size} × DP={d.dp}"
        f"{assumed}",
        fix=f"set train.global_batch_size to a multiple of {unit}, e.g. {suggestion}",
        upstream=f"global batch size ({gbs}) is not divisible by micro batch size ({d.micro_batch_size}) times data "
        f"parallel size ({d.dp})",
    )


@rule("BAT002", "world-size-assumed", INFO)
def world_size_assumed(c: Context) -> Hit | None:
    """No GPU count given: the checks assume the smallest world the layout allows.

    ## What it does
    Notes configs without `cluster.num_gpus`.

    ## Why it matters
    Data-parallel size, microbatch count and everything that depends on them (batch divisibility,
    the interleaved schedule, optimizer sharding) are then checked for DP = 1 rather than for the
    job you will launch.

    ## Example
    ```yaml
    cluster: {num_gpus: null}   # not set
    ```

    ## Fix
    Set `cluster.num_gpus` (or pass `cluster.num_gpus=64` as an override).
    """
    d = c.d
    if not d.world_size_assumed:
        return None
    return Hit(
        message=f"cluster.num_gpus is not set: checks assume {d.world_size} GPUs (DP={d.dp})",
        fix="set cluster.num_gpus to the job's GPU count",
    )
