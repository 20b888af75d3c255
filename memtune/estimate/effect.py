"""What one change does to a job's memory: its estimate before and after, compared per pipeline
rank and per component of what the rank needs (docs/verdict.md). The one attribution ``diff``,
``bisect --configs`` (``memtune/regress/attribution.py``, ``effect_alone``) and ``fix`` share: the
parts of the training peak, memory outside PyTorch, the fragmentation margin and the safety
margin, which add up to what the training peak needs; then the training peak, the peak the
verdict judges (the largest of training, checkpoint load and save) and what the verdict judges
the rank needs. An allocator setting thus moves the fragmentation margin, not the peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.estimate import Estimate, RankEstimate
from memtune.estimate.render import components
from memtune.estimate.verdict import needed_bytes

# What a rank needs for its training peak, as the verdict counts it (docs/verdict.md): the
# components of its allocator peak (as memtune estimate shows them), memory outside PyTorch and
# the two margins; they add up to that need. Then the peak itself, the peak the verdict judges
# and what the verdict judges the rank needs.
COMPONENTS = (
    "weights",
    "grads",
    "optimizer",
    "activations",
    "transient",
    "outside PyTorch",
    "fragmentation margin",
    "safety margin",
)
PEAK = "peak"
JUDGED = "judged peak"
NEEDED = "needed"
MOST_LOADED = "most-loaded rank"

Breakdown = dict[str, int]  # component (and "peak", "needed") -> bytes


def breakdown(est: Estimate, rank: RankEstimate) -> Breakdown:
    # The training peak's margins (Estimate.needed_bytes judges a resume's larger peak instead).
    margin = est.verdict_margin
    training = needed_bytes(rank.peak_bytes, est.non_pytorch_bytes, margin)
    fragmentation = round(rank.peak_bytes * margin.fragmentation)
    return {
        **components(rank),
        "outside PyTorch": est.non_pytorch_bytes,
        "fragmentation margin": fragmentation,
        "safety margin": training - rank.peak_bytes - est.non_pytorch_bytes - fragmentation,
        PEAK: rank.peak_bytes,
        JUDGED: est.verdict_peak_bytes(rank),
        NEEDED: est.needed_bytes(rank),
    }


def minus(after: Breakdown, before: Breakdown) -> Breakdown:
    return {name: after[name] - before[name] for name in before}


def compared(est: Estimate, per_rank: bool) -> list[Breakdown]:
    return [breakdown(est, r) for r in est.ranks] if per_rank else [breakdown(est, est.worst)]


@dataclass(frozen=True)
class Effect:
    """What a change does alone to a job: the job's estimate before it and after it, compared per
    pipeline rank, or most-loaded rank against most-loaded rank when the pipeline size changed."""

    before: Estimate
    after: Estimate

    @property
    def per_rank(self) -> bool:
        return len(self.before.ranks) == len(self.after.ranks)

    def parts(self, per_rank: bool | None = None) -> list[Breakdown]:
        """Per compared rank (every pipeline rank, or with ``per_rank`` false or the pipeline size
        changed, the most-loaded one), the change of each component, of the peak and of what the
        rank needs."""
        each = self.per_rank if per_rank is None else per_rank and self.per_rank
        return [minus(a, b) for b, a in zip(compared(self.before, each), compared(self.after, each))]

    def on(self, pp_rank: int | None = None) -> Breakdown:
        """The change on pipeline rank ``pp_rank`` of the job (its most-loaded rank by default, and
        most-loaded against most-loaded when the pipeline size changed)."""
        if pp_rank is None or not self.per_rank:
            return minus(breakdown(self.after, self.after.worst), breakdown(self.before, self.before.worst))
        return minus(
            breakdown(self.after, self.after.ranks[pp_rank]),
            breakdown(self.before, self.before.ranks[pp_rank]),
        )
