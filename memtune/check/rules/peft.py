"""PFT: LoRA under tensor and sequence parallelism (Megatron-Bridge's input re-gather and
all-to-all path)."""

from __future__ import annotations

from collections.abc import Iterable

from memtune.check.context import Context
from memtune.check.finding import INFO, WARNING, Hit
from memtune.check.registry import rule
from memtune.peft.model import ROW_PARALLEL, Adapter, adapters, regather_saving_bytes
from memtune.units import MiB


def regather_surfaces(c: Context) -> list[Adapter]:
    """Every targeted adapter kind with its re-gather outcome (config-visible reasons only)."""
    return list(adapters(c.d))


def _describe(surfaces: list[Adapter]) -> str:
    described = dict.fromkeys(f"{s.label} ({s.regather_blocker})" for s in surfaces)
    return "; ".join(described)


def _labels(surfaces: Iterable[Adapter]) -> list[str]:
    """Adapter labels in order, once each (dense and MoE layers both carry ``linear_qkv``)."""
    return list(dict.fromkeys(s.label for s in surfaces))


def _regather_requested(c: Context) -> bool:
    return c.job.peft is not None and c.job.peft.sequence_parallel_input_regather


@rule("PFT001", "regather-cannot-engage", WARNING)
def regather_cannot_engage(c: Context) -> Hit | None:
    """LoRA input re-gather is requested but cannot engage for any adapter.

    ## What it does
    With `peft.sequence_parallel_input_regather: true`, replays Megatron-Bridge's eligibility
    checks for each targeted adapter: only column-parallel, non-expert adapters (`linear_qkv`,
    `linear_fc1`) qualify, and only with SP on (TP > 1), no CPU activation offload, no CUDA
    graphs, no full recompute, and — for `linear_fc1` — no selective `mlp` recompute.

    ## Why it matters
    The flag saves s·b·h·2·(1−1/TP) bytes per eligible adapter per layer per in-flight
    microbatch. When it cannot engage, Megatron-Bridge falls back silently (the reason is logged
    at DEBUG level only), and the planned saving is not there.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 1}
    peft: {target_modules: [linear_qkv, linear_proj], sequence_parallel_input_regather: true}
    ```

    ## Fix
    Remove the blocker named for each adapter (e.g. TP > 1 with `sequence_parallel: true`), or
    drop the flag.
    """
    if not _regather_requested(c):
        return None
    surfaces = regather_surfaces(c)
    if any(s.regather_blocker is None for s in surfaces):
        return None
    return Hit(
        message=f"peft.sequence_parallel_input_regather=true engages for no adapter: {_describe(surfaces)}",
        fix="remove the blockers named above, or drop peft.sequence_parallel_input_regather",
    )


@rule("PFT002", "regather-partly-engages", INFO)
def regather_partly_engages(c: Context) -> Hit | None:
    """LoRA input re-gather engages for some column-parallel adapters but not others.

    ## What it does
    With `peft.sequence_parallel_input_regather: true`, names the column-parallel adapters that
    fall back while others engage (row-parallel `linear_proj`/`linear_fc2` always fall back by
    design and are not listed).

    ## Why it matters
    Megatron-Bridge logs the fallback only at DEBUG level; the saving is smaller than the flag
    suggests — e.g. selective `mlp` recompute already covers `linear_fc1`, and expert adapters
    never re-gather.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 4, sequence_parallel: true,
            recompute_granularity: selective, recompute_modules: [mlp]}
    peft: {sequence_parallel_input_regather: true}
    ```

    ## Fix
    Nothing to fix if intended; otherwise remove the blocker for the listed adapters.
    """
    if not _regather_requested(c):
        return None
    surfaces = regather_surfaces(c)
    engaged = _labels(s for s in surfaces if s.regather_blocker is None)
    missed = [s for s in surfaces if s.regather_blocker not in (None, ROW_PARALLEL)]
    if not engaged or not missed:
        return None
    return Hit(
        message=f"peft.sequence_parallel_input_regather engages for {', '.join(engaged)} but falls back for {_describe(missed)}",
        fix="remove the blockers named above if those adapters should re-gather too",
    )


@rule("PFT003", "regather-available", INFO)
def regather_available(c: Context) -> Hit | None:
    """LoRA with TP + SP could save activation memory with input re-gather.

    ## What it does
    With LoRA, TP > 1 and SP on but `peft.sequence_parallel_input_regather: false`, notes the
    adapters that would re-gather and the memory per adapter.

    ## Why it matters
    By default the trainable LoRA-A input keeps the full-sequence, TP-gathered LayerNorm output
    until backward; re-gathering keeps only the local [s/TP, b, h] shard, saving
    s·b·h·2·(1−1/TP) bytes per adapter per layer per in-flight microbatch (s per CP rank).
    Megatron-Bridge's memory-tuning guide ranks it second, after expandable segments.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 4, sequence_parallel: true}
    peft: {target_modules: [linear_qkv, linear_fc1]}
    ```

    ## Fix
    Set `peft.sequence_parallel_input_regather: true`.
    """
    if c.job.peft is None or c.job.peft.sequence_parallel_input_regather:
        return None
    engaged = [s for s in regather_surfaces(c) if s.regather_blocker is None]
    if not engaged:
        return None
    saved = regather_saving_bytes(c.d, engaged[0])
    return Hit(
        message=f"peft.sequence_parallel_input_regather=false: re-gather would save about {saved / MiB:.0f} MiB per adapter "
        f"per layer per in-flight microbatch for {', '.join(_labels(engaged))}",
        fix="set peft.sequence_parallel_input_regather=true",
    )


@rule("PFT004", "a2a-changes-nothing", INFO)
def a2a_changes_nothing(c: Context) -> Hit | None:
    """LoRA's all-to-all path is on where it changes nothing.

    ## What it does
    With `peft.a2a_experimental: true`, checks that some adapter takes the path: a row-parallel
    one (`linear_proj`, `linear_fc2`, not a routed expert's) under TP > 1 with SP.

    ## Why it matters
    Megatron-Bridge sends a row adapter's output from its hidden shard to its sequence shard by
    one all-to-all only under sequence parallelism; elsewhere the flag does nothing but turn
    input re-gather off for the column adapters.

    ## Example
    ```yaml
    model: {tensor_model_parallel_size: 4, sequence_parallel: true}
    peft: {target_modules: [linear_qkv, linear_fc1], a2a_experimental: true}
    ```

    ## Fix
    Drop `peft.a2a_experimental`, or target a row-parallel linear under TP with SP.
    """
    if c.job.peft is None or not c.job.peft.a2a_experimental:
        return None
    if not c.d.lora_row_all_to_all:
        why = "tensor parallel size is one" if c.d.tp <= 1 else "sequence parallelism is off"
    elif not any(a.parallel == "row" and a.kind != "routed_expert" for a in adapters(c.d)):
        why = "no row-parallel adapter (linear_proj, linear_fc2) is targeted"
    else:
        return None
    return Hit(
        message=f"peft.a2a_experimental=true changes nothing: {why}",
        fix="drop peft.a2a_experimental, or target a row-parallel linear under TP with SP",
    )
