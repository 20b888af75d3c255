"""The benchmark sets' files, read and checked where they enter (docs/limits.md, "Benchmark sets").

The sets memtune ships are files like any other: a folder passed to ``bench`` may hold anything,
and ``bench calibrate`` reads ``benchmarks/`` under the current directory. Every file is read
through :mod:`memtune.infile` (regular files only, at most ``MAX_CONFIG_BYTES``), YAML with the
config loaders' guards (safe loader, bounded aliases and depth, no duplicate keys), and every
field a benchmark uses is checked for its type and range here, each problem one line naming
the file (and line) and the field: what reaches the estimator and ``--json`` is what the formats
below allow.

- a measured run (``bench accuracy``, ``bench resume``, ``bench calibrate``; JSON Lines): ``id``,
  ``config`` (a memtune config), ``rank``, ``measured.peak_allocated_bytes``, optional ``split``;
  a checkpoint round trip also ``measured.resume.load_peak_bytes`` and ``first_step_peak_bytes``,
  or ``measured.save.save_peak_bytes``, or both;
- a published run (``bench published``, ``bench calibrate``; YAML): ``id``, ``rank``,
  ``published.bytes``, ``config``;
- a layout comparison (``bench plan --accuracy``; YAML ``sets:``): ``id``, ``model``, ``gpus``,
  ``gpu``, ``gpus_per_node``, ``seq``, ``gbs``, ``mode``, ``common``, and ``runs`` of ``label``,
  ``overrides`` and ``measured`` (a throughput); or one published step time (YAML): ``id``,
  ``group``, ``published.step_time_s``, ``config``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memtune.config.loaders._guards import load_yaml
from memtune.errors import InputError
from memtune.estimate import Estimate, RankEstimate
from memtune.infile import files_in, read_text
from memtune.jsonl import Between, check_field, read_jsonl
from memtune.limits import MAX_BATCH, MAX_CONFIG_BYTES, MAX_PARALLEL, MAX_RECORD_BYTES, MAX_SEQ_LENGTH
from memtune.numbers import cut, echo

MAX_BENCH_RUNS = 10_000  # runs one benchmark command scores (each is gated and estimated or priced)
SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
METRICS = ("model_tflops_per_gpu", "tokens_per_s_per_gpu")
THROUGHPUT = Between(1e-6, 1e12)  # model TFLOP/s or tokens/s per GPU
STEP_SECONDS = Between(1e-6, 1e7)
RANK = (0, MAX_PARALLEL - 1)
PEAK = (1, MAX_RECORD_BYTES)


def _set_files(paths: list[Path], suffix: str, what: str) -> Iterator[Path]:
    """The files of ``paths`` (a folder: its ``*suffix`` files, subfolders too for YAML)."""
    for path in paths:
        if path.is_dir():
            files = files_in(path, (suffix,), what, recursive=suffix == ".yaml")
            if not files:
                raise InputError(f"{cut(str(path))}: no *{suffix} files of {what}")
            yield from files
        else:
            yield path


class _Counter:
    """Refuses more than MAX_BENCH_RUNS runs in one command."""

    def __init__(self) -> None:
        self.runs = 0

    def add(self, where: str, count: int = 1) -> None:
        self.runs += count
        if self.runs > MAX_BENCH_RUNS:
            raise InputError(f"{where}: more than {MAX_BENCH_RUNS:,} runs in one benchmark; split the set")


def _field(where: str, record: dict[str, Any], name: str, holds: Any, optional: bool = False) -> Any:
    """``record[name]``, checked (``memtune/jsonl.py`` ``check_field``); None when ``optional``
    and absent."""
    if optional and name not in record:
        return None
    check_field(where, record, name, holds)
    return record[name]


def _split(where: str, record: dict[str, Any]) -> str:
    split = _field(where, record, "split", "name", optional=True) or "tune"
    if not SPLIT_NAME.fullmatch(split):
        raise InputError(
            f"{where}: split must be a word of letters, digits, '.', '_' or '-' (at most 32), got {echo(split)}"
        )
    return str(split)


# --- measured runs (JSON Lines) ------------------------------------------------------------------


def read_measured(paths: list[Path], resume: bool = False) -> list[dict[str, Any]]:
    """The measured runs of ``paths``: each record checked, its ``split`` filled in. A record
    holding ``error`` (a run that failed on the GPU) or no ``measured`` is not a run."""
    runs, counter = [], _Counter()
    for file in _set_files(paths, ".jsonl", "measured runs"):
        for number, run in read_jsonl(file):
            where = f"{cut(str(file))}:{number}"
            if not isinstance(run, dict):
                raise InputError(f"{where}: not a JSON object (a measured run is one)")
            if "error" in run or "measured" not in run:
                continue
            runs.append(measured_run(where, run, resume))
            counter.add(where)
    return runs


def measured_run(where: str, run: dict[str, Any], resume: bool = False) -> dict[str, Any]:
    """One measured run's record, checked (README beside the measured set)."""
    _field(where, run, "id", "name")
    _field(where, run, "config", "mapping")
    _field(where, run, "rank", RANK)
    measured = _field(where, run, "measured", "mapping")
    _field(f"{where}: measured", measured, "peak_allocated_bytes", PEAK)
    checked = {**run, "split": _split(where, run)}
    if resume:
        resumed, saved = measured.get("resume"), measured.get("save")
        if not isinstance(resumed, dict) and not isinstance(saved, dict):
            raise InputError(
                f"{where}: neither measured.resume nor measured.save (not a checkpoint round trip)"
            )
        for name, keys in (
            ("resume", ("load_peak_bytes", "first_step_peak_bytes")),
            ("save", ("save_peak_bytes",)),
        ):
            phases = measured.get(name)
            if isinstance(phases, dict):
                for key in keys:
                    _field(f"{where}: measured.{name}", phases, key, PEAK)
                _field(f"{where}: measured.{name}", phases, "format", "name", optional=True)
                _field(f"{where}: measured.{name}", phases, "host_memory_stats", "mapping", optional=True)
    return checked


