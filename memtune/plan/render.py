"""Ways to show a :class:`~memtune.plan.search.PlanResult`: a table, JSON, an explanation, a plot."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memtune import tables
from memtune.config.changes import Change
from memtune.estimate.render import uncertainty_json
from memtune.perf import render as perf_render
from memtune.perf.step import STEP_MODEL_NOTES, StepPrediction
from memtune.perf.uncertainty import step_uncertainty
from memtune.plan.obstacle import obstacle, unsplittable_line
from memtune.plan.query import Mode
from memtune.plan.search import Planned, PlanResult
from memtune.plotfile import save_figure
from memtune.tables import Column
from memtune.units import GiB


def optimizer_label(p: Planned) -> str:
    c = p.candidate
    label = {"ddp": "DDP", "distopt": "dist-opt", "fsdp": "FSDP"}[c.sharding]
    if c.offload:
        label += f" +{c.offload:.0%} CPU"
    if c.act_offload:
        label += f", act-offload {c.act_offload}L"
    if c.regather:
        label += ", LoRA re-gather"
    return label


def layout_label(p: Planned) -> str:
    """The layout's sizes, EP included for an MoE model even at 1."""
    return p.candidate.label(moe=p.checked.derived.is_moe)


# A layout is defined by its sizes, recompute and optimizer: those and the figures it is ranked
# by are never left out. On a narrow terminal TFLOP/s (tokens/s says the same), DP (the layout
# implies it), the share of #1 and the headroom give way, in that order.
_COLUMNS = (
    Column("#"),
    Column("layout", "left", wrap=True),
    Column("DP", keep=10),
    Column("recompute", "left", wrap=True),
    Column("optimizer", "left", wrap=True),
    Column("peak"),
    Column("headroom", keep=50),
    Column("tok/s/GPU"),
    Column("TFLOP/s", keep=20),
    Column("rel", keep=30),
)


def print_table(
    result: PlanResult, console: Console, rows: list[Planned] | None = None, title: str = ""
) -> None:
    rows = result.layouts if rows is None else rows
    base = result.base
    c = base.cluster
    gpu_line = f"{c.num_gpus} x {c.gpu} ({c.gpus_per_node} per node)"
    cells = [
        (
            str(p.rank) if p.rank else "-",
            layout_label(p),
            str(p.checked.derived.dp),
            p.candidate.recompute.label(),
            optimizer_label(p),
            f"{p.peak_bytes / GiB:.1f}",
            f"{p.headroom_bytes / GiB:.1f}",
            f"{p.tokens_per_s_per_gpu:,.0f}" + ("" if p.step else "*"),
            f"{p.model_tflops_per_gpu:.0f}",
            f"{p.relative:.1%}",
        )
        for p in rows
    ]
    tables.print_table(
        console,
        _COLUMNS,
        cells,
        title=title
        or f"Fastest layouts that fit · {gpu_line} · seq {base.model.seq_length} · GBS {base.train.global_batch_size}",
    )


def print_summary(result: PlanResult, console: Console, mode: Mode | None = None) -> None:
    n = result.counts
    pruned = ", ".join(f"{k} {v:,}" for k, v in sorted(result.pruned_by.items(), key=lambda kv: -kv[1]))
    refused = ", ".join(f"{k} {v:,}" for k, v in sorted(result.refused_by.items(), key=lambda kv: -kv[1]))
    tables.print_text(
        console,
        f"[dim]{n.get('enumerated', 0):,} candidates in {result.seconds:.1f} s: "
        f"{n.get('pruned', 0):,} refused by arithmetic ({pruned or 'none'})"
        + (f", {n['not matching pins']:,} excluded by --pin" if n.get("not matching pins") else "")
        + (
            f", {n['bounded out']:,} slower at best than #{len(result.layouts)} (the step model's bound)"
            if n.get("bounded out")
            else ""
        )
        + f", {n.get('estimated', 0):,} estimated, {n.get('fit', 0):,} fit with the fragmentation margin, "
        f"{n.get('simulated', 0):,} priced by the step model"
        + (f" ({n['not simulated']} too long to simulate: *, ranked last)" if n.get("not simulated") else "")
        + f", {n.get('checked', 0)} passed memtune check"
        + (f" ({refused} refused)" if refused else "")
        + ". Peak and headroom (capacity left after the verdict's margins, docs/verdict.md) in GiB on the"
        " most-loaded rank; throughput from the simulated step (`--explain N`, docs/plan.md).[/dim]",
    )
    if mode is not None:
        overrides = "" if mode.why == "--mode" else "; --mode overrides"
        tables.print_text(console, f"[dim]Planned as {mode.name}: {escape(mode.why)}{overrides}.[/dim]")


