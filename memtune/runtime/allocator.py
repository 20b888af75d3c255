"""Set the CUDA caching allocator up before CUDA starts, and read back what is really in effect.

The allocator reads its settings once, when it initialises (the ``backend`` option even earlier,
when torch loads); :mod:`memtune.config.allocator` holds which variable torch reads and from
which version. ``configure_allocator`` writes ``PYTORCH_CUDA_ALLOC_CONF`` (the name every torch
release and Megatron's guards read) and refuses when it would have no effect or would break the
job; ``check_allocator`` compares the settings the allocator reports with what the environment
asked for.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import metadata

from memtune import apicheck
from memtune.check.rules.environment import KNOWN_ALLOCATOR_OPTIONS, TORCH_MEMPOOL_FALLBACK
from memtune.config.allocator import AllocatorSettings, allocator_settings, parse_alloc_conf
from memtune.config.versions import Version, format_version, parse_version
from memtune.errors import ArgumentError, ArgumentTypeError, MissingDependencyError
from memtune.numbers import echo

CUDA_VARIABLE = "PYTORCH_CUDA_ALLOC_CONF"
NEW_VARIABLE = "PYTORCH_ALLOC_CONF"
MIN_SPLIT_SIZE_MB = 20  # torch refuses smaller
MAX_SPLIT_SIZE_MB = 1 << 30  # 1 PiB: above any GPU, and within torch's size_t in bytes


class AllocatorConfigError(RuntimeError):
    """The allocator settings cannot be applied: too late, or a combination that breaks the job."""


def installed_torch_version() -> Version:
    """The installed torch's version, read without importing torch."""
    try:
        return parse_version(metadata.version("torch"), "torch")
    except metadata.PackageNotFoundError:
        raise MissingDependencyError("torch is not installed") from None


