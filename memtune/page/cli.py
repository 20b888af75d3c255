"""``memtune page CONFIG|--recipe NAME [key=value ...] [--oom-log LOG...] -o report.html``.

The page's data is the commands' own ``--json`` documents side by side: ``check`` (every
finding), ``estimate`` (per rank), ``fix`` (when the job does not fit or logs are given),
``plan`` (its top layouts for the same model, GPUs and batch) and the simulated step's passes.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from memtune import __version__
from memtune.check import ERROR, run_checks
from memtune.check.report import findings_json
from memtune.config import LoadedJob, report_ignored
from memtune.config.arguments import add_job_arguments, is_override, load_from_args
from memtune.errors import InputError
from memtune.outfile import check_output_path, write_atomically
from memtune.output import SCHEMA_VERSION

USAGE = "memtune page CONFIG|--recipe NAME [key=value ...] [--oom-log LOG...] -o OUT.html"
# Passes the page draws at most (a 70B step on 32 GPUs has about 1,600); more is not legible.
MAX_TIMELINE_EVENTS = 20_000
MAX_TOP = 20


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "page",
        help="one self-contained HTML page of a job: estimate, check, fix, plan and its simulated step",
        description="Bundle what estimate, check, fix and plan say about a job into one HTML file that needs "
        "no network to view, for a ticket or a pull request. Sizes are GiB (2^30 bytes).",
    )
    add_job_arguments(p, "training config (any format `memtune estimate` reads)")
    p.add_argument("-o", "--output", metavar="OUT.html", help="the page to write")
    p.add_argument(
        "--oom-log", nargs="+", default=[], metavar="LOG", help="logs of a run that ran out of memory"
    )
    p.add_argument(
        "--top", type=int, default=3, metavar="K", help="plan layouts to show (default 3; 0: no plan)"
    )
    p.add_argument("--force", action="store_true", help="replace OUT.html if it exists")
    p.add_argument("--json", action="store_true", help="print the page's data instead of writing the page")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not args.json and not args.output:
        raise InputError(f"-o OUT.html is required (or --json): {USAGE}")
    if not 0 <= args.top <= MAX_TOP:
        raise InputError(f"--top: must be from 0 to {MAX_TOP}, got {args.top}")
    inputs = tuple(w for w in (args.config, *args.overrides, *args.oom_log) if w and not is_override(w))
    target = check_output_path("-o", args.output, force=args.force, inputs=inputs) if args.output else None
    loaded = load_from_args(args, USAGE)
    report_ignored(loaded, args.command)
    doc = page_document(loaded, args, args.oom_log, args.top)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    from memtune.page.html import render_html

    text = render_html(doc).encode()
    assert target is not None
    write_atomically(target, lambda handle: handle.write(text), replace=args.force, option="-o")
    print(f"page written to {args.output} ({len(text) / 1024:.0f} KiB)")
    return 0


def page_document(
    loaded: LoadedJob, args: argparse.Namespace, oom_log: list[str], top: int
) -> dict[str, Any]:
    findings = run_checks(loaded.job)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "memtune_version": __version__,
        "source": loaded.source,
        "job": _job(loaded),
        "check": findings_json(loaded.source, findings, loaded.ignored),
        "estimate": None,
        "fix": None,
        "plan": None,
        "timeline": None,
    }
    if any(f.severity == ERROR for f in findings):
        return doc  # Megatron refuses the job: the findings say why, nothing else applies
    from memtune.check import gate
    from memtune.estimate import estimate
    from memtune.estimate.render import estimate_json
    from memtune.perf.step import throughput_of
    from memtune.perf.uncertainty import step_uncertainty

    checked = gate(loaded.job)
    est = estimate(checked)
    throughput = throughput_of(checked.derived)
    doc["estimate"] = estimate_json(
        est, throughput, uncertainty=step_uncertainty(checked.derived), ignored=loaded.ignored
    )
    if oom_log or est.verdict() != "fits":
        doc["fix"] = _fix(loaded, oom_log)
    if top:
        doc["plan"] = _plan(args, loaded, top)
    doc["timeline"] = _timeline(checked.derived, throughput.not_simulated)
    plain: dict[str, Any] = json.loads(json.dumps(doc))
    return plain  # plain JSON values: what --json prints is what the page shows


def _job(loaded: LoadedJob) -> dict[str, Any]:
    job = loaded.job
    return {
        "format": loaded.format,
        "num_layers": job.model.num_layers,
        "hidden_size": job.model.hidden_size,
        "seq_length": job.model.seq_length,
        "global_batch_size": job.train.global_batch_size,
        "micro_batch_size": job.train.micro_batch_size,
        "num_gpus": job.cluster.num_gpus,
        "gpu": job.cluster.gpu,
    }


def _fix(loaded: LoadedJob, oom_log: list[str]) -> dict[str, Any]:
    from memtune.diagnose.advice import fixes_for_failure
    from memtune.fix.cli import to_json

    verdict = None
    if oom_log:
        from memtune.diagnose import diagnose

        verdict = diagnose(oom_log, config=loaded).verdict
    return to_json(fixes_for_failure(loaded.job, verdict), verdict.label if verdict else None)


def _plan(args: argparse.Namespace, loaded: LoadedJob, top: int) -> dict[str, Any]:
    from memtune.config.derived import derive
    from memtune.plan import render
    from memtune.plan.query import Query, base_job
    from memtune.plan.search import default_workers, search
    from memtune.plan.space import default_space

    mode = "lora" if loaded.job.peft is not None else "pretrain"
    query = Query(args.config, None, None, None, None, None, mode, (), tuple(args.overrides), args.recipe)
    base = base_job(query)
    result = search(base, default_space(derive(base)), top=top, pareto=False, workers=default_workers())
    return render.result_json(result)


def _timeline(derived: Any, not_simulated: str | None) -> dict[str, Any] | None:
    from memtune.perf.step import predict_step

    if not_simulated is not None:
        return None
    step = predict_step(derived, record_events=True)
    sim = step.simulated
    events = [[e.stage, e.stream, e.kind, round(e.start, 6), round(e.end, 6)] for e in sim.events]
    drawn = len(events) <= MAX_TIMELINE_EVENTS
    return {
        "step_time_s": step.step_time_s,
        "stages": [
            {"compute_s": c, "exposed_comm_s": x, "idle_s": i}
            for c, x, i in zip(sim.stage_compute_s, sim.stage_exposed_comm_s, sim.stage_idle_s)
        ],
        "events": events if drawn else None,
        "not_drawn": None if drawn else f"{len(events):,} passes (at most {MAX_TIMELINE_EVENTS:,} are drawn)",
    }
