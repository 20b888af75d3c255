"""The implementation choices that change what a layer keeps for backward.

Megatron-Core builds the same model two ways: the ``local`` spec (plain PyTorch modules, torch
norms, Megatron's unfused ``DotProductAttention``) and the Transformer Engine spec (norms fused
into the following linear, flash/fused attention, fused activations). The estimator asks this
object, never the raw config, which path applies; each field is a fact of
:class:`~memtune.config.derived.Derived`, where it is derived.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.config.derived import Derived


@dataclass(frozen=True)
class Flavour:
    transformer_engine: bool
    flash_attention: bool  # flash / fused / cuDNN kernels: no s x s score matrix is kept
    fused_activation: bool  # bias-SwiGLU/GeLU fusion: saves only the fc1 output
    fp8_activations: bool  # TE keeps FP8 copies of linear inputs (1 byte) for backward
    pipeline_outputs_kept: bool  # MCore keeps each sent stage output unless it deallocates it


def flavour_of(d: Derived) -> Flavour:
    return Flavour(
        transformer_engine=d.transformer_engine,
        flash_attention=d.flash_attention,
        fused_activation=d.fused_activation,
        fp8_activations=d.fp8_activations,
        pipeline_outputs_kept=d.pipeline_outputs_kept,
    )
