"""PFT: LoRA under tensor and sequence parallelism (Megatron-Bridge's input re-gather)."""

from __future__ import annotations

from dataclasses import dataclass

from memtune.check.context import Context
from memtune.check.finding import INFO, WARNING, Hit
from memtune.check.registry import rule
from memtune.units import MiB

ROW_PARALLEL = "the adapter is row-parallel"


@dataclass(frozen=True)
class Surface:
    """One kind of LoRA adapter and whether the input re-gather would engage for it."""

    name: str
    fallback: str | None  # Megatron-Bridge's reason for using the existing path; None: it engages


def _column_fallback(c: Context, target: str) -> str | None:
    """Megatron-Bridge's eligibility checks for a non-expert column-parallel adapter, in its order."""
    m, d = c.model, c.d
    if not d.sequence_parallel:
        return "sequence-parallel communication is disabled" + (
            ": tensor parallel size is one" if d.tp == 1 else ""
        )
    if m.cpu_offloading and m.cpu_offloading_activations:
        return "CPU activation offload is enabled"
    if c.cuda_graphs:
        return "CUDA graphs are enabled"
    if m.recompute_granularity == "full":
        return "full-layer activation recompute already covers the adapter"
    if target == "linear_fc1" and "mlp" in d.recompute_modules:
        return "selective MLP recompute already covers linear_fc1"
    return None


def regather_surfaces(c: Context) -> list[Surface]:
    """Every targeted adapter kind with its re-gather outcome (config-visible reasons only)."""
    surfaces = []
    for target in c.job.peft.target_modules:
        if target in ("linear_proj", "linear_fc2"):
            surfaces.append(Surface(target, ROW_PARALLEL))
        elif target == "linear_qkv" or not c.d.is_moe:
            surfaces.append(Surface(target, _column_fallback(c, target)))
        else:
            if c.any_dense_layer:
                surfaces.append(Surface("linear_fc1 (dense layers)", _column_fallback(c, target)))
            surfaces.append(Surface("linear_fc1 (routed experts)", "expert adapters never receive the flag"))
            if c.model.moe_shared_expert_intermediate_size:
                shared = (
                    "sequence-parallel communication is disabled"
                    if c.model.moe_shared_expert_overlap
                    else _column_fallback(c, target)
                )
                surfaces.append(Surface("linear_fc1 (shared experts)", shared))
    return surfaces


def _describe(surfaces: list[Surface]) -> str:
    return "; ".join(f"{s.name} ({s.fallback})" for s in surfaces)


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
    if any(s.fallback is None for s in surfaces):
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
    engaged = [s.name for s in surfaces if s.fallback is None]
    missed = [s for s in surfaces if s.fallback not in (None, ROW_PARALLEL)]
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
    engaged = [s.name for s in regather_surfaces(c) if s.fallback is None]
    if not engaged:
        return None
    d = c.d
    saved = c.model.seq_length // d.cp * d.micro_batch_size * c.model.hidden_size * 2 * (1 - 1 / d.tp)
    return Hit(
        message=f"peft.sequence_parallel_input_regather=false: re-gather would save about {saved / MiB:.0f} MiB per adapter "
        f"per layer per in-flight microbatch for {', '.join(engaged)}",
        fix="set peft.sequence_parallel_input_regather=true",
    )
