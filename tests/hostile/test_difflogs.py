"""``memtune diff --logs``: diagnose's reading guards (issue 29 items 5 and 6) and an output that
leads with where the runs diverge (issue 28 item 6)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtune.diagnose.logscan import CHUNK_BYTES
from memtune.limits import MAX_LINE_BYTES
from memtune.regress.logs import ALLOCATED, RESERVED_ONLY, diff_runs
from memtune.units import GiB, MiB
from tests.hostile.conftest import FIXTURE_SETTINGS, assert_well_behaved, run_cli


def record(rank: int, step: int, allocated: int, reserved: int) -> str:
    return json.dumps(
        {"rank": rank, "step": step, "peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved}
    )


@pytest.fixture
def run_a(tmp_path: Path) -> Path:
    path = tmp_path / "a.jsonl"
    path.write_text(record(0, 1, GiB, 2 * GiB) + "\n")
    return path


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_endless_binary_devices_are_refused_at_once(capsys, run_a, device):
    status, _, err = run_cli(capsys, "diff", "--logs", str(run_a), device)
    assert (status, err) == (2, f"memtune diff: {device}: binary data, not a text log\n")


def test_a_corrupt_gz_is_one_line(capsys, run_a, tmp_path):
    bad = tmp_path / "b.log.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage" * 10)
    status, _, err = run_cli(capsys, "diff", "--logs", str(run_a), str(bad))
    assert status == 2
    assert err == (
        f"memtune diff: {bad}: truncated or corrupt compressed data after 0 bytes (error); "
        "findings before that point are kept\n"
    )


def test_a_cut_gz_keeps_the_records_before_the_cut_and_says_so(capsys, run_a, tmp_path):
    # Records spread over more than one of the tolerant reader's 64 KiB pieces, then cut.
    lines = [record(0, 1, GiB, 2 * GiB)] + [f"filler line {i} " + "x" * 100 for i in range(2_000)]
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    cut = tmp_path / "b.log.gz"
    cut.write_bytes(data[: len(data) - 200])
    status, out, _ = run_cli(capsys, "diff", "--logs", str(run_a), str(cut))
    assert status == 0
    assert f"note: {cut}: truncated or corrupt compressed data after" in " ".join(out.split())


def test_an_endless_line_is_cut_and_the_records_after_it_are_read(tmp_path, run_a):
    b = tmp_path / "b.log"
    with b.open("w") as fh:
        fh.write("x" * (CHUNK_BYTES + 3 * MAX_LINE_BYTES) + "\n")
        fh.write(record(0, 1, 3 * GiB, 4 * GiB) + "\n")
    diff = diff_runs(str(run_a), str(b))
    assert [(s.rank, s.step, s.allocated_delta) for s in diff.steps] == [(0, 1, 2 * GiB)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("7" * 5000, "an integer of 5000 digits (at most 30)"),
        ("1" + "0" * 400, "an integer of 401 digits (at most 30)"),
        ("1e400", "1e400 is out of range for a number"),
        ("NaN", "NaN is not a number memtune reads"),
        ("-1", "peak_allocated_bytes must be an integer from 0 to 2^62, got -1"),
        (str(2**62 + 1), "peak_allocated_bytes must be an integer from 0 to 2^62, got 4611686018427387905"),
        ("1.5", "peak_allocated_bytes must be an integer from 0 to 2^62, got 1.5"),
        ("true", "peak_allocated_bytes must be an integer from 0 to 2^62, got True"),
    ],
)
def test_jsonl_numbers_are_bounded(capsys, run_a, tmp_path, value, message):
    b = tmp_path / "b.jsonl"
    b.write_text('{"rank": 0, "step": 1, "peak_allocated_bytes": ' + value + ', "peak_reserved_bytes": 1}\n')
    status, _, err = run_cli(capsys, "diff", "--logs", str(run_a), str(b))
    assert (status, err) == (2, f"memtune diff: {b}:1: {message}\n")


def test_another_tools_json_line_with_nan_is_not_a_record(tmp_path, run_a):
    b = tmp_path / "b.log"
    b.write_text('{"loss": NaN, "step": 1}\n' + record(0, 1, GiB, 2 * GiB) + "\n")
    assert [(s.rank, s.step) for s in diff_runs(str(run_a), str(b)).steps] == [(0, 1)]


def test_deep_nesting_is_one_line_naming_file_and_line(capsys, run_a, tmp_path):
    b = tmp_path / "b.jsonl"
    b.write_text(
        '{"rank": '
        + "[" * 30_000
        + "]" * 30_000
        + ', "step": 1, "peak_allocated_bytes": 1, "peak_reserved_bytes": 1}\n'
    )
    status, _, err = run_cli(capsys, "diff", "--logs", str(run_a), str(b))
    assert (status, err) == (2, f"memtune diff: {b}:1: lists and objects nested too deeply to read\n")


def test_rank_and_step_are_bounded(capsys, run_a, tmp_path):
    b = tmp_path / "b.jsonl"
    b.write_text(record(-1, 1, 1, 1) + "\n")
    status, _, err = run_cli(capsys, "diff", "--logs", str(run_a), str(b))
    assert (status, err) == (2, f"memtune diff: {b}:1: rank must be an integer from 0 to 999999, got -1\n")
    b.write_text(record(0, 2**41, 1, 1) + "\n")
    status, _, err = run_cli(capsys, "diff", "--logs", str(run_a), str(b))
    assert (status, err) == (2, f"memtune diff: {b}:1: step must be an integer from 0 to 2^40, got {2**41}\n")


def test_megatrons_text_report_is_bounded_like_a_record(capsys, run_a, tmp_path):
    b = tmp_path / "b.log"
    b.write_text(
        "[Rank 0] (after 1 iterations) memory (MB) | allocated: 1 | max allocated: 1"
        + "0" * 25
        + " | reserved: 1 | max reserved: 1\n"
    )
    status, _, err = run_cli(capsys, "diff", "--logs", str(run_a), str(b))
    assert (status, err) == (
        2,
        f"memtune diff: {b}:1: peak_allocated_bytes must be an integer from 0 to 2^62, got an integer of about "
        "32 digits\n",
    )


def four_ranks_forty_steps(tmp_path: Path) -> tuple[Path, Path]:
    """Rank 2 needs 512 MiB more from step 17 on; rank 3 caches 3 GiB more from step 30 on."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    lines_a, lines_b = [], []
    for step in range(1, 41):
        for rank in range(4):
            allocated, reserved = 40 * GiB, 44 * GiB
            lines_a.append(record(rank, step, allocated, reserved))
            if rank == 2 and step >= 17:
                allocated, reserved = allocated + 512 * MiB, reserved + 512 * MiB
            if rank == 3 and step >= 30:
                reserved += 3 * GiB
            lines_b.append(record(rank, step, allocated, reserved))
    a.write_text("\n".join(lines_a) + "\n")
    b.write_text("\n".join(lines_b) + "\n")
    return a, b