_HEADLINES = {
    "divisibility": "every one of the {n:,} layouts breaks a divisibility rule",
    "batch": "every one of the {n:,} layouts leaves the global batch uneven over the data-parallel ranks",
    "rules": "every one of the {n:,} layouts breaks a rule Megatron enforces",
    "memory": "none of the layouts that divide evenly fits in the GPU's memory",
    "check": "every layout that fits is refused by memtune check",
    "pins": "no layout matches the --pin values",
}


def print_allocator_note(changes: tuple[Change, ...], console: Console) -> None:
    """Say that the layouts were judged with the allocator setting memtune recommends."""
    if changes:
        tables.print_text(
            console,
            "[dim]judged with " + " ".join(str(c) for c in changes) + " (memtune's recommendation: "
            "expandable segments recover fragmented memory at no cost; set them in the job)[/dim]",
        )


def print_no_layout(result: PlanResult, console: Console, mode: Mode | None = None) -> None:
    """What stopped every layout (memtune/plan/obstacle.py), then the search's counts."""
    found = obstacle(result)
    headline = _HEADLINES[found.constraint].format(n=found.candidates)
    tables.print_text(console, f"[bold red]No layout fits:[/bold red] {headline}.")
    if found.refusals:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(justify="right", no_wrap=True)
        grid.add_column(overflow="fold")  # a long word goes on, never "…"
        for r in found.refusals:
            grid.add_row(f"  {r.code}", f"{r.candidates:,}", r.summary)
        tables.print_lines(console, grid)
    if line := unsplittable_line(found):
        tables.print_text(console, "  " + line)
    if remedies := found.remedies:
        listed = ", ".join(remedies[:-1]) + " or " + remedies[-1] if len(remedies) > 1 else remedies[0]
        tables.print_text(console, f"Try {listed}.")
    print_summary(result, console, mode)


def print_explain(result: PlanResult, n: int, console: Console) -> None:
    """Layout ``n``'s overrides, memory, and its simulated step beside #1's (#1's beside #2's)."""
    if not 1 <= n <= len(result.layouts):
        console.print(f"[red]--explain {n}: only {len(result.layouts)} layouts are shown[/red]")
        return
    p = result.layouts[n - 1]
    other = result.layouts[0] if n > 1 else (result.layouts[1] if len(result.layouts) > 1 else None)
    est = p.estimate
    worst = est.worst
    tables.print_text(
        console,
        f"[bold]#{n} {layout_label(p)}[/bold] · {escape(p.candidate.recompute.label())} · {optimizer_label(p)}",
    )
    tables.print_text(console, "  overrides: " + escape(" ".join(str(ch) for ch in changed_keys(result, p))))
    if other is not None:
        tables.print_text(console, f"  differs from #{other.rank} in: " + escape(_differences(p, other)))
    tables.print_text(
        console,
        f"  memory: pipeline rank {worst.pp_rank} peaks at {worst.peak_bytes / GiB:.2f} GiB ({worst.peak_phase}); "
        f"needs {est.needed_bytes(worst) / GiB:.2f} of {est.capacity_bytes / GiB:.2f} GiB with the "
        f"{est.verdict_margin.total:.1%} margin (docs/verdict.md) and {est.non_pytorch_bytes / GiB:.2f} GiB outside PyTorch",
    )
    error = f" ± {step_uncertainty(p.checked.derived).error:.0%}" if p.step else ""
    tables.print_text(
        console,
        f"  step {p.step_time_s:.3f} s{error} · {p.tokens_per_s_per_gpu:,.0f} tokens/s/GPU · "
        f"{p.model_tflops_per_gpu:.0f} model TFLOP/s/GPU · {p.relative:.1%} of #1 "
        f"(the step model's bound: at most {result.tokens_per_s_per_gpu(p.bound_s):,.0f} tokens/s/GPU)",
    )
    step = p.step
    if step is None:
        tables.print_text(
            console,
            f"  not simulated: {p.throughput.not_simulated}; ranked after the simulated layouts",
        )
        return
    tables.print_text(
        console, f"  simulated step: bubble {step.simulated.bubble_fraction:.1%} of the busiest stage"
    )
    tables.print_table(console, perf_render.STAGE_COLUMNS, perf_render.stage_rows(step))
    if other is not None and other.step is not None:
        _print_comparison(console, p, step, other, other.step)
    for note in step.unmeasured:
        tables.print_text(console, f"  unmeasured: {escape(note)}")
    tables.print_text(console, f"  {escape(step_uncertainty(p.checked.derived).basis())}")
    tables.print_text(console, "[dim]step model: " + "; ".join(STEP_MODEL_NOTES) + "[/dim]")


