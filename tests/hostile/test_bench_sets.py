"""Issue 43 item 7: the bench sets' formats (measured, resume, published, layout comparisons,
published step times) are checked where they are read. Property tests mutate a valid record's
fields into any value, drop them, or add unknown ones: each run ends in a report whose --json is
JSON, or in one line naming the file and the field; never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile.conftest import FIXTURE_SETTINGS, assert_well_behaved, run_cli

ROOT = Path(__file__).parents[2]
MEASURED = json.loads((ROOT / "benchmarks/measured/h200-mcore0.19.2.jsonl").read_text().splitlines()[0])
RESUMED = json.loads((ROOT / "benchmarks/measured/resume/h200-mcore0.19.2.jsonl").read_text().splitlines()[0])
PUBLISHED = {
    "id": "p1",
    "rank": 0,
    "published": {"metric": "peak", "bytes": 14_000_000_000},
    "config": MEASURED["config"],
}
LAYOUTS = {
    "sets": [
        {
            "id": "t1",
            "model": "llama3-8b",
            "gpus": 8,
            "gpu": "H100-80GB",
            "gpus_per_node": 8,
            "seq": 4096,
            "gbs": 8,
            "mode": "pretrain",
            "common": ["train.micro_batch_size=1"],
            "runs": [
                {
                    "label": "tp1",
                    "overrides": ["model.tensor_model_parallel_size=1"],
                    "measured": {"model_tflops_per_gpu": 400},
                },
                {
                    "label": "tp2",
                    "overrides": ["model.tensor_model_parallel_size=2"],
                    "measured": {"model_tflops_per_gpu": 380},
                },
            ],
        }
    ]
}
STEP_TIME = {
    "id": "mlm-ci-speed-tiny",
    "group": "tiny",
    "published": {"metric": "iteration-time", "step_time_s": 0.5},
    "config": {**MEASURED["config"], "train": {"global_batch_size": 8}},
}

ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 7, 2**62, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([5e-324, 1e-310, 1e308, -0.0, 0.5, 1.5]),
    st.text(max_size=8),
    st.sampled_from(["", "x" * 300, "tune", "holdout", "../x", "a\nb", "\x00", "model_tflops_per_gpu"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def paths_of(record: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every key path of a record, the config's own keys excluded (the schema checks those)."""
    found: list[tuple[str, ...]] = []
    stack: list[tuple[Any, tuple[str, ...]]] = [(record, ())]
    while stack:
        value, path = stack.pop()
        if path and path[-1] == "config":
            found.append(path)
            continue
        if isinstance(value, dict):
            for key, child in value.items():
                found.append((*path, key))
                stack.append((child, (*path, key)))
        elif isinstance(value, list):
            for index, child in enumerate(value):
                stack.append((child, (*path, index)))
    return found


