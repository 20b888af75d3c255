"""The figures the README and docs quote, generated in one place: ``memtune bench figures``.

Each figure is Markdown computed from the benchmarks (the rule catalogue, ``bench accuracy``,
``bench published``, the step model's held-out error table). In a document it sits between two
markers, ``<!-- figure: NAME -->`` and ``<!-- /figure -->``, which GitHub does not show;
``--write`` puts the current figures there, ``--check`` says which differ, and
``tests/bench/test_figures.py`` fails when a document drifts from them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from memtune.bench.accuracy import AccuracyReport, FalseFits, accuracy_report, evaluate, read_runs
from memtune.bench.published import PublishedReport, evaluate_published, published_report, read_published
from memtune.bench.render import _family_cell
from memtune.errors import InputError

MEASURED = Path("benchmarks/measured")
PUBLISHED = Path("benchmarks/published/memory")
DOCUMENTS = (Path("README.md"), Path("docs/verdict.md"), Path("docs/plan.md"))
MARKED = re.compile(r"<!-- figure: (?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /figure -->", re.DOTALL)

# What each split of the measured set is (benchmarks/measured/README.md).
SPLIT_LABELS = {
    "tune": "tune (used while building the estimator)",
    "holdout": "holdout (fixed by a hash rule before any comparison)",
    "fresh": "fresh (defined and measured after the estimator was frozen at commit 379140b)",
    "fresh2": "fresh2 (defined and measured after its last change, commit 90a3a76)",
}
# The measured set's families (bench/accuracy.py, by run id prefix), in words.
FAMILY_LABELS = {
    "core": "core: dense and MoE, TP/SP/PP/VPP/EP, recompute, distributed optimizer, MLA under each"
    " recompute choice, fp32 and fp16, micro-batch sizes 1-8, the step model's timing runs (`l8w-`,"
    " `mx-`, `mla-`, `prec-`, `mbs-`, `ctime-`, ...)",
    "stack defaults": "stack defaults: fused softmax kernel, bf16 softmax, bias-activation and"
    " cross-entropy fusion, token dropping (`def-`)",
    "LoRA": "LoRA, with and without re-gather, on MoE by target set, scale position (`lora-`)",
    "mtp": "multi-token prediction (`mtp-`)",
    "fsdp": "Megatron-FSDP, three strategies (`fsdp-`)",
    "optim-offload": "optimizer CPU offload with `manual_gc` (`mgc-`)",
    "activation-offload": "fine-grained activation offloading, dense, MoE and MLA, PP/VPP, recompute (`aoff-`)",
    "optim-offload-autogc": "optimizer CPU offload under Python's automatic collector (`ooff-`): the"
    " estimate is a bound",
}


@dataclass(frozen=True)
class Sets:
    measured: AccuracyReport
    published: PublishedReport


@cache
def sets() -> Sets:
    return Sets(
        accuracy_report([evaluate(r) for r in read_runs([MEASURED])]),
        published_report([evaluate_published(r) for r in read_published([PUBLISHED])]),
    )


def rule_count() -> str:
    from memtune.check.registry import catalogue

    return f"{len(catalogue())} rules"


def accuracy_splits() -> str:
    rows = [
        "| split | runs | memtune mean / max error | Megatron-LM formula mean / max |",
        "|---|---|---|---|",
    ]
    for name, s in sets().measured.splits.items():
        if s is None or name == "all":
            continue
        rows.append(
            f"| {SPLIT_LABELS.get(name, name)} | {s.runs} | {s.mean_abs_error:.1%} / {s.max_abs_error:.1%} | "
            f"{s.megatron_lm_mean_abs_error:.1%} / {s.megatron_lm_max_abs_error:.1%} |"
        )
    return _block(rows)


def measured_families() -> str:
    families = sets().measured.families
    rows = ["| family (run ids) | tune runs, mean / max | holdout runs, mean / max |", "|---|---|---|"]
    for family in [f for f in FAMILY_LABELS if (f, "tune") in families] + sorted(
        {f for f, _ in families} - FAMILY_LABELS.keys()
    ):
        cells = []
        for split in ("tune", "holdout"):
            s = families.get((family, split))
            cells.append("-" if s is None else f"{s.runs}, {s.mean_abs_error:.1%} / {s.max_abs_error:.1%}")
        rows.append(f"| {FAMILY_LABELS.get(family, family)} | {' | '.join(cells)} |")
    return _block(rows)


def _false_fit_cell(f: FalseFits | None) -> str:
    if f is None:
        return "-"
    return f"{f.false_fits} of {f.runs}" + (f" ({f.rate:.1%})" if f.false_fits else "")


def false_fits() -> str:
    measured, published = sets().measured.false_fits, sets().published.false_fits
    splits = [name for name in measured if name != "all"]
    rows = [f"| set | {' | '.join(splits)} |", "|---" * (len(splits) + 1) + "|"]
    for label, per_split in (
        ("measured (`memtune bench accuracy`)", measured),
        ("published (`memtune bench published`)", published),
    ):
        rows.append(f"| {label} | {' | '.join(_false_fit_cell(per_split.get(s)) for s in splits)} |")
    return _block(rows)


def published_families() -> str:
    rows = [
        "| family | tune runs, mean / mean abs / max | holdout runs, mean / mean abs / max |",
        "|---|---|---|",
    ]
    for f in sets().published.families:
        rows.append(
            f"| {f.family} | {_family_cell(f.splits['tune'])} | {_family_cell(f.splits['holdout'])} |"
        )
    return _block(rows)


def step_error() -> str:
    from memtune.perf.uncertainty import error_table

    rows = ["| held-out set | family | runs | median error of the step time |", "|---|---|---|---|"]
    for name, held_out in error_table()["sets"].items():
        for family, figure in held_out["families"].items():
            rows.append(f"| {name.replace('_', '-')} | {family} | {figure['runs']} | {figure['error']:.1%} |")
    return _block(rows)


def _block(rows: list[str]) -> str:
    return "\n" + "\n".join(rows) + "\n"


FIGURES: dict[str, Callable[[], str]] = {
    "rule-count": rule_count,
    "accuracy-splits": accuracy_splits,
    "measured-families": measured_families,
    "false-fits": false_fits,
    "published-families": published_families,
    "step-error": step_error,
}


@dataclass(frozen=True)
class Drift:
    document: Path
    figure: str


def rewritten(text: str) -> str:
    """``text`` with every marked figure replaced by its current value."""
    return MARKED.sub(lambda m: f"<!-- figure: {m['name']} -->{_figure(m['name'])}<!-- /figure -->", text)


def drift(documents: tuple[Path, ...] = DOCUMENTS) -> list[Drift]:
    """The marked figures whose text differs from what the benchmarks give now."""
    found = []
    for path in documents:
        for m in MARKED.finditer(path.read_text(encoding="utf-8")):
            if m["body"] != _figure(m["name"]):
                found.append(Drift(path, m["name"]))
    return found


def marked(documents: tuple[Path, ...] = DOCUMENTS) -> dict[str, list[Path]]:
    """Each figure's documents."""
    found: dict[str, list[Path]] = {}
    for path in documents:
        for m in MARKED.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(m["name"], []).append(path)
    return found


def _figure(name: str) -> str:
    if name not in FIGURES:
        raise InputError(f"unknown figure {name!r} in a document; the figures are {', '.join(FIGURES)}")
    return FIGURES[name]()