# --- YAML files: published runs and layout comparisons -------------------------------------------


def _read_yaml(file: Path, what: str) -> dict[str, Any]:
    doc = load_yaml(read_text(file, what, MAX_CONFIG_BYTES), cut(str(file)))
    if not isinstance(doc, dict):
        raise InputError(f"{cut(str(file))}: expected a mapping (a file of {what}), got {type(doc).__name__}")
    return doc


def read_published(paths: list[Path]) -> list[dict[str, Any]]:
    """The published runs of ``paths``, each checked."""
    runs, counter = [], _Counter()
    for file in _set_files(paths, ".yaml", "published runs"):
        where = cut(str(file))
        runs.append(published_run(where, _read_yaml(file, "published runs")))
        counter.add(where)
    return runs


def published_run(where: str, run: dict[str, Any]) -> dict[str, Any]:
    """One published run, checked (benchmarks/published/README.md)."""
    _field(where, run, "id", "name")
    _field(where, run, "rank", RANK)
    published = _field(where, run, "published", "mapping")
    _field(f"{where}: published", published, "bytes", PEAK)
    _field(where, run, "config", "mapping")
    return run


def read_layouts(paths: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The layout comparisons (``sets:``) and the single published step times of ``paths``."""
    sets, runs, counter = [], [], _Counter()
    for file in _set_files(paths, ".yaml", "published layouts"):
        where = cut(str(file))
        doc = _read_yaml(file, "published layouts")
        if "sets" in doc:
            entries = _field(where, doc, "sets", "list")
            for index, entry in enumerate(entries):
                checked = layout_set(f"{where}: sets[{index}]", entry)
                counter.add(where, len(checked["runs"]))
                sets.append(checked)
        else:
            runs.append(step_time_run(where, doc))
            counter.add(where)
    return sets, runs


def layout_set(where: str, entry: object) -> dict[str, Any]:
    """One comparison of layouts (benchmarks/published/layouts/README.md)."""
    if not isinstance(entry, dict):
        raise InputError(f"{where}: must be a mapping (one comparison of layouts), got {echo(entry)}")
    set_id = _field(where, entry, "id", "name")
    where = f"{where} ({cut(set_id, 40)})"
    _field(where, entry, "source", "string", optional=True)
    _field(where, entry, "common", "words", optional=True)
    runs = _field(where, entry, "runs", "list")
    for index, run in enumerate(runs):
        if not isinstance(run, dict):
            raise InputError(
                f"{where}: runs[{index}]: must be a mapping (label, overrides, measured), got {echo(run)}"
            )
        # a run may set the set's model, scale and mode for itself (benchmarks/published/layouts/README.md)
        _layout_fields(f"{where}: runs[{index}]", {**entry, **run})
        _layout_run(f"{where}: runs[{index}]", run)
    # a set is ranked by one throughput: the first of each run's measured figures
    ranked = sorted({next(iter(run["measured"])) for run in runs})
    if len(ranked) > 1:
        raise InputError(
            f"{where}: its runs rank by different throughputs ({', '.join(ranked)}); "
            "put the same one first in every run's measured"
        )
    return entry


def _layout_fields(where: str, fields: dict[str, Any]) -> None:
    """A run's model, cluster, batch and mode, from its set or itself."""
    from memtune.plan.space import MODES

    if not isinstance(fields.get("model"), dict):
        _field(where, fields, "model", "name")
    for name, high in (("gpus", MAX_PARALLEL), ("gpus_per_node", MAX_PARALLEL), ("seq", MAX_SEQ_LENGTH)):
        _field(where, fields, name, (1, high))
    _field(where, fields, "gbs", (1, MAX_BATCH))
    _field(where, fields, "gpu", "name")
    if fields.get("mode") not in MODES:
        raise InputError(f"{where}: mode must be one of {', '.join(MODES)}, got {echo(fields.get('mode'))}")


def _layout_run(where: str, run: dict[str, Any]) -> None:
    _field(where, run, "label", "name")
    _field(where, run, "overrides", "words")
    measured = _field(where, run, "measured", "mapping")
    if not measured or next(iter(measured)) not in METRICS:
        raise InputError(
            f"{where}: measured must start with the throughput ranked, one of {', '.join(METRICS)}; "
            f"got {echo(list(measured)[:3])}"
        )
    for metric in measured:
        if metric not in METRICS:
            raise InputError(f"{where}: measured {echo(metric)}: not a throughput memtune compares")
        _field(f"{where}: measured", measured, metric, THROUGHPUT)


def step_time_run(where: str, doc: dict[str, Any]) -> dict[str, Any]:
    """One published step time (a Megatron-LM functional test)."""
    _field(where, doc, "id", "name")
    _field(where, doc, "group", "name")
    published = _field(where, doc, "published", "mapping")
    _field(f"{where}: published", published, "step_time_s", STEP_SECONDS)
    _field(where, doc, "config", "mapping")
    return doc


# --- evaluating a checked run --------------------------------------------------------------------


def rank_of(est: Estimate, rank: int) -> RankEstimate:
    """The estimate of a run's ``rank``, which must be one of its job's GPUs (called inside
    :func:`evaluating`, which names the run)."""
    if rank >= est.derived.world_size:
        raise InputError(f"rank {rank} is not a rank of its job (world size {est.derived.world_size})")
    return est.rank(rank)


@contextlib.contextmanager
def evaluating(run_id: str) -> Iterator[None]:
    """A context in which the estimator's refusals of a run's config name the run."""
    try:
        yield
    except InputError as exc:
        raise InputError([f"{cut(run_id)}: {line}" for line in exc.problems]) from None
