"""``memtune bench plan``: the planner's speed, and the throughput model against published
measured comparisons of layouts (``--accuracy``)."""

from __future__ import annotations

import json
import math
import resource
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.bench.sets import evaluating, read_layouts
from memtune.check import CheckedJob, gate
from memtune.config import validate
from memtune.config.changes import Change, job_data, with_changes
from memtune.config.loaders import native
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.estimate.verdict import families_of
from memtune.perf.step import StepPrediction
from memtune.plan.query import Query, base_job
from memtune.plan.search import PlanResult, search, step_price

DEFAULT_LAYOUTS = Path("benchmarks/published/layouts")
CI_SOURCE = "Megatron-LM functional tests (golden iteration-time)"
# The functional tests run on GB200 (layouts/megatron-lm-ci-gb200): a set of its own, summarized on
# its own line and kept out of the pooled figures, so that adding it changed none of them.
CI_GB200_SOURCE = "Megatron-LM functional tests on GB200 (golden iteration-time)"


@dataclass
class Speed:
    result: PlanResult
    wall_s: float
    cpu_s: float  # user and system, of this process (the search runs in it)


def speed(model: str, gpus: int, seq: int, gbs: int, gpu: str) -> Speed:
    """``memtune plan``'s search for the best 5 layouts of ``model`` on ``gpus``, timed."""
    base = base_job(Query(model, gpus, gpu, 8, seq, gbs, "pretrain"))

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    cpu0, wall0 = cpu(), time.perf_counter()
    result = search(base, top=5)
    return Speed(result, time.perf_counter() - wall0, cpu() - cpu0)


@dataclass
class RunScore:
    set_id: str
    split: str
    label: str
    metric: str  # the published throughput ranked: model_tflops_per_gpu or tokens_per_s_per_gpu
    measured: float
    predicted: float
    measured_tflops: float | None  # the published model TFLOP/s, where given
    predicted_tflops: float
    measured_relative: float = 0.0  # to the run the source measured fastest
    predicted_relative: float = 0.0  # to the prediction of that same run
    families: tuple[str, ...] = ()  # the job's feature families (estimate/verdict.py families_of)

    @property
    def error(self) -> float:
        return self.predicted_relative / self.measured_relative - 1

    @property
    def tflops_error(self) -> float | None:
        if self.measured_tflops is None:
            return None
        return self.predicted_tflops / self.measured_tflops - 1

    @property
    def throughput_error(self) -> float:
        """Predicted over measured throughput - 1, so measured over predicted step time - 1: of
        model TFLOP/s where the run publishes it (in the publisher's FLOP count), else of its one
        figure (MLPerf's tokens/s)."""
        return self.tflops_error if self.tflops_error is not None else self.predicted / self.measured - 1


@dataclass
class GroupScore:
    """One published comparison: its runs, and the model's agreement with them."""

    set_id: str
    split: str
    source: str
    runs: list[RunScore]
    unscored: list[tuple[str, str]]  # (label, why memtune cannot price it)

    @property
    def pairs(self) -> int:
        return len(self.runs) * (len(self.runs) - 1) // 2

    @property
    def concordance(self) -> float:
        """Concordant minus discordant pairs (ties count as neither)."""
        return kendall_tau([r.measured for r in self.runs], [r.predicted for r in self.runs]) * self.pairs

    @property
    def tau(self) -> float | None:
        return self.concordance / self.pairs if self.pairs else None

    @property
    def top1(self) -> bool | None:
        """Whether the run predicted fastest is the one measured fastest."""
        if len(self.runs) < 2:
            return None
        return max(self.runs, key=lambda r: r.predicted) is max(self.runs, key=lambda r: r.measured)

    @property
    def relative_errors(self) -> list[float]:
        """|error| of each run's throughput relative to the group's measured-best run."""
        return [abs(r.error) for r in self.runs if r.measured_relative != 1.0]


@dataclass
class Summary:
    groups: int
    runs: int
    tau: float | None  # pair-weighted over the groups
    top1_hits: int
    top1_groups: int
    median_relative_error: float | None
    median_tflops_error: float | None  # |predicted / published model TFLOP/s - 1|
    # |predicted / published step time - 1| of one set of Megatron-LM functional-test runs (the
    # ``functional_tests`` source of ``summarize``), all and MoE
    median_step_error: float | None = None
    median_moe_step_error: float | None = None


