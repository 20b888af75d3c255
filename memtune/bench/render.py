"""Formatting of the benchmarks: tables for people, JSON for tools. Nothing is computed here."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.markup import escape

from memtune.bench.accuracy import AccuracyReport, FalseFits
from memtune.bench.published import PublishedReport, PublishedSummary
from memtune.bench.resume import ResumeResult, ResumeSummary
from memtune.estimate.verdict import MIN_RUNS, Calibration
from memtune.output import SCHEMA_VERSION
from memtune.tables import Column, print_table, print_text
from memtune.units import GiB


def accuracy_json(report: AccuracyReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "runs": [
            asdict(r)
            | {"family": r.family, "error": r.error, "megatron_lm_error": r.megatron_lm_error}
            | {"false_fit": r.false_fit}
            for r in report.shown
        ],
        "summary": {k: asdict(v) if v else None for k, v in report.splits.items()},
        "families": {f"{family}/{split}": asdict(v) for (family, split), v in report.families.items()},
        "collection_range": asdict(report.collection_range) if report.collection_range else None,
        "false_fits": _false_fits_json(report.false_fits),
    }


# Run ids are what a user looks up, so they stay; the pipeline rank and the formula's own figure
# give way first on a narrow terminal, then the formula's error.
_ACCURACY_COLUMNS = (
    Column("run", "left"),
    Column("split", "left", keep=50),
    Column("pp", keep=30),
    Column("measured"),
    Column("memtune"),
    Column("error"),
    Column("Megatron-LM", keep=10),
    Column("its error", keep=20),
)


def _false_fits_json(per_split: dict[str, FalseFits | None]) -> dict[str, Any]:
    return {k: asdict(v) | {"rate": v.rate} if v else None for k, v in per_split.items()}


def _print_false_fits(console: Console, per_split: dict[str, FalseFits | None]) -> None:
    print_text(
        console,
        "[bold]Verdict false fits[/bold] (each run on the GPU that puts its estimate exactly at the "
        "'fits' boundary; false: the real peak would not have fit; docs/verdict.md)",
    )
    for name, f in per_split.items():
        if f:
            print_text(
                console,
                f"  {name:8} {f.false_fits:3} of {f.runs:3} runs ({f.rate:.1%})"
                + (f", up to {f.worst_excess:.1%} beyond the margin: {', '.join(f.ids)}" if f.ids else ""),
            )


def print_accuracy(console: Console, report: AccuracyReport) -> None:
    rows = [
        (
            r.id,
            r.split,
            str(r.pp_rank),
            f"{r.measured / GiB:.2f}",
            f"{r.estimated / GiB:.2f}",
            f"{r.error:+.1%}",
            f"{r.megatron_lm / GiB:.2f}",
            f"{r.megatron_lm_error:+.1%}",
        )
        for r in report.shown
    ]
    print_table(
        console,
        _ACCURACY_COLUMNS,
        rows,
        title="Estimated vs measured steady-state peak (GiB = 2^30 bytes)",
        row_styles=["red" if abs(r.error) > 0.08 else "" for r in report.shown],
    )
    splits = [(name, s) for name, s in report.splits.items() if s]
    print_table(
        console,
        (
            Column("split", "left"),
            Column("runs"),
            Column("mean"),
            Column("max"),
            Column("worst run", "left", keep=20),
            Column("formula mean", keep=40),
            Column("formula max", keep=40),
        ),
        [
            (
                name,
                str(s.runs),
                f"{s.mean_abs_error:.1%}",
                f"{s.max_abs_error:.1%}",
                s.worst_id,
                f"{s.megatron_lm_mean_abs_error:.1%}",
                f"{s.megatron_lm_max_abs_error:.1%}",
            )
            for name, s in splits
        ],
        title="By split: |error| of memtune and of Megatron-LM's formula",
    )
    print_table(
        console,
        (
            Column("family", "left"),
            Column("split", "left"),
            Column("runs"),
            Column("mean"),
            Column("max"),
            Column("worst run", "left", keep=20),
        ),
        [
            (family, split, str(s.runs), f"{s.mean_abs_error:.1%}", f"{s.max_abs_error:.1%}", s.worst_id)
            for (family, split), s in report.families.items()
        ],
        title="By family (run id prefix): |error| of memtune",
    )
    if gc_range := report.collection_range:
        print_text(
            console,
            f"[bold]Collector-dependent[/bold] (optimizer offload without manual_gc): the estimate is the bound "
            f"with the replaced optimizer's copies; in all {gc_range.runs} runs the measured peak lies "
            f"between the figure once collected and that bound, to within {gc_range.worst_outside:.1%} "
            f"({gc_range.worst_id})",
        )
    _print_false_fits(console, report.false_fits)


def published_json(report: PublishedReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "runs": [
            asdict(r) | {"error": r.error, "under": r.under, "false_fit": r.false_fit} for r in report.shown
        ],
        "summary": {k: asdict(v) if v else None for k, v in report.splits.items()},
        "families": {
            f.family: {k: asdict(v) if v else None for k, v in f.splits.items()} for f in report.families
        },
        "false_fits": _false_fits_json(report.false_fits),
    }


def print_published(console: Console, report: PublishedReport) -> None:
    rows = [
        (
            r.id,
            r.split,
            f"{r.published / GiB:.2f}",
            f"{r.estimated / GiB:.2f}",
            f"{r.error:+.1%}",
            "UNDER" if r.under else "",
        )
        for r in report.shown
    ]
    print_table(
        console,
        (
            Column("run", "left"),
            Column("split", "left", keep=50),
            Column("published"),
            Column("memtune"),
            Column("error"),
            Column("", "left"),
        ),
        rows,
        title="Estimated vs published peak (GiB = 2^30 bytes)",
        row_styles=["red" if r.under and r.error < -0.05 else "" for r in report.shown],
    )
    for name, s in report.splits.items():
        if s:
            print_text(
                console,
                f"[bold]{name:8}[/bold] {s.runs:3} runs  mean |error| {s.mean_abs_error:.1%}, "
                f"max {s.max_abs_error:.1%} ({s.worst_id}); under-estimates {s.under_estimates}, "
                f"worst {s.worst_under:+.1%}",
            )
    splits = [name for name in report.splits if name != "all"]
    print_table(
        console,
        (Column("family", "left"), *(Column(f"{name}: n, mean / |err| / max") for name in splits)),
        [(f.family, *(_family_cell(f.splits[name]) for name in splits)) for f in report.families],
        title="By feature family (a run counts in each family it exercises; mean error signed)",
    )
    _print_false_fits(console, report.false_fits)


def _family_cell(s: PublishedSummary | None) -> str:
    if s is None:
        return "-"
    return f"{s.runs}, {s.mean_error:+.1%} / {s.mean_abs_error:.1%} / {s.max_abs_error:.1%}"


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def print_calibration(console: Console, cal: Calibration) -> None:
    print_table(
        console,
        (
            Column("family", "left"),
            Column("measured runs"),
            Column("published runs"),
            Column("worst under"),
            Column("confidence"),
            Column("run", "left", keep=10),
        ),
        [
            (
                f.family,
                str(f.measured_runs),
                str(f.published_runs),
                f"{f.worst_under:.1%}",
                f"{f.confidence:.0%}" if f.runs >= MIN_RUNS else f"{f.confidence:.0%} (< {MIN_RUNS} runs)",
                f.worst_id or "-",
            )
            for f in cal.families.values()
        ],
        title="The verdict's calibration: worst under-estimate per family on tune runs (share of the estimate)",
    )
    print_text(
        console,
        f"{len(cal.combinations)} family combinations on tune runs; a job outside them, or in a family of "
        f"fewer than {MIN_RUNS} runs, gets the widest margin, {cal.widest:.1%}",
    )


def _tau(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def plan_accuracy_summaries(groups: list[Any]) -> dict[str, Any]:
    """Per split and over all groups (bench/plan.py ``summarize``) but the GB200 functional tests',
    which have their own (``gb200_summaries``)."""
    from memtune.bench.plan import CI_GB200_SOURCE, CI_SOURCE

    return _per_split([g for g in groups if g.source != CI_GB200_SOURCE], CI_SOURCE)


def gb200_summaries(groups: list[Any]) -> dict[str, Any]:
    """Per split and over all of the GB200 functional tests' groups; none without such groups."""
    from memtune.bench.plan import CI_GB200_SOURCE

    gb200 = [g for g in groups if g.source == CI_GB200_SOURCE]
    return _per_split(gb200, CI_GB200_SOURCE) if gb200 else {}