def _print_comparison(
    console: Console, p: Planned, step: StepPrediction, other: Planned, other_step: StepPrediction
) -> None:
    """Layout ``p``'s step beside ``other``'s (#1, or #2 when ``p`` is #1), part by part, and the
    parts that put the slower one below."""
    mine, theirs = _step_parts(step), _step_parts(other_step)
    rows = [
        (name, f"{a:.3f}", f"{b:.3f}", f"{a - b:+.3f}")
        for (name, a), (_, b) in zip(mine, theirs, strict=True)
    ]
    columns = (
        Column("busiest stage", "left"),
        Column(f"#{p.rank} s"),
        Column(f"#{other.rank} s"),
        Column("difference"),
    )
    tables.print_table(console, columns, rows)
    slower, faster = (mine, theirs) if p.rank > other.rank else (theirs, mine)
    worse = [
        f"{name} (+{a - b:.3f} s)"
        for (name, a), (_, b) in zip(slower[1:], faster[1:], strict=True)
        if a - b >= 0.0005  # shown to the millisecond
    ]
    if worse:
        high, low = sorted((p.rank, other.rank))
        tables.print_text(console, f"  #{low} ranks below #{high} because of: " + ", ".join(worse))


def _differences(p: Planned, other: Planned) -> str:
    """The keys whose values differ between two layouts: ``p``'s value, then ``other``'s."""
    mine = {ch.key: ch for ch in p.changes}
    theirs = {ch.key: ch for ch in other.changes}

    def value(changes: dict[str, Change], key: str) -> str:
        return str(changes[key]).partition("=")[2] if key in changes else "unset"

    keys = [*mine, *(key for key in theirs if key not in mine)]
    found = [
        f"{key}={value(mine, key)} (#{other.rank}: {value(theirs, key)})"
        for key in keys
        if value(mine, key) != value(theirs, key)
    ]
    return ", ".join(found) or "nothing the layout sets"


def _step_parts(step: StepPrediction) -> list[tuple[str, float]]:
    """The step and, on its busiest stage, compute, exposed communication and idle time."""
    sim, r = step.simulated, perf_render.busiest_stage(step)
    return [
        ("step", step.step_time_s),
        ("compute", sim.stage_compute_s[r]),
        ("exposed communication", sim.stage_exposed_comm_s[r]),
        ("idle (bubble)", sim.stage_idle_s[r]),
    ]


def changed_keys(result: PlanResult, p: Planned) -> list[Change]:
    """The candidate's changes that differ from the base job (what a user has to set)."""
    from memtune.config.changes import job_data

    base = job_data(result.base)
    out = []
    for ch in p.changes:
        section, key = ch.key.split(".", 1)
        if (base.get(section) or {}).get(key, _DEFAULTS[ch.key]) != ch.value:
            out.append(ch)
    return out


def _schema_default(key: str) -> object:
    from memtune.config.schema import JobConfig

    section, name = key.split(".", 1)
    annotation = JobConfig.model_fields[section].annotation
    model: Any = next(a for a in getattr(annotation, "__args__", (annotation,)) if hasattr(a, "model_fields"))
    return model.model_fields[name].default


class _Defaults(dict[str, object]):
    """The schema's default of a dotted key, looked up once."""

    def __missing__(self, key: str) -> object:
        value = self[key] = _schema_default(key)
        return value


_DEFAULTS = _Defaults()


