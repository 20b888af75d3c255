"""``memtune diff --logs``: two runs' memory reports per rank and step."""

import gzip
import json

from memtune.cli import main
from memtune.regress.logs import ALLOCATED, RESERVED_ONLY, SAME, diff_runs
from memtune.units import MiB


def report(rank: int, step: int, alloc: float, max_alloc: float, reserved: float, max_reserved: float) -> str:
    return (
        f"[Rank {rank}] (after {step} iterations) memory (MB) | allocated: {alloc:.2f} | max allocated: "
        f"{max_alloc:.2f} | reserved: {reserved:.2f} | max reserved: {max_reserved:.2f}"
    )


RUN_A = "\n".join(
    [
        "using world size: 2",
        report(0, 1, 30000, 50000, 52000, 52000),
        report(1, 1, 30000, 48000, 50000, 50000),
        " iteration        2/     100 | lm loss: 2.3",
        report(0, 2, 30000, 50000, 52000, 52000),
        report(1, 2, 30000, 48000, 50000, 50000),
    ]
)
# rank 0 needs 2000 MB more (allocated); rank 1 caches 6000 MB more with the same tensors (reserved only)
RUN_B = "\n".join(
    [
        "[rank0]:" + report(0, 1, 30000, 52000, 54000, 54000),
        "[rank1]:" + report(1, 1, 30000, 48000, 56000, 56000),
        report(0, 2, 30000, 52000, 54000, 54000),
        report(1, 2, 30000, 48000, 56000, 56000),
        report(1, 3, 30000, 48000, 56000, 56000),
    ]
)


def test_growth_is_split_into_allocated_and_reserved_only(tmp_path):
    (tmp_path / "a.log").write_text(RUN_A)
    with gzip.open(tmp_path / "b.log.gz", "wt") as fh:
        fh.write(RUN_B)
    diff = diff_runs(str(tmp_path / "a.log"), str(tmp_path / "b.log.gz"))
    by = {(s.rank, s.step): s for s in diff.steps}
    assert sorted(by) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert by[(0, 2)].kind == ALLOCATED
    assert by[(0, 2)].allocated_delta == 2000 * MiB and by[(0, 2)].reserved_delta == 2000 * MiB
    assert by[(1, 2)].kind == RESERVED_ONLY
    assert by[(1, 2)].allocated_delta == 0 and by[(1, 2)].reserved_delta == 6000 * MiB
    assert [(s.rank, s.step) for s in diff.grown][:2] == [(1, 1), (1, 2)]  # 6000 MB before 2000 MB
    assert diff.only_b == [(1, 3)] and diff.only_a == []


def test_monitor_jsonl_and_the_text_report(tmp_path, capsys):
    (tmp_path / "a.log").write_text(RUN_A)
    run_b = tmp_path / "run_b"
    run_b.mkdir()
    records = [
        {"rank": r, "step": s, "peak_allocated_bytes": a * MiB, "peak_reserved_bytes": b * MiB, "extra": 1}
        for r, s, a, b in [
            (0, 1, 50000, 52000),
            (0, 2, 50010, 52000),
            (1, 1, 48000, 50000),
            (1, 2, 47000, 49000),
        ]
    ]
    (run_b / "monitor.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    assert main(["diff", "--logs", str(tmp_path / "a.log"), str(run_b)]) == 0
    out = capsys.readouterr().out
    assert "2 ranks, 4 (rank, step) pairs; 1 differ beyond noise (64 MiB or 1%)." in out
    diff = diff_runs(str(tmp_path / "a.log"), str(run_b))
    assert {(s.rank, s.step): s.kind for s in diff.steps}[(0, 2)] == SAME  # +10 MB is noise
    assert main(["diff", "--logs", str(run_b), str(tmp_path / "a.log"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1
    assert {(g["rank"], g["step"]): g["change"] for g in data["grown"]} == {(1, 2): ALLOCATED}


def test_text_says_which_grew_and_why(tmp_path, capsys):
    (tmp_path / "a.log").write_text(RUN_A)
    (tmp_path / "b.log").write_text(RUN_B)
    assert main(["diff", "--logs", str(tmp_path / "a.log"), str(tmp_path / "b.log")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2:] == [
        "2 ranks, 4 (rank, step) pairs; 4 differ beyond noise (64 MiB or 1%).",
        "First divergence: step 1, rank 0: allocated +1.95 GiB (48.83 GiB -> 50.78 GiB)",
        "  the allocated peak grew: the job's tensors need more (config, model, library)",
        "Largest difference: step 1, rank 1: reserved +5.86 GiB (48.83 GiB -> 54.69 GiB)",
        "  only the reserved peak grew: the allocator caches more (fragmentation)",
        "Per rank (largest change of each peak, A -> B):",
        "    rank  steps differ   first   allocated    reserved  change",
        "       0      2      2       1   +1.95 GiB   +1.95 GiB  allocated",
        "       1      2      2       1    +0.0 MiB   +5.86 GiB  reserved-only",
        "only in B (rank/step): 1/3",
        "--all lists every rank and step.",
    ]


def test_bad_logs_are_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "a.log").write_text(RUN_A)
    (tmp_path / "empty.log").write_text("nothing here\n")
    assert main(["diff", "--logs", str(tmp_path / "a.log"), str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == f"memtune diff: {tmp_path / 'nope'}: no such file or directory"
    assert main(["diff", "--logs", str(tmp_path / "a.log"), str(tmp_path / "empty.log")]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .startswith(f"memtune diff: {tmp_path / 'empty.log'}: no memory records found")
    )
    (tmp_path / "bad.jsonl").write_text(
        '{"rank": 0, "step": 1, "peak_allocated_bytes": "1", "peak_reserved_bytes": 2}\n'
    )
    assert main(["diff", "--logs", str(tmp_path / "a.log"), str(tmp_path / "bad.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"memtune diff: {tmp_path / 'bad.jsonl'}:1: peak_allocated_bytes must be an integer from 0 to 2^62, got '1'"
    )
