"""The verdict, calibrated per feature family (``docs/verdict.md``).

A job falls into the feature families its config exercises (:func:`families_of`). For each
family, ``memtune bench calibrate`` records in ``calibration.json`` (beside this file) how far
the estimate fell short of the real peak on the *tune* runs of the measured set
(``benchmarks/measured/``) and the published set (``benchmarks/published/memory/``): the worst
under-estimate, as a share of the estimate. The verdict's margin on top of the fragmentation
margin is the largest of those over the job's families, or the TE margins of
``Derived.fit_uncertainty`` where they are larger (the two cover the same risk, so they are not
added). A family with fewer than :data:`MIN_RUNS`
tune runs, or a combination of families no tune run exercised together, is not measured: it
gets the widest margin any family needed.

With ``n`` exchangeable runs of a family, a new one exceeds the worst of them with probability
at most ``1 / (n + 1)``: that is the confidence the verdict states.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from memtune.config.derived import Derived
from memtune.config.knobs import KnobSubset

CALIBRATION = Path(__file__).with_name("calibration.json")

# The order reports list them in; a run without any of these features is "dense".
FAMILIES = (
    "TE MoE",
    "CUDA graphs",
    "FP8 delayed",
    "FP8 tensorwise",
    "FP8 blockwise",
    "FP8 mxfp8",
    "TP overlap",
    "FSDP",
    "offload",
    "MLA",
    "MTP",
    "optimizer offload",
    "optimizer offload, automatic gc",
    "LoRA",
    "dense",
)

# The phases of a run whose device peak the verdict judges (``Estimate.phase_peaks``), and the
# verdict of a job whose node RAM its ranks exceed, whatever its device peak.
PHASES = ("training", "checkpoint load", "first iteration", "checkpoint save")
HOST_VERDICT = "does not fit (host)"

# Tune runs a family needs before its worst under-estimate is trusted: confidence 1 - 1/(4+1) = 80%.
MIN_RUNS = 4


# The layout knobs families_of reads (TP overlap needs TP > 1; FSDP, and both offloads, are
# searched): the planner keys each candidate's margin by them (memtune/plan/fast.py).
MARGIN_KNOBS = KnobSubset("tp", "sharding", "offload", "act_offload")


def families_of(d: Derived) -> tuple[str, ...]:
    """The feature families a job exercises (a job may be in several), in :data:`FAMILIES` order."""
    m, job = d.model, d.job
    found = [
        name
        for name, present in (
            ("TE MoE", d.transformer_engine and d.is_moe),
            ("CUDA graphs", d.cuda_graphs),
            (f"FP8 {m.fp8_recipe}", m.fp8 is not None and d.transformer_engine),
            ("TP overlap", m.tp_comm_overlap and d.tp > 1),
            ("FSDP", d.megatron_fsdp),
            ("offload", m.fine_grained_activation_offloading or m.cpu_offloading),
            ("MLA", m.multi_latent_attention),
            ("MTP", d.mtp_num_layers > 0),
            ("optimizer offload", job.optimizer.optimizer_cpu_offload and job.train.manual_gc),
            (
                "optimizer offload, automatic gc",
                job.optimizer.optimizer_cpu_offload and not job.train.manual_gc,
            ),
            ("LoRA", job.peft is not None),
        )
        if present
    ]
    return tuple(found) or ("dense",)


@dataclass(frozen=True)
class FamilyFigure:
    """A family's tune runs in the calibration and the worst under-estimate among them."""

    family: str
    measured_runs: int
    published_runs: int
    worst_under: float  # (peak - estimate) / estimate, 0 when no run was under-estimated
    worst_id: str | None

    @property
    def runs(self) -> int:
        return self.measured_runs + self.published_runs

    @property
    def confidence(self) -> float:
        """Chance that a new run of the family is under-estimated by no more than ``worst_under``."""
        return 1 - 1 / (self.runs + 1)


@dataclass(frozen=True)
class Calibration:
    families: dict[str, FamilyFigure]
    combinations: frozenset[tuple[str, ...]]  # the family sets of the tune runs

    @property
    def widest(self) -> float:
        return max(f.worst_under for f in self.families.values())

    def measured(self, families: tuple[str, ...]) -> bool:
        """Every family has :data:`MIN_RUNS` tune runs, and one tune run exercised them all."""
        known = [self.families.get(f) for f in families]
        if any(f is None or f.runs < MIN_RUNS for f in known):
            return False
        return any(set(families) <= set(c) for c in self.combinations)


@dataclass(frozen=True)
class Margin:
    """What the verdict adds to a job's peak, and on what grounds."""

    fragmentation: float
    a_priori: float  # Derived.fit_margin: the fragmentation margin and the TE margins
    calibrated: float  # the family's worst tune under-estimate, or the widest when not measured
    families: tuple[str, ...]
    basis: FamilyFigure | None  # the family that sets ``calibrated``; None when not measured
    thin: tuple[str, ...] = ()  # the job's families with fewer than MIN_RUNS tune runs

    @property
    def measured(self) -> bool:
        return self.basis is not None

    @property
    def total(self) -> float:
        return max(self.a_priori, self.fragmentation + self.calibrated)

    @property
    def error(self) -> float:
        """The part beyond fragmentation: the allowance for the estimate falling short."""
        return max(self.a_priori - self.fragmentation, self.calibrated)


def calibration_json(cal: Calibration) -> dict[str, Any]:
    return {
        "families": {
            f.family: {
                "measured_runs": f.measured_runs,
                "published_runs": f.published_runs,
                "worst_under": f.worst_under,
                "worst_id": f.worst_id,
            }
            for f in cal.families.values()
        },
        "combinations": sorted(list(c) for c in cal.combinations),
    }


def calibration_from_json(data: dict[str, Any]) -> Calibration:
    families = {name: FamilyFigure(name, **figure) for name, figure in data["families"].items()}
    return Calibration(families, frozenset(tuple(c) for c in data["combinations"]))


@cache
def calibration() -> Calibration:
    return calibration_from_json(json.loads(CALIBRATION.read_text(encoding="utf-8")))


@cache
def _margin(families: tuple[str, ...], fragmentation: float, a_priori: float) -> Margin:
    cal = calibration()
    if not cal.measured(families):
        thin = tuple(f for f in families if f not in cal.families or cal.families[f].runs < MIN_RUNS)
        return Margin(fragmentation, a_priori, cal.widest, families, None, thin)
    basis = max((cal.families[f] for f in families), key=lambda f: f.worst_under)
    return Margin(fragmentation, a_priori, basis.worst_under, families, basis)


def margin_of(d: Derived) -> Margin:
    return _margin(families_of(d), d.fragmentation_margin, d.fit_margin)


def needed_bytes(peak_bytes: int, non_pytorch_bytes: int, margin: Margin) -> int:
    """Device memory a rank needs: its allocator peak with the margin, and memory outside PyTorch."""
    return round(peak_bytes * (1 + margin.total) + non_pytorch_bytes)


def verdict_of(peak_bytes: int, non_pytorch_bytes: int, capacity_bytes: int, margin: Margin) -> str:
    """``fits`` (the headroom covers the margin), ``tight`` (the peak fits, the margin does not)
    or ``does not fit``."""
    if needed_bytes(peak_bytes, non_pytorch_bytes, margin) <= capacity_bytes:
        return "fits"
    return "tight" if peak_bytes + non_pytorch_bytes <= capacity_bytes else "does not fit"