def _cuda_initialised() -> bool:
    """Whether this process's CUDA allocator may already have read its settings."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def format_alloc_conf(options: dict[str, str]) -> str:
    return ",".join(f"{key}:{value}" for key, value in options.items())


@dataclass
class AllocatorSetup:
    variable: str
    value: str
    notes: list[str] = field(default_factory=list)


def configure_allocator(
    expandable_segments: bool = True,
    *,
    garbage_collection_threshold: float | None = None,
    max_split_size_mb: int | None = None,
    graph_capture_record_stream_reuse: bool | None = None,
    options: dict[str, str] | None = None,
    use_nccl_ub: bool = False,
    cuda_graphs: bool = False,
) -> AllocatorSetup:
    """Write the allocator settings into ``PYTORCH_CUDA_ALLOC_CONF`` for this process and its
    children. Call it before anything touches CUDA.

    Options already in the environment are kept unless given here; ``PYTORCH_ALLOC_CONF`` is
    merged in (torch ignores it while the alias is set). ``use_nccl_ub`` and ``cuda_graphs``
    say what the job uses, so that combinations Megatron-Core rejects are refused here, at the
    start, instead of at its start-up or as an illegal memory access mid-run.
    """
    apicheck.flag("expandable_segments", expandable_segments)
    apicheck.flag("use_nccl_ub", use_nccl_ub)
    apicheck.flag("cuda_graphs", cuda_graphs)
    wanted = _named_options(
        expandable_segments,
        garbage_collection_threshold,
        max_split_size_mb,
        graph_capture_record_stream_reuse,
    )
    _check_options(options)
    wanted.update(options or {})
    merged, notes = _merged_with_environment(wanted)
    value = format_alloc_conf(merged)
    if _already_in_effect(wanted, merged, value):
        return AllocatorSetup(CUDA_VARIABLE, value, notes + ["already in effect"])
    notes += _guard_job_combinations(merged, use_nccl_ub, cuda_graphs)
    os.environ[CUDA_VARIABLE] = value
    return AllocatorSetup(CUDA_VARIABLE, value, notes)


def _named_options(
    expandable_segments: bool,
    garbage_collection_threshold: float | None,
    max_split_size_mb: int | None,
    graph_capture_record_stream_reuse: bool | None,
) -> dict[str, str]:
    """The options ``configure_allocator`` takes by name, checked, as allocator option texts."""
    wanted: dict[str, str] = {"expandable_segments": str(expandable_segments)}
    if garbage_collection_threshold is not None:
        apicheck.number(
            "garbage_collection_threshold", garbage_collection_threshold, 0.0, 1.0, above_low=True
        )
        if garbage_collection_threshold == 1:
            raise ArgumentError(
                f"garbage_collection_threshold: must be between 0 and 1 (exclusive), got {garbage_collection_threshold}"
            )
        wanted["garbage_collection_threshold"] = str(garbage_collection_threshold)
    if max_split_size_mb is not None:
        apicheck.integer("max_split_size_mb", max_split_size_mb, MIN_SPLIT_SIZE_MB, MAX_SPLIT_SIZE_MB)
        wanted["max_split_size_mb"] = str(max_split_size_mb)
    if graph_capture_record_stream_reuse is not None:
        apicheck.flag("graph_capture_record_stream_reuse", graph_capture_record_stream_reuse)
        wanted["graph_capture_record_stream_reuse"] = str(graph_capture_record_stream_reuse)
    return wanted


def _check_options(options: dict[str, str] | None) -> None:
    """Refuse ``options`` unless each names an allocator option torch knows and gives it one value."""
    if options is not None and not isinstance(options, dict):
        raise ArgumentTypeError(
            f"options: must be a dict of option names to text values, got {echo(options)}"
        )
    for key, value in (options or {}).items():
        if key not in KNOWN_ALLOCATOR_OPTIONS:
            raise ArgumentError(f"options: torch's allocator has no option {echo(key)}")
        if not isinstance(value, str):
            raise ArgumentTypeError(f"options[{key!r}]: must be text, got {echo(value)}")
        if not value or any(c in value for c in ",:") or not value.isprintable():
            raise ArgumentError(f"options[{key!r}]: must be one value without ',' or ':', got {echo(value)}")


def _merged_with_environment(wanted: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment's options with ``wanted`` over them, and notes on what was merged or replaced."""
    notes: list[str] = []
    current_cuda = os.environ.get(CUDA_VARIABLE)
    current_new = os.environ.get(NEW_VARIABLE)
    merged = {**parse_alloc_conf(current_new), **parse_alloc_conf(current_cuda)}
    if current_new is not None:
        notes.append(
            f"{NEW_VARIABLE}={current_new!r} merged into {CUDA_VARIABLE}, which torch reads first "
            "(and the only one Megatron's guards read)"
        )
    overridden = {k: v for k, v in merged.items() if k in wanted and wanted[k] != v}
    if overridden:
        notes.append("replaced from the environment: " + format_alloc_conf(overridden))
    merged.update(wanted)
    return merged, notes


def _already_in_effect(wanted: dict[str, str], merged: dict[str, str], value: str) -> bool:
    """Whether the allocator already runs with ``merged``; refuses settings read too late to apply."""
    if _cuda_initialised():
        in_effect = allocator_settings_in_effect()
        if in_effect is not None and parse_alloc_conf(in_effect) == merged:
            return True
        raise AllocatorConfigError(
            f"CUDA is already initialised, so the allocator has read its settings ({in_effect!r}); "
            f"{CUDA_VARIABLE}={value} would have no effect: call configure_allocator() before the "
            "first CUDA call, or export the variable in the launch environment"
        )
    if "backend" in wanted and "torch" in sys.modules:
        raise AllocatorConfigError(
            "backend: torch reads it when it is imported, and it already is: export "
            f"{CUDA_VARIABLE} before starting Python"
        )
    return False


