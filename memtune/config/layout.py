"""Megatron-Core's ``pipeline_model_parallel_layout``: which layers each pipeline stage builds.

A layout is a list of stages, each a list of layer names (``embedding``, ``decoder``, ``mtp``,
``loss``), or a string in Megatron's shorthand: ``E`` embedding, ``t`` decoder layer, ``m``
multi-token-prediction layer, ``L`` loss, ``|`` between stages, ``x*n`` and ``(...)*n``
repetition, commas ignored (``"Ettt|(tt|)*29,m|L"``). Stages are listed virtual stage by
virtual stage: stage ``i`` belongs to pipeline rank ``i % PP`` and virtual stage ``i // PP``
(megatron/core/transformer/pipeline_parallel_layer_layout.py). Parsing here never raises;
:func:`layout_problems` says what Megatron would refuse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LAYER_CODES = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
LAYER_NAMES = frozenset(LAYER_CODES.values())
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_SINGLE = re.compile(r"(.)\*(\d+)")
# Repetition counts beyond this cannot describe a real model and would only cost memory.
_MAX_EXPANDED = 100_000


def parse_layout(layout: str | list[list[str]]) -> list[list[str]]:
    """The layout as a list of stages of lower-case layer names, in the order written."""
    if isinstance(layout, list):
        return [[str(name).strip().lower() for name in stage] for stage in layout]
    text = layout.replace(",", "")
    for pattern in (_GROUP, _SINGLE):
        text = pattern.sub(lambda m: _repeat(m.group(1), int(m.group(2))), text)
    return [[LAYER_CODES.get(ch, ch) for ch in stage] for stage in text.split("|")]


def _repeat(text: str, times: int) -> str:
    if len(text) * times > _MAX_EXPANDED:
        raise ValueError(f"expands past {_MAX_EXPANDED} layers")
    return text * times


@dataclass(frozen=True)
class StageLayers:
    decoder: int
    mtp: int


def stage_grid(stages: list[list[str]], pp: int) -> list[list[StageLayers]]:
    """``grid[pp_rank][vp_stage]``: decoder and MTP layers of each model chunk."""
    vpp = max(1, len(stages) // pp)
    return [
        [
            StageLayers(stages[v * pp + r].count("decoder"), stages[v * pp + r].count("mtp"))
            for v in range(vpp)
        ]
        for r in range(pp)
    ]


def layout_problems(layout: str | list[list[str]], pp: int, num_layers: int, mtp_layers: int) -> list[str]:
    """What Megatron-Core's layout validation would refuse, in its terms."""
    try:
        stages = parse_layout(layout)
    except ValueError as exc:
        return [f"pipeline_model_parallel_layout {exc}"]
    flat = [name for stage in stages for name in stage]
    unknown = sorted({n for n in flat if n not in LAYER_NAMES})
    problems = []
    if unknown:
        problems.append(
            f"pipeline_model_parallel_layout: unknown layer {', '.join(map(repr, unknown))}; "
            "known: E (embedding), t (decoder), m (mtp), L (loss)"
        )
    if len(stages) % pp:
        problems.append(
            f"pipeline_model_parallel_layout has {len(stages)} stages, not a multiple of "
            f"pipeline_model_parallel_size ({pp})"
        )
    if not flat or flat[0] != "embedding" or flat.count("embedding") != 1:
        problems.append("pipeline_model_parallel_layout: the first layer must be the only embedding (E)")
    if not flat or flat[-1] != "loss" or flat.count("loss") != 1:
        problems.append("pipeline_model_parallel_layout: the last layer must be the only loss (L)")
    if flat.count("decoder") != num_layers:
        problems.append(
            f"pipeline_model_parallel_layout places {flat.count('decoder')} decoder layers, "
            f"num_layers is {num_layers}"
        )
    if flat.count("mtp") != mtp_layers:
        problems.append(
            f"pipeline_model_parallel_layout places {flat.count('mtp')} mtp layers, "
            f"mtp_num_layers is {mtp_layers}"
        )
    return problems


_CODES = {name: code for code, name in LAYER_CODES.items()}


def layout_text(layout: str | list[list[str]]) -> str:
    """A layout in Megatron's shorthand: a string as written, a list of stages spelled out."""
    if isinstance(layout, str):
        return layout
    return "|".join("".join(_CODES.get(str(name).strip().lower(), "?") for name in stage) for stage in layout)


def balanced_layout(num_layers: int, mtp_layers: int, stages: int) -> str | None:
    """The explicit layout Megatron-Bridge builds for a model whose layers do not split evenly
    (``recipes/deepseek/h100/deepseek_v3.py``, ``_get_deepseek_v3_pipeline_layout``, at
    NVIDIA-NeMo/Megatron-Bridge 067f987d; its 1,024-H100 performance recipe's
    ``Et|(tt|)*30mL`` follows the same rule): every virtual stage but the first and last holds
    ``ceil(num_layers / stages)`` decoder layers, the first as many of the rest as fit, after the
    embedding, and the last what remains with the MTP layers and the loss. None when ``stages``
    are too few or too many for that (fewer than 3, or a stage left with fewer than no layers)."""
    if stages < 3:
        return None
    per_stage = -(-num_layers // stages)
    rest = num_layers - (stages - 2) * per_stage
    if rest < 0:
        return None
    first = min(per_stage, rest)
    last = rest - first
    middle = stages - 2
    body = f"({_run(per_stage)}|)*{middle}" if middle > 1 else _run(per_stage) + "|"
    return f"E{_run(first)}|{body}{_run(last)}{'m' * mtp_layers}L"


def _run(layers: int) -> str:
    """``layers`` decoder layers in the shorthand: ``tt`` up to two, ``t*n`` beyond."""
    return "t" * layers if layers <= 2 else f"t*{layers}"
