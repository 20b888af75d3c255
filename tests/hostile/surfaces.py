"""The third campaign's surfaces as runnable cases (issue 43): the bench sets, snapshot
comparison, plots, ``cluster.network``, ``measure``'s own options, Bridge overrides and recipes,
``fix --write``, ``run --out``, duplicate keys, long words. Each case is a command line over
files :func:`build` writes into a directory, with the exit statuses it may end with.

``tests/hostile/test_surfaces.py`` runs every case in-process and holds it to its promise (one of
those statuses, no traceback, bounded error lines); ``benchmarks/hostile_corpus.py`` runs every
case in a subprocess with CPU, memory and wall-clock limits and reports its CPU seconds and peak
memory.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[2]
SMALL = str(ROOT / "examples" / "llama3-8b-lora.yaml")
BIG = str(ROOT / "examples" / "llama3-70b-sft.yaml")  # does not fit: fix writes a suggestion
MEASURED = json.loads((ROOT / "benchmarks/measured/h200-mcore0.19.2.jsonl").read_text().splitlines()[0])
L405 = (
    "model:\n  preset: llama3.1-405b\n  tensor_model_parallel_size: 8\n  pipeline_model_parallel_size: 16\n"
    "  virtual_pipeline_model_parallel_size: 8\ntrain:\n  micro_batch_size: 1\n  global_batch_size: 64\n"
)
OOM_LOG = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.31 GiB is free.\n"
)


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    statuses: tuple[int, ...] = (2,)


def _snapshot(device: int = 0, frame: str = "/m/model.py") -> dict[str, object]:
    block = {"address": 0, "size": 1 << 20, "state": "active_allocated", "frames": [{"filename": frame, "line": 1, "name": "f"}]}  # fmt: skip
    return {"segments": [{"device": device, "address": 0, "total_size": 1 << 21, "blocks": [block]}], "device_traces": [[]]}  # fmt: skip


def _layouts(run: dict[str, object] | None = None, **entry: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": "t1", "model": "llama3-8b", "gpus": 8, "gpu": "H100-80GB", "gpus_per_node": 8, "seq": 4096,
        "gbs": 8, "mode": "pretrain",
        "runs": [
            {"label": "tp1", "overrides": ["model.tensor_model_parallel_size=1"], "measured": {"model_tflops_per_gpu": 400}},
            {"label": "tp2", "overrides": ["model.tensor_model_parallel_size=2"], "measured": {"model_tflops_per_gpu": 380}},
        ],
    }  # fmt: skip
    if run is not None:
        base["runs"] = [base["runs"][0], run]  # type: ignore[index]
    return {"sets": [{**base, **entry}]}


def _write(path: Path, content: object) -> str:
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    elif path.suffix == ".jsonl":
        path.write_text(json.dumps(content) + "\n", encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(content), encoding="utf-8")
    return str(path)


def _bench_cases(d: Path) -> list[Case]:
    m = MEASURED
    published = {"id": "p1", "rank": 0, "published": {"bytes": 14 << 30}, "config": m["config"]}
    step_time = {"id": "ci1", "group": "g", "published": {"step_time_s": 0.5}, "config": m["config"]}
    fifo_dir = d / "bench-fifo-dir"
    fifo_dir.mkdir()
    _write(fifo_dir / "a.yaml", published)
    os.mkfifo(fifo_dir / "b.yaml")
    os.mkfifo(d / "bench-fifo.jsonl")
    cases = [
        Case("bench-accuracy-fractional-rank", ("bench", "accuracy", _write(d / "a1.jsonl", {**m, "rank": 0.5}))),
        Case("bench-accuracy-rank-beyond-job", ("bench", "accuracy", _write(d / "a2.jsonl", {**m, "rank": 7}))),
        Case("bench-accuracy-negative-bytes", ("bench", "accuracy", _write(d / "a3.jsonl", {**m, "measured": {"peak_allocated_bytes": -1}}))),
        Case("bench-accuracy-split-object", ("bench", "accuracy", "--json", _write(d / "a4.jsonl", {**m, "split": {"x": 1}}))),
        Case("bench-accuracy-config-list", ("bench", "accuracy", _write(d / "a5.jsonl", {**m, "config": [1]}))),
        Case("bench-accuracy-dev-zero", ("bench", "accuracy", "/dev/zero")),
        Case("bench-accuracy-fifo", ("bench", "accuracy", str(d / "bench-fifo.jsonl"))),
        Case("bench-resume-no-phase", ("bench", "resume", _write(d / "r1.jsonl", m))),
        Case("bench-resume-negative-peak", ("bench", "resume", _write(d / "r2.jsonl", {**m, "measured": {**m["measured"], "resume": {"load_peak_bytes": -5, "first_step_peak_bytes": 1}}}))),
        Case("bench-published-ok", ("bench", "published", "--json", _write(d / "p0.yaml", published)), (0,)),
        Case("bench-published-fractional-rank", ("bench", "published", _write(d / "p1.yaml", {**published, "rank": 0.5}))),
        Case("bench-published-negative-bytes", ("bench", "published", _write(d / "p2.yaml", {**published, "published": {"bytes": -9}}))),
        Case("bench-published-duplicate-key", ("bench", "published", _write(d / "p3.yaml", "id: a\nid: b\n"))),
        Case("bench-published-not-mapping", ("bench", "published", _write(d / "p4.yaml", "- 1\n- 2\n"))),
        Case("bench-published-missing-config", ("bench", "published", _write(d / "p5.yaml", {k: v for k, v in published.items() if k != "config"}))),
        Case("bench-published-dev-zero", ("bench", "published", "/dev/zero")),
        Case("bench-published-fifo-in-folder", ("bench", "published", str(fifo_dir))),
        Case("bench-published-alias-bomb", ("bench", "published", _write(d / "p6.yaml", "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(f"a{i}: &a{i} [{', '.join(['*a' + (str(i - 1) if i > 1 else '')] * 10)}]\n" for i in range(1, 9))))),
        Case("bench-plan-accuracy-ok", ("bench", "plan", "--accuracy", _write(d / "l0.yaml", _layouts()), "--json"), (0,)),
        Case("bench-plan-accuracy-gpus-text", ("bench", "plan", "--accuracy", _write(d / "l1.yaml", _layouts(gpus="8")))),
        Case("bench-plan-accuracy-seq-zero", ("bench", "plan", "--accuracy", _write(d / "l2.yaml", _layouts(seq=0)))),
        Case("bench-plan-accuracy-mode", ("bench", "plan", "--accuracy", _write(d / "l3.yaml", _layouts(mode="x")))),
        Case("bench-plan-accuracy-runs-text", ("bench", "plan", "--accuracy", _write(d / "l4.yaml", _layouts(runs="x")))),
        Case("bench-plan-accuracy-model-keys", ("bench", "plan", "--accuracy", _write(d / "l5.yaml", _layouts(model={"bogus": 1}))), (0, 2)),
        Case("bench-plan-accuracy-denormal", ("bench", "plan", "--accuracy", _write(d / "l6.yaml", _layouts({"label": "x", "overrides": [], "measured": {"model_tflops_per_gpu": 5e-324}})))),
        Case("bench-plan-accuracy-metric", ("bench", "plan", "--accuracy", _write(d / "l7.yaml", _layouts({"label": "x", "overrides": [], "measured": {"loss": 1.0}})))),
        Case("bench-plan-accuracy-step-zero", ("bench", "plan", "--accuracy", _write(d / "l8.yaml", {**step_time, "published": {"step_time_s": 0}}))),
        Case("bench-plan-accuracy-step-ok", ("bench", "plan", "--accuracy", _write(d / "l9.yaml", step_time), "--json"), (0,)),
        Case("bench-plan-workers-huge", ("bench", "plan", "--workers", "1000000")),
        Case("bench-plan-seq-zero", ("bench", "plan", "--seq", "0")),
        Case("bench-plan-gpu-empty", ("bench", "plan", "--gpu", "")),
        Case("bench-step-plot-xyz", ("bench", "step", SMALL, "--plot", str(d / "p.xyz"))),
        Case("bench-step-plot-noext", ("bench", "step", SMALL, "--plot", str(d / "noext"))),
        Case("bench-step-plot-dir", ("bench", "step", SMALL, "--plot", f"{d}/")),
        Case("bench-step-plot-device", ("bench", "step", SMALL, "--plot", "/dev/null")),
    ]  # fmt: skip
    return cases


def _snapshot_cases(d: Path) -> list[Case]:
    a = _write(d / "snap-a.pickle", pickle.dumps(_snapshot()))
    b = _write(d / "snap-b.pickle", pickle.dumps(_snapshot(frame="a" * 40 + "!")))
    links = d / "snap-links"
    links.mkdir()
    for rank in range(1024):
        (links / f"rank{rank}.pickle").symlink_to(a)
    odd = d / "snap-odd"
    odd.mkdir()
    _write(odd / "rank0.pickle", pickle.dumps(_snapshot()))
    _write(odd / "rank1.pickle", pickle.dumps(_snapshot()))
    (odd / "rank2.pickle").mkdir()
    sets = _write(d / "snap-sets.pickle", b"\x80\x04](" + b"\x8f" * (8 << 20) + b"e.")
    return [
        Case("snapshot-compare-ok", ("diff", "--snapshots", a, b, "--json"), (0,)),
        Case("snapshot-folder-of-links", ("diff", "--snapshots", str(links))),
        Case("snapshot-folder-non-regular", ("diff", "--snapshots", str(odd))),
        Case("snapshot-negative-device", ("diff", "--snapshots", a, _write(d / "snap-neg.pickle", pickle.dumps(_snapshot(-5))))),
        Case("snapshot-set-bomb", ("diagnose", "--snapshot", sets, "--json")),
        Case("snapshot-set-bomb-compare", ("diff", "--snapshots", a, sets)),
        Case("snapshot-category-backtracking", ("diff", "--snapshots", a, b, "--category", "x=(a+)+$")),
        Case("snapshot-category-bad", ("diff", "--snapshots", a, b, "--category", "x=(")),
        Case("snapshot-all", ("diff", "--snapshots", str(links), "--all")),
    ]  # fmt: skip


def _config_cases(d: Path) -> list[Case]:
    network = yaml.safe_load(Path(SMALL).read_text())
    network.setdefault("cluster", {})["network"] = {"nvlink_gb_per_s": 5e-324, "nic_gbit_per_s": 1e-310}
    fifo = d / "cfg-fifo.yaml"
    os.mkfifo(fifo)
    layout = "model.pipeline_model_parallel_layout=E|" + "t|" * 126 + "L"
    return [
        Case("network-denormal", ("estimate", _write(d / "net.yaml", network), "--json")),
        Case("network-denormal-step", ("bench", "step", str(d / "net.yaml"), "--json")),
        Case("network-denormal-override", ("estimate", SMALL, "cluster.network.nvlink_gb_per_s=1e-320", "--json")),
        Case("yaml-duplicate-key", ("estimate", _write(d / "dup.yaml", "model:\n  preset: llama3-8b\ntrain:\n  micro_batch_size: 1\ntrain:\n  micro_batch_size: 2\n"))),
        Case("bridge-override-duplicate-key", ("estimate", "--recipe", "llama3_8b_pretrain_2gpu_h100_bf16_config", _write(d / "dup-override.yaml", "model:\n  seq_length: 8192\n  seq_length: 4096\n"))),
        Case("json-duplicate-key", ("estimate", _write(d / "dup.json", '{"model": {"preset": "llama3-8b"}, "train": {}, "train": {}}'))),
        Case("override-word-292-bytes", ("estimate", _write(d / "l405.yaml", L405), layout), (0, 1)),
        Case("override-file-directory", ("estimate", SMALL, str(d))),
        Case("override-file-device", ("estimate", SMALL, "/dev/zero")),
        Case("config-fifo", ("estimate", str(fifo))),
        Case("recipes-empty", ("recipes", "")),
        Case("recipes-long-name", ("recipes", "x" * 100_000)),
        Case("check-explain-long", ("check", "--explain", "x" * 100_000)),
        Case("models-empty", ("models", "")),
    ]  # fmt: skip


def _file_cases(d: Path) -> list[Case]:
    config = _write(d / "job.yaml", Path(BIG).read_text())
    log = _write(d / "train.log", OOM_LOG)
    log_png = _write(d / "train-log.png", OOM_LOG)  # a log may have any name
    precious = _write(d / "precious.txt", "the user's\n")
    out = d / "run-out"
    out.mkdir()
    (out / "output.log").symlink_to(precious)
    link = d / "link.pickle"
    link.symlink_to(precious)
    return [
        Case("fix-write-over-oom-log", ("fix", config, "--oom-log", log, "--write", log, "--force")),
        Case("fix-write-through-link", ("fix", config, "--write", str(link), "--force")),
        Case("run-out-link", ("run", "--out", str(out), "--force", "--", "true")),
        Case("measure-snapshot-over-config", ("measure", config, "--rank", "0", "--snapshot", config, "--force")),
        Case("measure-snapshot-missing-dir", ("measure", config, "--rank", "0", "--snapshot", str(d / "no" / "s.pickle"))),
        Case("measure-snapshot-link", ("measure", config, "--rank", "0", "--snapshot", str(link), "--force")),
        Case("measure-snapshot-resume", ("measure", config, "--rank", "0", "--resume", "--snapshot", str(d / "s.pickle"))),
        Case("measure-timeout-nan", ("measure", config, "--rank", "0", "--timeout", "nan")),
        Case("measure-timeout-negative", ("measure", config, "--rank", "0", "--timeout", "-1")),
        Case("plot-over-input", ("diagnose", log_png, "--snapshot", log_png, "--plot", log_png)),
    ]  # fmt: skip


def build(directory: Path) -> list[Case]:
    """Write every case's files under ``directory``; the cases, in a fixed order."""
    directory.mkdir(parents=True, exist_ok=True)
    return (
        _bench_cases(directory)
        + _snapshot_cases(directory)
        + _config_cases(directory)
        + _file_cases(directory)
    )