def test_the_output_leads_with_the_first_divergence_and_the_largest_difference(capsys, tmp_path):
    a, b = four_ranks_forty_steps(tmp_path)
    status, out, _ = run_cli(capsys, "diff", "--logs", str(a), str(b))
    assert status == 0
    assert out.splitlines()[2:] == [
        "4 ranks, 160 (rank, step) pairs; 35 differ beyond noise (64 MiB or 1%).",
        "First divergence: step 17, rank 2: allocated +0.50 GiB (40.00 GiB -> 40.50 GiB)",
        "  the allocated peak grew: the job's tensors need more (config, model, library)",
        "Largest difference: step 30, rank 3: reserved +3.00 GiB (44.00 GiB -> 47.00 GiB)",
        "  only the reserved peak grew: the allocator caches more (fragmentation)",
        "Per rank (largest change of each peak, A -> B):",
        "    rank  steps differ   first   allocated    reserved  change",
        "       0     40      0       -    +0.0 MiB    +0.0 MiB  unchanged",
        "       1     40      0       -    +0.0 MiB    +0.0 MiB  unchanged",
        "       2     40     24      17   +0.50 GiB   +0.50 GiB  allocated",
        "       3     40     11      30    +0.0 MiB   +3.00 GiB  reserved-only",
        "--all lists every rank and step.",
    ]
    status, out, _ = run_cli(capsys, "diff", "--logs", str(a), str(b), "--all")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 13 + 2 + 160  # the summary, a title and a header, every pair
    assert max(len(line) for line in lines[2:]) <= 80
    assert "      3     30  40.00 GiB -> 40.00 GiB  44.00 GiB -> 47.00 GiB  reserved-only" in lines


def test_json_names_the_divergence_whatever_the_options(capsys, tmp_path):
    a, b = four_ranks_forty_steps(tmp_path)
    _, out, _ = run_cli(capsys, "diff", "--logs", str(a), str(b), "--json")
    data = json.loads(out)
    assert data["first_divergence"] == {
        "rank": 2,
        "step": 17,
        "component": ALLOCATED,
        "delta_bytes": 512 * MiB,
    }
    assert data["largest"] == {"rank": 3, "step": 30, "component": "reserved", "delta_bytes": 3 * GiB}
    assert [r["change"] for r in data["ranks"]] == ["unchanged", "unchanged", ALLOCATED, RESERVED_ONLY]
    assert len(data["steps"]) == 160
    _, with_all, _ = run_cli(capsys, "diff", "--logs", str(a), str(b), "--json", "--all")
    assert json.loads(with_all) == data


def test_many_ranks_show_the_ones_that_changed_most(capsys, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(record(r, 1, 10 * GiB, 10 * GiB) + "\n" for r in range(100)))
    b.write_text("".join(record(r, 1, 10 * GiB + r * 100 * MiB, 10 * GiB) + "\n" for r in range(100)))
    _, out, _ = run_cli(capsys, "diff", "--logs", str(a), str(b))
    assert "The 32 of 100 ranks that changed most (largest change, A -> B):" in out
    lines = out.splitlines()
    header = lines.index("    rank  steps differ   first   allocated    reserved  change")
    shown = [int(line.split()[0]) for line in lines[header + 1 : -1]]
    assert shown == list(range(68, 100))


TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
VALUES = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | TEXT


@FIXTURE_SETTINGS
@given(
    fields=st.dictionaries(
        st.sampled_from(["rank", "step", "peak_allocated_bytes", "peak_reserved_bytes"]), VALUES, max_size=4
    ),
    noise=st.lists(TEXT, max_size=3),
)
def test_any_record_or_line_is_compared_or_refused_in_one_line(capsys, tmp_path, run_a, fields, noise):
    b = tmp_path / "b.log"
    base = {"rank": 0, "step": 1, "peak_allocated_bytes": GiB, "peak_reserved_bytes": GiB}
    b.write_text("\n".join([*noise, json.dumps({**base, **fields})]) + "\n")
    status, _, err = run_cli(capsys, "diff", "--logs", str(run_a), str(b))
    assert_well_behaved(status, err, allowed=(0, 2))
    if status == 2:
        assert len(err.splitlines()) == 1