@st.composite
def mutated(draw: st.DrawFn, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with one to three fields replaced by any value, deleted, or a field added."""
    data = json.loads(json.dumps(record))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths_of(data)))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(ANY)
        else:
            parent[path[-1]] = draw(ANY)
        if not isinstance(data, dict) or not paths_of(data):
            break
    return data


def assert_report_or_one_line(status: int, out: str, err: str, file: Path, record: object) -> None:
    """A report whose --json is JSON, or one line per problem, each naming the file or the run."""
    assert_well_behaved(status, err, allowed=(0, 2))
    if status == 0:
        json.loads(out, parse_constant=lambda name: pytest.fail(f"--json printed {name}, which is not JSON"))
        return
    names = [str(file)[:40]]
    sets = record.get("sets") if isinstance(record, dict) else None
    for doc in (record, *(sets if isinstance(sets, list) else [])):
        if isinstance(doc, dict) and isinstance(doc.get("id"), str):
            names.append(doc["id"][:40])
    for line in err.splitlines():
        assert any(f"memtune bench: {name}" in line for name in names), (line, names)


def write_jsonl(path: Path, record: object) -> Path:
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def write_yaml(path: Path, doc: object) -> Path:
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


# Each format: a valid record, how its file is written, and the benchmark that reads it.
FORMATS = {
    "measured": (MEASURED, "runs.jsonl", ("accuracy",)),
    "resume": (RESUMED, "runs.jsonl", ("resume",)),
    "published": (PUBLISHED, "run.yaml", ("published",)),
    "layout comparison": (LAYOUTS, "sets.yaml", ("plan", "--accuracy")),
    "published step time": (STEP_TIME, "run.yaml", ("plan", "--accuracy")),
}


@pytest.mark.parametrize("format_name", sorted(FORMATS))
@FIXTURE_SETTINGS
@given(data=st.data())
def test_any_record_gives_a_report_or_one_line_per_problem(tmp_path, capsys, format_name, data):
    valid, name, benchmark = FORMATS[format_name]
    record = data.draw(mutated(valid))
    write = write_jsonl if name.endswith(".jsonl") else write_yaml
    file = write(tmp_path / name, record)
    assert_report_or_one_line(*run_cli(capsys, "bench", *benchmark, str(file), "--json"), file, record)


# --- the campaign's cases, one by one ------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rank": 0.5}, "rank must be an integer from 0 to 999999, got 0.5"),
        ({"rank": 5}, "p1: rank 5 is not a rank of its job (world size 1)"),
        ({"published": {"bytes": -5}}, "published: bytes must be an integer from 1 to 2^62, got -5"),
        (
            {"published": {"bytes": 1.5e10}},
            "published: bytes must be an integer from 1 to 2^62, got 15000000000.0",
        ),
        ({"config": None}, "config must be a mapping, got None"),
        ({"id": ["x"]}, "id must be a text of 1 to 200 printable characters, got ['x']"),
    ],
)
def test_published_fields_are_checked(capsys, tmp_path, change, message):
    file = write_yaml(tmp_path / "run.yaml", {**PUBLISHED, **change})
    status, _, err = run_cli(capsys, "bench", "published", str(file))
    assert status == 2
    assert err.strip() in (f"memtune bench: {file}: {message}", f"memtune bench: {message}")


def test_a_split_reaches_json_only_as_a_checked_word(capsys, tmp_path):
    file = write_jsonl(tmp_path / "runs.jsonl", {**MEASURED, "split": {"$ref": "x"}})
    status, out, err = run_cli(capsys, "bench", "accuracy", str(file), "--json")
    assert status == 2 and '"runs"' not in out
    assert err.startswith(f"memtune bench: {file}:1: split must be a text of 1 to 200 printable characters")


@pytest.mark.parametrize("benchmark", [("published",), ("plan", "--accuracy"), ("accuracy",)])
def test_devices_and_pipes_are_refused_at_once(capsys, tmp_path, benchmark):
    fifo = tmp_path / "x.yaml"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        status, _, err = run_cli(capsys, "bench", *benchmark, path)
        assert status == 2 and ("is a device" in err or "is a pipe" in err or "not a regular file" in err), (
            err
        )


def test_a_folder_entry_that_is_a_pipe_is_named(capsys, tmp_path):
    write_yaml(tmp_path / "a.yaml", PUBLISHED)
    os.mkfifo(tmp_path / "b.yaml")
    status, _, err = run_cli(capsys, "bench", "published", str(tmp_path))
    assert (status, err) == (
        2,
        f"memtune bench: {tmp_path / 'b.yaml'}: is a pipe, not a file of published runs\n",
    )


def test_a_measured_throughput_that_would_divide_to_infinity_is_refused(capsys, tmp_path):
    doc = json.loads(json.dumps(LAYOUTS))
    doc["sets"][0]["runs"][1]["measured"]["model_tflops_per_gpu"] = 5e-324
    file = write_yaml(tmp_path / "sets.yaml", doc)
    status, _, err = run_cli(capsys, "bench", "plan", "--accuracy", str(file))
    assert (status, err) == (
        2,
        f"memtune bench: {file}: sets[0] (t1): runs[1]: measured: model_tflops_per_gpu must be a number from "
        "1e-06 to 1e+12, got 5e-324\n",
    )