def _per_split(groups: list[Any], functional_tests: str) -> dict[str, Any]:
    from memtune.bench.plan import summarize

    splits = sorted({g.split for g in groups})
    return {
        name: summarize([g for g in groups if name in ("all", g.split)], functional_tests)
        for name in [*splits, "all"]
    }


def print_plan_accuracy(console: Console, groups: list[Any]) -> None:
    """Predicted against measured throughput of published layout comparisons (bench/plan.py)."""
    rows = [
        (
            r.set_id,
            r.split,
            r.label,
            f"{r.measured:g}",
            f"{r.predicted:.1f}",
            f"{r.measured_relative:.3f}",
            f"{r.predicted_relative:.3f}",
            f"{r.error:+.1%}",
            _pct(r.tflops_error, signed=True),
        )
        for g in groups
        for r in g.runs
    ]
    print_table(
        console,
        (
            Column("group", "left"),
            Column("split", "left", keep=40),
            Column("run", "left", wrap=True),
            Column("measured", keep=20),
            Column("predicted", keep=20),
            Column("meas rel", keep=30),
            Column("pred rel", keep=30),
            Column("error"),
            Column("TFLOP/s err", keep=10),
        ),
        rows,
        title="Predicted vs measured throughput, relative to each group's measured-best run",
    )
    for g in groups:
        top1 = "-" if g.top1 is None else ("hit" if g.top1 else "miss")
        print_text(
            console,
            f"[bold]{g.set_id}[/bold] ({g.split}): Kendall tau {_tau(g.tau)}, top-1 {top1}, "
            f"median relative error {_pct(_median(g.relative_errors))}",
        )
        for label, why in g.unscored:
            print_text(console, f"  not scored: {escape(label)}: {escape(why)}")
    for name, s in plan_accuracy_summaries(groups).items():
        print_text(
            console,
            f"[bold]{name}[/bold]: {s.groups} groups, {s.runs} runs: pair-weighted Kendall tau {_tau(s.tau)}, "
            f"top-1 {s.top1_hits}/{s.top1_groups}, median relative error {_pct(s.median_relative_error)}, "
            f"median model TFLOP/s error {_pct(s.median_tflops_error)}; functional-test median |step "
            f"error| {_pct(s.median_step_error)}, MoE {_pct(s.median_moe_step_error)}",
        )
    for name, s in gb200_summaries(groups).items():
        print_text(
            console,
            f"[bold]{name}[/bold] GB200 functional tests: {s.groups} groups, {s.runs} runs: pair-weighted "
            f"Kendall tau {_tau(s.tau)}, median |step error| {_pct(s.median_step_error)}, "
            f"MoE {_pct(s.median_moe_step_error)}",
        )


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def plan_accuracy_json(groups: list[Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "summary": {name: asdict(s) for name, s in plan_accuracy_summaries(groups).items()},
        "groups": [
            {
                "id": g.set_id,
                "split": g.split,
                "source": g.source,
                "kendall_tau": g.tau,
                "pairs": g.pairs,
                "top1": g.top1,
                "median_relative_error": _median(g.relative_errors),
                "runs": [
                    {
                        "label": r.label,
                        "metric": r.metric,
                        "measured": r.measured,
                        "predicted": r.predicted,
                        "measured_relative": r.measured_relative,
                        "predicted_relative": r.predicted_relative,
                        "relative_error": r.error,
                        "measured_tflops": r.measured_tflops,
                        "predicted_tflops": r.predicted_tflops,
                        "tflops_error": r.tflops_error,
                    }
                    for r in g.runs
                ],
                "unscored": [{"label": label, "reason": why} for label, why in g.unscored],
            }
            for g in groups
        ],
    }
    # a key of its own, present only with GB200 groups: the output without them is as it was
    if gb200 := gb200_summaries(groups):
        doc["gb200_summary"] = {name: asdict(s) for name, s in gb200.items()}
    return doc


def print_plan_speed(console: Console, args: Any, result: Any) -> None:
    n = result.result.counts
    shown = result.result.layouts
    best = (
        f"; #1 {shown[0].candidate.label()}, {shown[0].tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
        if shown
        else ""
    )
    print_text(
        console,
        f"{escape(args.model)} on {args.gpus} x {escape(args.gpu)}, seq {args.seq}, GBS {args.gbs}: "
        f"{n.get('enumerated', 0):,} candidates ({n.get('pruned', 0):,} pruned by arithmetic, "
        f"{n.get('bounded out', 0):,} bounded out, {n.get('estimated', 0):,} estimated, {n.get('fit', 0):,} fit, "
        f"{n.get('simulated', 0):,} priced) in {result.wall_s:.2f} s wall, {result.cpu_s:.2f} s CPU"
        + escape(best),
    )


def resume_json(
    results: list[ResumeResult],
    splits: dict[str, ResumeSummary | None],
    save_splits: dict[str, ResumeSummary | None],
) -> dict[str, Any]:
    return {
        "runs": [
            asdict(r)
            | {"load_error": r.load_error, "first_step_error": r.first_step_error, "save_error": r.save_error}
            for r in results
        ],
        "splits": {name: asdict(s) if s else None for name, s in splits.items()},
        "save_splits": {name: asdict(s) if s else None for name, s in save_splits.items()},
    }


def _gib(nbytes: int | None) -> str:
    return "-" if nbytes is None else f"{nbytes / GiB:.2f}"


def _compared(measured: int | None, estimated: int | None, error: float | None) -> tuple[str, str, str]:
    """A measured figure, the estimate and the error."""
    return _gib(measured), _gib(estimated), "-" if error is None else f"{error:+.1%}"


def _columns(*phases: str) -> tuple[Column, ...]:
    """The run, its split, and for each phase its measured figure, the estimate and the error
    (a phase written ``name/`` has no error column)."""
    columns = [Column("run", "left"), Column("split", "left", keep=50)]
    for phase in phases:
        columns += [Column(phase.rstrip("/")), Column("est")] + (
            [] if phase.endswith("/") else [Column("err")]
        )
    return tuple(columns)


def print_resume(
    console: Console,
    results: list[ResumeResult],
    splits: dict[str, ResumeSummary | None],
    save_splits: dict[str, ResumeSummary | None],
) -> None:
    resumed = [r for r in results if r.load_measured is not None]
    if resumed:
        print_table(
            console,
            _columns("load", "1st it"),
            [
                (
                    r.id,
                    r.split,
                    *_compared(r.load_measured, r.load_estimated, r.load_error),
                    *_compared(r.first_step_measured, r.first_step_estimated, r.first_step_error),
                )
                for r in resumed
            ],
            title="Resume: measured vs estimated peak of the load and the first iteration (GiB)",
        )
        _print_splits(console, splits, "over both phases")
    saved = [r for r in results if r.save_measured is not None]
    if saved:
        print_table(
            console,
            _columns("save", "pinned/"),
            [
                (
                    r.id,
                    r.split,
                    *_compared(r.save_measured, r.save_estimated, r.save_error),
                    _gib(r.host_staged_measured),
                    _gib(r.host_staged_estimated),
                )
                for r in saved
            ],
            title="Save: measured vs estimated device peak of the save, and the pinned host memory it"
            " left cached (GiB)",
        )
        _print_splits(console, save_splits, "of the save")


def _print_splits(console: Console, splits: dict[str, ResumeSummary | None], what: str) -> None:
    for name, s in splits.items():
        if s:
            print_text(
                console,
                f"[bold]{name:8}[/bold] {s.runs:3} runs  mean |error| {s.mean_abs_error:.1%} {what}, "
                f"max {s.max_abs_error:.1%} ({s.worst})",
            )
