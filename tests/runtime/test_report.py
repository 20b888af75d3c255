"""``memtune report`` over a recorded four-rank run: table, detectors, plot, export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtune.bench.accuracy import evaluate, read_runs
from memtune.check import gate
from memtune.cli import main
from memtune.config import load_job
from memtune.estimate import estimate
from memtune.runtime import MemoryMonitor
from memtune.runtime.records import SCHEMA_VERSION
from memtune.units import GiB, MiB
from tests.runtime.runtime_fakes import FixedDevice, SeriesStats, step_values

CONFIG = Path(__file__).parent / "configs" / "pp2-dp2.yaml"


def write_rank(directory: Path, rank: int, steps: list[dict]) -> None:
    """A rank's file in the documented record format, as another process's monitor writes it."""
    lines = [{"schema_version": SCHEMA_VERSION, "kind": "start", "rank": rank, "time": 0.0, "world_size": 4}]
    for number, values in enumerate(steps, 1):
        record = {
            "schema_version": SCHEMA_VERSION,
            "kind": "step",
            "rank": rank,
            "time": float(number),
            "step": number,
        }
        lines.append({**record, "step_seconds": 1.0, **values})
    (directory / f"memtune-monitor-rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def recorded_run(directory: Path) -> Path:
    # Rank 0: steady at a 10 GiB peak for steps 1-8, resumed from a checkpoint at step 9 with
    # 2 GiB more (peak and reserved), written by two monitor processes appending to one file.
    before = [step_values(10 * GiB, 5 * GiB, 11 * GiB)] * 8
    after = [step_values(12 * GiB, 5 * GiB, 13 * GiB)] * 5
    device = FixedDevice(None, None)
    with MemoryMonitor(directory, stats=SeriesStats(before), device=device) as monitor:
        for _ in before:
            monitor.step()
    with MemoryMonitor(directory, stats=SeriesStats(after), device=device, start_step=8) as monitor:
        monitor.mark_resume()
        for _ in after:
            monitor.step()
    # Rank 1 (the same stage): allocated memory grows by 100 MiB a step from step 3 on.
    write_rank(
        directory,
        1,
        [step_values(int(11.5 * GiB), 5 * GiB + max(0, s - 2) * 100 * MiB, 12 * GiB) for s in range(1, 11)],
    )
    # Ranks 2 and 3 (the second stage): rank 2's allocation retries rise at steps 4 and 6; rank
    # 3 peaks 1 GiB (12.5 %) above rank 2.
    write_rank(directory, 2, [step_values(8 * GiB, 4 * GiB, 9 * GiB, retries=r) for r in (0, 0, 0, 1, 1, 3)])
    write_rank(directory, 3, [step_values(9 * GiB, 4 * GiB, 10 * GiB)] * 6)
    return directory


def test_table_and_findings(tmp_path, capsys):
    run = recorded_run(tmp_path / "mon")
    assert main(["report", str(run), "--config", str(CONFIG), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    est = estimate(gate(load_job(str(CONFIG), []).job))
    rows = {r["rank"]: r for r in report["ranks"]}
    assert {r: (row["pp_rank"], row["steps"], row["peak_allocated_bytes"]) for r, row in rows.items()} == {
        0: (0, 13, 12 * GiB),
        1: (0, 10, int(11.5 * GiB)),
        2: (1, 6, 8 * GiB),
        3: (1, 6, 9 * GiB),
    }
    for rank, row in rows.items():
        assert row["estimate_bytes"] == est.rank(rank).peak_bytes
        assert row["difference_bytes"] == row["peak_allocated_bytes"] - est.rank(rank).peak_bytes
    findings = [(f["kind"], f["rank"], f["steps"]) for f in report["findings"]]
    assert findings == [
        ("resume_jump", 0, [9]),  # peak allocated
        ("resume_jump", 0, [9]),  # peak reserved
        ("growth", 1, [4, 5, 6, 7, 8, 9, 10]),
        ("alloc_retries", 2, [4, 6]),
        ("rank_outlier", 3, []),
    ]
    messages = [f["message"] for f in report["findings"]]
    assert messages[0].startswith(
        "rank 0: peak allocated after the resume at step 9 is 12.00 GiB, 2.00 GiB above the steady state before it (10.00 GiB)"
    )
    assert messages[2].startswith(
        "rank 1: allocated memory kept growing from step 3 to 10 (+0.68 GiB, never given back); it rose at steps 4, 5, 6, 7, 8, 9, 10: "
    )
    assert messages[4].startswith(
        "rank 3: peak allocated 9.00 GiB is 1.00 GiB above its peers (pipeline stage 1: ranks 2, median 8.00 GiB)"
    )


@pytest.mark.parametrize("width", [80, 120])
def test_plot_and_the_rich_table(tmp_path, capsys, monkeypatch, width):
    run = recorded_run(tmp_path / "mon")
    png = tmp_path / "memory.png"
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["report", str(run), "--config", str(CONFIG), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width and line == line.rstrip() for line in lines)
    assert lines[0] == "Measured peak vs estimate per rank, GiB (2^30 bytes)"
    assert lines[1].split() == [
        "rank",
        "pp",
        "steps",
        "allocated",
        "reserved",
        "device",
        "retries",
        "estimate",
        "diff",
    ]
    assert lines[3].split()[:4] == ["0", "0", "13", "12.00"]  # 8 + 5 steps; the peak after the resume
    assert "rank 3: peak allocated 9.00 GiB" in " ".join(lines)


def test_export_measured_is_read_by_bench_accuracy(tmp_path):
    run = recorded_run(tmp_path / "mon")
    exported = tmp_path / "measured.jsonl"
    assert (
        main(["report", str(run), "--config", str(CONFIG), "--export-measured", str(exported), "--json"]) == 0
    )
    runs = read_runs([exported])
    assert [(r["id"], r["rank"]) for r in runs] == [(f"mon-rank{r}", r) for r in range(4)]
    est = estimate(gate(load_job(str(CONFIG), []).job))
    result = evaluate(runs[3])
    assert (result.measured, result.estimated, result.pp_rank) == (9 * GiB, est.rank(3).peak_bytes, 1)
    assert runs[0]["measured"]["iterations"][0] == {
        "iteration": 1,
        "peak_allocated_bytes": 10 * GiB,
        "peak_reserved_bytes": 11 * GiB,
        "allocated_after_step": 5 * GiB,
        "reserved_after_step": 11 * GiB,
        "num_alloc_retries": 0,
        "seconds": runs[0]["measured"]["iterations"][0]["seconds"],
    }


def test_export_without_any_config_is_refused(tmp_path, capsys):
    directory = tmp_path / "mon"
    directory.mkdir()
    write_rank(directory, 0, [step_values(GiB, GiB, GiB)] * 3)
    assert main(["report", str(directory), "--export-measured", str(tmp_path / "x.jsonl")]) == 2
    assert "--export-measured needs the job config" in capsys.readouterr().err


def test_unreadable_directories_are_input_errors(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no memtune-monitor-rank*.jsonl files" in capsys.readouterr().err
    (tmp_path / "memtune-monitor-rank0.jsonl").write_text('{"kind": "step", "rank": 0}\n{"kind": "step"}\n')
    assert main(["report", str(tmp_path)]) == 2
    assert "schema_version None, this memtune reads 1" in capsys.readouterr().err
