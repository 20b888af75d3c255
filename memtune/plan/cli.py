"""``memtune plan MODEL|--recipe NAME [OVERRIDE.yaml ...] [key=value ...] --gpus N --gbs B [...]``.

Knobs are pinned with ``--pin key=value`` rather than ``--fix``: ``memtune fix`` is a command of
its own (it repairs a config), and ``plan --fix`` would read as "plan, then fix".
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any, NoReturn

from rich.console import Console
from rich.progress import Progress

from memtune.catalog.gpus import get_gpu
from memtune.check.registry import find_rule
from memtune.config import report_ignored
from memtune.config.arguments import add_job_arguments
from memtune.config.changes import Change, with_changes
from memtune.config.derived import derive
from memtune.config.schema import JobConfig
from memtune.config.writers import WRITE_FORMATS, WRITE_HELP
from memtune.errors import InputError
from memtune.infile import names_a_file
from memtune.options import at_least, within
from memtune.output import print_json
from memtune.perf.step import StepPrediction
from memtune.plan import render
from memtune.plan.obstacle import obstacle, unsplittable_line
from memtune.plan.query import Query, base_job, mode_of, pin_filter, with_recommended_allocator, written_job
from memtune.plan.search import PlanResult, default_workers, search
from memtune.plan.space import MODES, Space, default_space
from memtune.plan.write import write_layout
from memtune.plotfile import check_plot_path
from memtune.progress import ProgressLines

# Pins on these keys narrow the enumerated values directly.
_DOMAIN_KEYS = {
    "model.tensor_model_parallel_size": "tp",
    "model.pipeline_model_parallel_size": "pp",
    "model.virtual_pipeline_model_parallel_size": "vpp",
    "model.context_parallel_size": "cp",
    "model.expert_model_parallel_size": "ep",
    "train.micro_batch_size": "mbs",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan",
        help="the fastest parallel layouts of a model on a set of GPUs that fit in memory",
        description="Enumerate TP/PP/VPP/CP/EP/ETP, micro-batch, sequence parallelism, recompute, optimizer "
        "sharding and offload; drop what memtune check refuses and what does not fit; rank by the step "
        "model's price. Sizes are GiB (2^30 bytes).",
    )
    add_job_arguments(
        p, "a model preset (`memtune models`) or a config file (memtune, Bridge, Megatron-LM, HF)"
    )
    p.add_argument(
        "--gpus", type=int, metavar="N", help="number of GPUs (default: the config's cluster.num_gpus)"
    )
    p.add_argument(
        "--gpu", metavar="NAME", help="GPU type from `memtune gpus` (default: the config's, else H100-80GB)"
    )
    p.add_argument("--gpus-per-node", type=int, metavar="N", help="GPUs per node (default 8)")
    p.add_argument("--seq", type=int, metavar="S", help="sequence length (default: the model's)")
    p.add_argument("--gbs", type=int, metavar="B", help="global batch size in sequences")
    p.add_argument(
        "--mode",
        choices=MODES,
        help="pretrain, finetune (full) or lora; default: what the job says (a peft section: lora; a "
        "Bridge SFT recipe or dataset, checkpoint.pretrained_checkpoint or Megatron-LM's --finetune: "
        "finetune; else pretrain)",
    )
    p.add_argument("--top", type=int, default=5, metavar="K", help="how many layouts to show (default 5)")
    p.add_argument("--pareto", action="store_true", help="also show the memory / throughput frontier")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="memory against throughput of every layout that fits (priced, or at most its bound); with "
        "--explain N, layout N's simulated "
        "step as a Gantt chart per pipeline stage",
    )
    p.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="hold a config key fixed, e.g. --pin model.tensor_model_parallel_size=4 (repeatable)",
    )
    p.add_argument(
        "--explain",
        type=int,
        metavar="N",
        help="layout N's simulated step beside #1's: why it ranks where it does",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="W",
        help="processes that estimate every layout for --pareto and --plot (default: the CPU count, up to "
        "8); the search for the fastest runs in one, stopping where the step model's bound says nothing "
        "left can enter",
    )
    p.add_argument(
        "--write", nargs=2, metavar=("N", "OUT"), help="write layout N to OUT in the input's format"
    )
    p.add_argument("--format", choices=WRITE_FORMATS, help=WRITE_HELP)
    p.add_argument("--force", action="store_true", help="with --write: replace OUT if it exists")
    p.set_defaults(handler=run)


def _space(base_job_: JobConfig, pins: tuple[Change, ...]) -> Space:
    space = default_space(derive(base_job_))
    narrowed: dict[str, Any] = {}
    for pin in pins:
        field = _DOMAIN_KEYS.get(pin.key)
        if field is None:
            continue
        value = 1 if pin.value is None and field == "vpp" else pin.value
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"--pin {pin}: must be a positive integer")
        narrowed[field] = (value,)
    return replace(space, **narrowed)


# Layouts --top and --explain may ask for: each shown layout is gated and estimated in full, so
# 10^9 would gate every candidate that fits (minutes); no one reads more than this.
MAX_TOP = 100
MAX_WORKERS = 64  # processes --workers may start


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse what argparse lets through: counts of 0 (which would read as "not given" and
    silently take the default), counts past the limits, an empty --gpu, a --plot directory."""
    for option, value in (
        ("--gpus", args.gpus),
        ("--gpus-per-node", args.gpus_per_node),
        ("--seq", args.seq),
        ("--gbs", args.gbs),
    ):
        at_least(option, value)
    within("--top", args.top, 1, MAX_TOP)
    within("--explain", args.explain, 1, MAX_TOP)
    check_search_options(args.workers, args.gpu)
    if args.plot:
        check_plot_path(args.plot, tuple(w for w in (args.config, *args.overrides) if w and names_a_file(w)))