def _guard_job_combinations(merged: dict[str, str], use_nccl_ub: bool, cuda_graphs: bool) -> list[str]:
    """Refuse or note expandable segments with NCCL user buffers or CUDA graphs; sets NCCL_GRAPH_REGISTER."""
    torch_version = installed_torch_version()
    expandable = merged.get("expandable_segments") == "True"
    notes: list[str] = []
    if use_nccl_ub and expandable:
        if torch_version < TORCH_MEMPOOL_FALLBACK:
            raise AllocatorConfigError(
                f"expandable_segments:True with NCCL user buffers (use_nccl_ub) on torch {format_version(torch_version)}: "
                "Megatron-Core refuses the pair before torch 2.11; drop one of them"
            )
        notes.append(
            "with NCCL user buffers the user-buffer pool runs without expandable segments "
            f"(torch {format_version(torch_version)} falls back silently); the rest of the allocator expands"
        )
    if cuda_graphs and expandable:
        register = os.environ.get("NCCL_GRAPH_REGISTER")
        if register is None:
            os.environ["NCCL_GRAPH_REGISTER"] = "0"
            notes.append(
                "NCCL_GRAPH_REGISTER=0 set: CUDA graphs with expandable segments otherwise risk illegal memory access"
            )
        elif register != "0":
            raise AllocatorConfigError(
                f"CUDA graphs with expandable_segments:True need NCCL_GRAPH_REGISTER=0, the environment has {register!r}"
            )
    return notes


def allocator_settings_in_effect() -> str | None:
    """The settings string the allocator itself reports, or None when it cannot be asked (torch
    not imported, or CUDA not initialised, when asking would initialise it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if torch.cuda.is_available() and not torch.cuda.is_initialized():
        # Asking could make torch parse the environment now, before the allocator starts.
        return None
    getter = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    if getter is not None:
        # torch 2.12+: the accelerator-wide configuration, parsed from the environment once.
        try:
            return str(getter())
        except RuntimeError:
            return None
    if not torch.cuda.is_initialized():
        return None
    # Older torch: the snapshot carries the settings string the allocator parsed.
    settings = torch.cuda.memory._snapshot().get("allocator_settings", {})
    in_effect: str | None = settings.get(CUDA_VARIABLE)
    return in_effect


@dataclass
class AllocatorCheck:
    torch_version: Version
    expected: AllocatorSettings  # what the environment asks for, as this torch reads it
    in_effect: str | None  # what the allocator reports, None when it cannot be asked
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def expandable_segments(self) -> bool | None:
        """Whether the allocator runs with expandable segments; None when it cannot be read back."""
        if self.in_effect is None:
            return None
        return parse_alloc_conf(self.in_effect).get("expandable_segments") == "True"


def check_allocator() -> AllocatorCheck:
    """The allocator settings in effect against the environment's, with what differs and why."""
    version = installed_torch_version()
    cuda_conf, new_conf = os.environ.get(CUDA_VARIABLE), os.environ.get(NEW_VARIABLE)
    expected = allocator_settings(cuda_conf, new_conf, version)
    in_effect = allocator_settings_in_effect()
    check = AllocatorCheck(version, expected, in_effect)
    if expected.alloc_conf_ignored:
        if expected.torch_reads_alloc_conf:
            check.problems.append(
                f"{NEW_VARIABLE}={new_conf!r} is ignored: {CUDA_VARIABLE} is set and torch reads it first"
            )
        else:
            check.problems.append(
                f"{NEW_VARIABLE}={new_conf!r} is ignored by torch {format_version(version)} "
                f"(applied from 2.11 on): use {CUDA_VARIABLE}"
            )
    if in_effect is None:
        check.notes.append(
            "the allocator's settings cannot be read back (torch not imported or CUDA not initialised): "
            "showing what the environment asks for"
        )
        return check
    actual = parse_alloc_conf(in_effect)
    if actual != expected.options:
        check.problems.append(
            f"the allocator runs with {in_effect!r}, the environment asks for "
            f"{format_alloc_conf(expected.options)!r}: it was set after the allocator initialised"
        )
    return check