def split_of(set_id: str) -> str:
    """The held-back rule of benchmarks/published/layouts/README.md."""
    import hashlib

    return "holdout" if hashlib.sha256(set_id.encode()).hexdigest()[0] in "01234567" else "tune"


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-a of two equally long sequences (ties count as neither)."""
    pairs = [(i, j) for i in range(len(xs)) for j in range(i + 1, len(xs))]
    score = sum(
        math.copysign(1, (xs[i] - xs[j]) * (ys[i] - ys[j])) if (xs[i] - xs[j]) * (ys[i] - ys[j]) else 0
        for i, j in pairs
    )
    return score / len(pairs) if pairs else 1.0


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(groups: list[GroupScore], functional_tests: str = CI_SOURCE) -> Summary:
    """The figures over ``groups``; the step errors are those of the groups of the
    ``functional_tests`` source (CI_SOURCE: the H100 runs; CI_GB200_SOURCE: the GB200 ones)."""
    pairs = sum(g.pairs for g in groups)
    ranked = [g for g in groups if g.top1 is not None]
    tflops = [abs(e) for g in groups for r in g.runs if (e := r.tflops_error) is not None]
    return Summary(
        groups=len(groups),
        runs=sum(len(g.runs) for g in groups),
        tau=sum(g.concordance for g in groups) / pairs if pairs else None,
        top1_hits=sum(1 for g in ranked if g.top1),
        top1_groups=len(ranked),
        median_relative_error=_median([e for g in groups for e in g.relative_errors]),
        median_tflops_error=_median(tflops),
        median_step_error=_median(_step_errors(groups, functional_tests, moe_only=False)),
        median_moe_step_error=_median(_step_errors(groups, functional_tests, moe_only=True)),
    )


def _step_errors(groups: list[GroupScore], source: str, moe_only: bool) -> list[float]:
    """|predicted / published step time - 1| of the functional-test runs of ``source`` (by
    tokens/s: the same ratio inverted); their groups are ``group_of``'s model shapes, MoE ones
    naming ``-e<experts>``."""
    return [
        abs(r.measured / r.predicted - 1)
        for g in groups
        if g.source == source and (not moe_only or "-e" in g.set_id)
        for r in g.runs
    ]


def _base(entry: dict[str, Any]) -> JobConfig:
    """The job a run starts from: its model (a preset, an inline ``model:`` section, or a config
    word such as ``recipe:perf:NAME``) on its cluster, batch and sequence."""
    model = entry["model"]
    query = Query(
        model if isinstance(model, str) else "llama3-8b",
        entry["gpus"],
        entry["gpu"],
        entry["gpus_per_node"],
        entry["seq"],
        entry["gbs"],
        entry["mode"],
    )
    base = base_job(query)
    if isinstance(model, dict):
        # a model of its own, checked as any config's model section: the run's sequence, and bf16
        # as for a preset (base_job), unless the section says otherwise
        section = {"bf16": not model.get("fp16", False), **model, "seq_length": entry["seq"]}
        base = validate({**job_data(base), "model": section})
    return base


def _priced(checked: CheckedJob) -> StepPrediction:
    """The step ``memtune plan`` ranks ``checked`` by (``step_price``); a step too long to simulate
    is refused with the reason, so the run is listed as unscored."""
    throughput = step_price(checked)
    if throughput.prediction is None:
        raise InputError(f"step not simulated: {throughput.not_simulated}")
    return throughput.prediction


# What a run may set for itself over its set's fields (a set whose runs differ by model or scale).
RUN_FIELDS = ("model", "gpus", "gpu", "gpus_per_node", "seq", "gbs", "mode")


def run_job(entry: dict[str, Any], run: dict[str, Any], common: list[Change] | None = None) -> JobConfig:
    """The job one run of a set states: its base (``_base``, the run's own fields over the set's)
    with the set's common overrides and the run's own."""
    base = _base({**entry, **{k: run[k] for k in RUN_FIELDS if k in run}})
    return with_changes(base, (common or []) + [Change.parse(text) for text in run["overrides"]])


def score_set(entry: dict[str, Any]) -> GroupScore:
    with evaluating(entry["id"]):
        common = [Change.parse(text) for text in entry.get("common", [])]
    scores, unscored = [], []
    for run in entry["runs"]:
        try:
            checked = gate(run_job(entry, run, common))
            pred = _priced(checked)
        except InputError as exc:
            unscored.append((run["label"], exc.problems[0]))
            continue
        metric, measured = next(iter(run["measured"].items()))
        published_tflops = run["measured"].get("model_tflops_per_gpu")
        published_tokens = run["measured"].get("tokens_per_s_per_gpu")
        predicted_tflops = pred.model_tflops_per_gpu
        if published_tflops is not None and published_tokens:
            # The publisher's FLOPs per token, times the predicted tokens/s: TFLOP/s compared in the
            # publisher's own FLOP convention (MoE, GQA and causal-attention counts differ by source).
            predicted_tflops = pred.tokens_per_s_per_gpu * published_tflops / published_tokens
        predicted = predicted_tflops if metric == "model_tflops_per_gpu" else getattr(pred, metric)
        configuration = json.dumps([{k: run.get(k) for k in RUN_FIELDS}, run["overrides"]], sort_keys=True)
        scores.append(
            (
                configuration,
                RunScore(
                    entry["id"],
                    split_of(entry["id"]),
                    run["label"],
                    metric,
                    measured,
                    predicted,
                    published_tflops,
                    predicted_tflops,
                    families=families_of(checked.derived),
                ),
            )
        )
    runs = one_per_configuration(scores)
    relative_to_best(runs)
    return GroupScore(entry["id"], split_of(entry["id"]), entry.get("source", ""), runs, unscored)


def one_per_configuration(scores: list[tuple[str, RunScore]]) -> list[RunScore]:
    """The runs of a set, those of one stated configuration (the same run fields and overrides:
    one benchmark run again, on another server of the same kind) as one run at their median
    measured throughput: no configuration of the job orders them, so they are no comparison of
    layouts, and each repeat would weigh in the medians again."""
    alike: dict[str, list[RunScore]] = {}
    for configuration, score in scores:
        alike.setdefault(configuration, []).append(score)
    runs = []
    for group in alike.values():
        first = group[0]
        if len(group) == 1:
            runs.append(first)
            continue
        tflops = [r.measured_tflops for r in group if r.measured_tflops is not None]
        runs.append(
            RunScore(
                first.set_id,
                first.split,
                f"{first.label} ({len(group)} runs)",
                first.metric,
                statistics.median(r.measured for r in group),
                first.predicted,
                statistics.median(tflops) if tflops else None,
                first.predicted_tflops,
                families=first.families,
            )
        )
    return runs


def relative_to_best(scores: list[RunScore]) -> None:
    """Set each run's measured and predicted value relative to those of the group's measured best run."""
    if scores:
        best = max(scores, key=lambda s: s.measured)
        for s in scores:
            s.measured_relative = s.measured / best.measured
            s.predicted_relative = s.predicted / best.predicted


def ci_split_of(run_id: str) -> str:
    """The rule of the per-run files (benchmarks/published/layouts/README.md, Megatron-LM
    functional-test step times): holdout iff sha1(id)[:8] % 10 < 3."""
    import hashlib

    return "holdout" if int(hashlib.sha1(run_id.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


def ci_source(doc: dict[str, Any]) -> str:
    """The set of a published step time, by the GPU of its config: the GB200 set, or for any other
    GPU the H100 one (as every such file was before the GB200 set came)."""
    cluster = doc["config"].get("cluster")
    gpu = cluster.get("gpu") if isinstance(cluster, dict) else None
    return CI_GB200_SOURCE if gpu == "GB200" else CI_SOURCE


def score_ci_group(group: str, split: str, docs: list[dict[str, Any]], source: str = CI_SOURCE) -> GroupScore:
    """Runs of one model shape on one GPU count (one split), by tokens/s per GPU: global batch x
    sequence / step time / GPUs; the published step time against the predicted one. Test cases
    whose translated configs are the same (they differ only in flags the translation drops:
    resume, data-loader options) are one configuration, as in the layout sets
    (``one_per_configuration``)."""
    scores, unscored = [], []
    for doc in docs:
        try:
            checked = gate(validate(native.read(doc["config"])))
            pred = _priced(checked)
        except InputError as exc:
            unscored.append((doc["id"], exc.problems[0]))
            continue
        job = checked.job
        tokens = checked.derived.global_batch_size * job.model.seq_length / checked.derived.world_size
        measured = tokens / doc["published"]["step_time_s"]
        predicted = pred.tokens_per_s_per_gpu
        # The published figure is a step time: model TFLOP/s at that time, by memtune's FLOP count.
        measured_tflops = pred.model_tflops_per_gpu * measured / predicted
        configuration = json.dumps(doc["config"], sort_keys=True)
        scores.append(
            (
                configuration,
                RunScore(
                    group,
                    split,
                    doc["id"],
                    "tokens_per_s_per_gpu",
                    measured,
                    predicted,
                    measured_tflops,
                    pred.model_tflops_per_gpu,
                    families=families_of(checked.derived),
                ),
            )
        )
    runs = one_per_configuration(scores)
    relative_to_best(runs)
    return GroupScore(group, split, source, runs, unscored)


def accuracy(paths: list[Path], split: str = "all", gb200: bool = False) -> list[GroupScore]:
    """Score every set of the files; ``split`` (tune or holdout) scores only that split's sets, so
    working on the model never predicts a held-back set. Files holding ``sets`` are layout
    comparisons; files of one run each (``published.step_time_s``) are grouped by ``group``.
    ``gb200``: also the GB200 functional tests (CI_GB200_SOURCE), after every other group; left
    out otherwise, not even priced, so that what is built on these figures (the step model's
    stated error, benchmarks/step_error.py, and its fits) stays of the sets it was made from."""
    entries, runs = read_layouts(paths)
    groups = [score_set(e) for e in entries if split in ("all", split_of(e["id"]))]
    runs = [doc for doc in runs if split in ("all", ci_split_of(doc["id"]))]
    sources = (CI_SOURCE, CI_GB200_SOURCE) if gb200 else (CI_SOURCE,)
    for source in sources:
        by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for doc in runs:
            if ci_source(doc) == source:
                by_group.setdefault((doc["group"], ci_split_of(doc["id"])), []).append(doc)
        groups += [score_ci_group(g, sp, docs, source) for (g, sp), docs in sorted(by_group.items())]
    return groups