def check_search_options(workers: int, gpu: str | None) -> None:
    """``--workers`` and ``--gpu`` of ``plan`` and ``bench plan``."""
    within("--workers", workers, 0, MAX_WORKERS)
    if gpu is not None:
        try:
            get_gpu(gpu)  # '' is not "no GPU given"
        except InputError as exc:
            raise InputError(f"--gpu: {exc.problems[0]}") from None


def _pin(text: str) -> Change:
    try:
        return Change.parse(text)
    except InputError as exc:
        raise InputError(f"--pin {exc.problems[0]}") from None


def _check_pins(base: JobConfig, pins: tuple[Change, ...]) -> None:
    """A pinned value the schema refuses, named as the --pin it came from."""
    try:
        with_changes(base, list(pins))
    except InputError as exc:
        raise InputError([f"--pin {line}" for line in exc.problems]) from None


def run(args: argparse.Namespace) -> int:
    _check_arguments(args)
    if (args.format or args.force) and not args.write:
        raise InputError(f"{'--force' if args.force else '--format'} goes with --write N OUT")
    pins = tuple(_pin(text) for text in args.pin)
    query = Query(
        args.config,
        args.gpus,
        args.gpu,
        args.gpus_per_node,
        args.seq,
        args.gbs,
        args.mode,
        pins,
        tuple(args.overrides),
        args.recipe,
    )
    written = written_job(query)
    if written is not None:
        report_ignored(written, args.command)
    _check_pins(base_job(replace(query, pins=())), pins)
    base, allocator = with_recommended_allocator(base_job(query))
    mode = mode_of(query)
    space = _space(base, pins)
    console = Console(stderr=args.json)
    result = _search(args, base, space, pins, console)
    if pins and not result.counts.get("estimated"):
        _refuse_pins(result, base, pins)
    explained = args.explain is not None and args.explain <= len(result.layouts)
    if args.plot and args.explain:
        if explained:
            render.plot_explained(_recorded_step(result, args.explain), args.plot)
    elif args.plot:
        render.plot(result, args.plot)
    if args.write:
        write_layout(args, result)
    if args.json:
        ignored = written.ignored if written is not None else []
        print_json(
            {
                **render.result_json(result, mode),
                "allocator": [str(c) for c in allocator],
                "ignored_keys": ignored,
            }
        )
        return 0
    if not result.layouts:
        render.print_no_layout(result, console, mode)
        return 1
    render.print_table(result, console, result.layouts[: args.top])
    if args.pareto:
        render.print_table(
            result, console, result.pareto, title="Pareto frontier: less memory or more throughput"
        )
    render.print_summary(result, console, mode)
    render.print_allocator_note(allocator, console)
    if args.explain:
        render.print_explain(result, args.explain, console)
    if args.plot and (explained or not args.explain):
        console.print(f"[dim]plot written to {args.plot}[/dim]")
    return 0


def _search(
    args: argparse.Namespace, base: JobConfig, space: Space, pins: tuple[Change, ...], console: Console
) -> PlanResult:
    """The search over ``space``; its progress a bar after the first second, or lines where that is off."""
    started = time.perf_counter()
    lines = ProgressLines("memtune plan: searching layouts")  # where the bar is off: CI logs, notebooks
    with Progress(console=console, transient=True, disable=args.json or not console.is_terminal) as bar:
        task = None

        def progress(done: int, total: int) -> None:
            nonlocal task
            if bar.disable:
                lines(done, total)
            if task is None and time.perf_counter() - started > 1.0:
                task = bar.add_task("searching layouts", total=total)
            if task is not None:
                bar.update(task, completed=done)

        return search(
            base,
            space,
            top=max(args.top, args.explain or 0),
            pareto=args.pareto or (bool(args.plot) and not args.explain),
            keep=pin_filter(base, pins),
            progress=progress,
            workers=args.workers or default_workers(),
        )


def _refuse_pins(result: PlanResult, base: JobConfig, pins: tuple[Change, ...]) -> NoReturn:
    """Refuse pins that rule every layout out before memory does, naming the rules and the obstacle."""
    rules = {code: find_rule(code) for code in result.pruned_by}
    reasons = ", ".join(f"{code}: {r.summary.rstrip('.')}" if r else code for code, r in rules.items())
    if line := unsplittable_line(obstacle(result)):
        reasons = f"{reasons}; {line}" if reasons else line
    raise InputError(
        f"--pin {' '.join(str(p) for p in pins)}: no layout on {derive(base).world_size} GPUs has it"
        + (f" ({reasons})" if reasons else "")
    )


def _recorded_step(result: PlanResult, n: int) -> StepPrediction:
    """Layout ``n``'s step simulated again with its passes recorded (the search ranks without
    them): what ``--explain N --plot`` draws."""
    from memtune.perf.step import predict_step

    shown = result.layouts[n - 1]
    if shown.step is None:
        raise InputError(f"--plot: layout {n}'s step was not simulated ({shown.throughput.not_simulated})")
    return predict_step(shown.checked.derived, record_events=True)