def planned_json(p: Planned, result: PlanResult | None = None) -> dict[str, Any]:
    est = p.estimate
    return {
        "rank": p.rank or None,
        "layout": layout_label(p),
        "recompute": p.candidate.recompute.label(),
        "optimizer": optimizer_label(p),
        "overrides": [str(ch) for ch in (changed_keys(result, p) if result else p.changes)],
        "dp": p.checked.derived.dp,
        "num_microbatches": p.checked.derived.num_microbatches,
        "peak_bytes": p.peak_bytes,
        "needed_bytes": est.needed_bytes(est.worst),
        "capacity_bytes": est.capacity_bytes,
        "headroom_bytes": p.headroom_bytes,
        "worst_pp_rank": est.worst.pp_rank,
        "verdict": est.verdict(),
        "step_time_s": p.step_time_s,
        "step_time_uncertainty": uncertainty_json(step_uncertainty(p.checked.derived)) if p.step else None,
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": p.model_tflops_per_gpu,
        "relative_throughput": p.relative,
        "simulated_step": None if p.step is None else _step_json(p.step),
        "not_simulated": p.throughput.not_simulated,
        "bound": {
            "step_time_s": p.bound_s,
            "tokens_per_s_per_gpu": result.tokens_per_s_per_gpu(p.bound_s) if result else None,
        },
    }


def result_json(result: PlanResult, mode: Mode | None = None) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "mode": None if mode is None else {"name": mode.name, "why": mode.why},
        "counts": result.counts,
        "pruned_by": result.pruned_by,
        "refused_by_check": result.refused_by,
        "seconds": result.seconds,
        "layouts": [planned_json(p, result) for p in result.layouts],
        "pareto": [planned_json(p, result) for p in result.pareto],
        "obstacle": None if result.layouts else _obstacle_json(result),
        "step_model": list(STEP_MODEL_NOTES),
    }


def _step_json(step: StepPrediction) -> dict[str, Any]:
    document = perf_render.step_json(step)
    del document["schema_version"]  # the plan document carries it at its top level
    del document["step_time_uncertainty"]  # and the layout its step time's uncertainty
    return document


def _obstacle_json(result: PlanResult) -> dict[str, Any]:
    found = obstacle(result)
    return {
        "constraint": found.constraint,
        "candidates": found.candidates,
        "refusals": [
            {"code": r.code, "candidates": r.candidates, "summary": r.summary} for r in found.refusals
        ],
        "remedies": list(found.remedies),
        "unsplittable_pp": list(found.unsplittable_pp),
    }


def plot_explained(step: StepPrediction, path: str) -> None:
    """A shown layout's simulated step, its passes recorded, as a Gantt chart per pipeline stage."""
    perf_render.plot_step(step, path)


def plot(result: PlanResult, path: str) -> None:
    """Every layout that fits: needed memory against predicted throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    bounded = [s for s in result.scored if s.throughput is None or s.throughput.prediction is None]
    priced = [s for s in result.scored if s not in bounded]
    ax.scatter(
        [s.needed_bytes / GiB for s in bounded],
        [result.tokens_per_s_per_gpu(s.bound_s) for s in bounded],
        s=4,
        alpha=0.3,
        color="grey",
        label="fits, not priced: at most (the step model's bound)",
    )
    ax.scatter(
        [s.needed_bytes / GiB for s in priced],
        [
            s.throughput.prediction.tokens_per_s_per_gpu
            for s in priced
            if s.throughput and s.throughput.prediction
        ],
        s=6,
        alpha=0.6,
        color="tab:green",
        label="fits, priced by the step model (not checked)",
    )
    if result.pareto:
        front = sorted(result.pareto, key=lambda p: p.estimate.needed_bytes(p.estimate.worst))
        ax.plot(
            [p.estimate.needed_bytes(p.estimate.worst) / GiB for p in front],
            [p.tokens_per_s_per_gpu for p in front],
            "-o",
            color="tab:blue",
            markersize=3,
            label="Pareto frontier",
        )
    for p in result.layouts:
        x = p.estimate.needed_bytes(p.estimate.worst) / GiB
        ax.scatter([x], [p.tokens_per_s_per_gpu], color="tab:red", s=18)
        ax.annotate(f"#{p.rank}", (x, p.tokens_per_s_per_gpu), fontsize=7)
    capacity = result.layouts[0].estimate.capacity_bytes / GiB if result.layouts else None
    if capacity:
        ax.axvline(capacity, color="black", linestyle="--", label="GPU capacity")
    ax.set_xlabel("memory needed on the most-loaded rank, GiB (2^30 bytes)")
    ax.set_ylabel("predicted tokens/s per GPU (shown layouts: simulated step)")
    ax.set_title("memtune plan: layouts that fit")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, str(path), dpi=120)
    plt.close(fig)
