"""``memtune report`` on monitor records whose fields are wrong: one line naming file:line and the
field, exit 2 (issue 29 item 6); and the one JSONL reader it shares with ``bench accuracy``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtune.bench.accuracy import read_runs
from memtune.errors import InputError
from memtune.jsonl import read_jsonl
from memtune.limits import MAX_JSONL_LINE_BYTES, MAX_PARALLEL
from tests.hostile.conftest import FIXTURE_SETTINGS, assert_well_behaved, run_cli

START = {"schema_version": 1, "kind": "start", "rank": 0, "time": 0.0, "world_size": 1}
STEP = {
    "schema_version": 1,
    "kind": "step",
    "rank": 0,
    "time": 1.0,
    "step": 1,
    "peak_allocated_bytes": 1 << 30,
}


def write_records(directory: Path, *records: dict[str, object] | str) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    (directory / "memtune-monitor-rank0.jsonl").write_text("".join(line + "\n" for line in lines))
    return directory / "memtune-monitor-rank0.jsonl"


BAD_STEPS = [
    ({"step": "3"}, "step must be an integer from 0 to {step}, got '3'"),
    ({"step": None}, "step must be an integer from 0 to {step}, got None"),
    ({"step": -1}, "step must be an integer from 0 to {step}, got -1"),
    ({"step": True}, "step must be an integer from 0 to {step}, got True"),
    ({"rank": 1.5}, "rank must be an integer from 0 to {rank}, got 1.5"),
    ({"rank": [0]}, "rank must be an integer from 0 to {rank}, got [0]"),
    (
        {"peak_allocated_bytes": -5},
        "peak_allocated_bytes must be an integer from 0 to {bytes} or null, got -5",
    ),
    (
        {"peak_reserved_bytes": 1.5e9},
        "peak_reserved_bytes must be an integer from 0 to {bytes} or null, got 1500000000.0",
    ),
    (
        {"reserved_bytes": {"a": 1}},
        "reserved_bytes must be an integer from 0 to {bytes} or null, got {{'a': 1}}",
    ),
    ({"step_seconds": "fast"}, "step_seconds must be a finite number of at least 0 or null, got 'fast'"),
    ({"step_seconds": -1.0}, "step_seconds must be a finite number of at least 0 or null, got -1.0"),
    ({"kind": "tick"}, "kind 'tick' is not one of start, step, gather, event"),
    ({"kind": 3}, "kind 3 is not one of start, step, gather, event"),
]


@pytest.mark.parametrize(("change", "message"), BAD_STEPS)
def test_a_bad_field_is_one_line_naming_file_line_and_field(capsys, tmp_path, change, message):
    file = write_records(tmp_path, START, {**STEP, **change})
    status, out, err = run_cli(capsys, "report", str(tmp_path))
    expected = message.format(step="2^40", rank=MAX_PARALLEL - 1, bytes="2^62")
    assert (status, out, err) == (2, "", f"memtune report: {file}:2: {expected}\n")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"schema_version": 1, "kind": "step", "rank": 0, "step": 1, "peak_allocated_bytes": NaN}',
            "NaN is not a number memtune reads",
        ),
        (
            '{"schema_version": 1, "kind": "step", "rank": 0, "step": 1, "peak_allocated_bytes": Infinity}',
            "Infinity is not a number memtune reads",
        ),
        (
            '{"schema_version": 1, "kind": "step", "rank": 0, "step": 1, "step_seconds": 1e400}',
            "1e400 is out of range for a number",
        ),
        (
            '{"schema_version": 1, "kind": "step", "rank": 0, "step": 1' + ', "x": ' + "7" * 5000 + "}",
            "an integer of 5000 digits (at most 30)",
        ),
    ],
)
def test_numbers_json_allows_but_no_record_holds_are_refused(capsys, tmp_path, line, message):
    file = write_records(tmp_path, START, line, STEP)
    status, _, err = run_cli(capsys, "report", str(tmp_path))
    assert (status, err) == (2, f"memtune report: {file}:2: {message}\n")


def test_a_torn_last_line_is_skipped_but_a_torn_middle_line_is_refused(capsys, tmp_path):
    write_records(tmp_path, START, STEP, '{"schema_version": 1, "kind": "st')
    status, out, _ = run_cli(capsys, "report", str(tmp_path))
    assert status == 0 and "rank" in out
    file = write_records(tmp_path, START, '{"schema_version": 1, "kind": "st', STEP)
    status, _, err = run_cli(capsys, "report", str(tmp_path))
    assert (status, err) == (2, f"memtune report: {file}:2: invalid JSON (Unterminated string starting at)\n")


def test_a_line_without_an_end_is_read_up_to_the_cap_only(tmp_path):
    file = tmp_path / "big.jsonl"
    file.write_bytes(b"[" + b"1," * (MAX_JSONL_LINE_BYTES // 2))
    with pytest.raises(InputError, match=r"big\.jsonl:1: line longer than 16 MiB$"):
        list(read_jsonl(file))


def test_bench_accuracy_reads_through_the_same_reader(tmp_path):
    file = tmp_path / "runs.jsonl"
    file.write_text('{"id": "a", "config": {}, "rank": 0, "measured": {"peak_allocated_bytes": 1}}\n[1, 2]\n')
    with pytest.raises(InputError, match=r"runs\.jsonl:2: not a JSON object \(a measured run is one\)$"):
        read_runs([file])
    file.write_text('{"id": "a", "measured": {"peak_allocated_bytes": ' + "9" * 40 + "}}\n")
    with pytest.raises(InputError, match=r"runs\.jsonl:1: an integer of 40 digits \(at most 30\)$"):
        read_runs([file])


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(
    [
        "kind",
        "rank",
        "step",
        "step_seconds",
        "peak_allocated_bytes",
        "pp_rank",
        "estimate_bytes",
        "config",
        "event",
        "world_size",
        "allocated_bytes",
    ]
)


@FIXTURE_SETTINGS
@given(
    changes=st.dictionaries(FIELDS, JSON_VALUES, max_size=4),
    kind=st.sampled_from(["start", "step", "gather", "event"]),
)
def test_any_record_is_reported_or_refused_in_one_line(capsys, tmp_path, changes, kind):
    write_records(tmp_path, START, {**STEP, "kind": kind, **changes}, STEP)
    status, _, err = run_cli(capsys, "report", str(tmp_path))
    assert_well_behaved(status, err, allowed=(0, 2))
    if status == 2:
        assert len(err.splitlines()) == 1 and ".jsonl:2: " in err


def test_records_of_ranks_the_config_does_not_have_are_refused(capsys, tmp_path):
    config = "tests/runtime/configs/pp2-dp2.yaml"  # world size 4
    start, step = {**START, "rank": 12}, {**STEP, "rank": 12}
    (tmp_path / "memtune-monitor-rank12.jsonl").write_text(json.dumps(start) + "\n" + json.dumps(step) + "\n")
    status, _, err = run_cli(capsys, "report", str(tmp_path), "--config", config)
    assert (status, err) == (
        2,
        f"memtune report: --config {config}: its world size is 4, but {tmp_path} has records of rank 12 "
        "(records of another job?)\n",
    )


def test_plot_into_a_directory_and_an_existing_export_are_refused_before_reading(capsys, tmp_path):
    write_records(tmp_path, START, STEP)
    status, _, err = run_cli(capsys, "report", str(tmp_path), "--plot", str(tmp_path))
    assert (status, err) == (
        2,
        f"memtune report: --plot {tmp_path}: the file name must end in .png, .pdf, .svg (the extension picks "
        "the format)\n",
    )
    export = tmp_path / "measured.jsonl"
    export.write_text("mine\n")
    config = "tests/runtime/configs/pp2-dp2.yaml"
    status, _, err = run_cli(
        capsys, "report", str(tmp_path), "--config", config, "--export-measured", str(export)
    )
    assert (status, err) == (
        2,
        f"memtune report: --export-measured {export}: already exists (--force replaces it)\n",
    )
    assert export.read_text() == "mine\n"
    argv = ("report", str(tmp_path), "--config", config, "--export-measured", str(export), "--force")
    status, _, _ = run_cli(capsys, *argv)
    assert status == 0 and json.loads(export.read_text().splitlines()[0])["rank"] == 0


def test_a_pipe_among_the_records_is_refused_not_waited_on(capsys, tmp_path):
    fifo = tmp_path / "memtune-monitor-rank0.jsonl"
    os.mkfifo(fifo)
    status, _, err = run_cli(capsys, "report", str(tmp_path))
    assert (status, err) == (2, f"memtune report: {fifo}: not a regular file\n")
