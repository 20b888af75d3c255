import json

import pytest

import memtune.cli
from memtune.diagnose import cli as diagnose_cli
from tests.diagnose.diagnose_samples import FIXTURES, MSG_211_FRAGMENTATION


@pytest.fixture
def run(monkeypatch):
    # Only this subcommand: other capabilities may be mid-change in the same tree.
    monkeypatch.setattr(memtune.cli, "_registrars", lambda: [diagnose_cli.register])
    return lambda *argv: memtune.cli.main(["diagnose", *argv])


def test_json_output_and_exit_0(run, tmp_path, capsys):
    log = tmp_path / "rank_3.log"
    log.write_text("step 1\n" + MSG_211_FRAGMENTATION + "\n")
    assert run(str(log), "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["label"] == "fragmentation" and out["confidence"] == "high"
    assert out["failed_ranks"] == [3]
    rank = out["ranks"][0]
    assert rank["evidence"]["line"] == 2 and rank["evidence"]["source"] == str(log)
    assert rank["numbers"]["unallocated"] == 50 << 30 and rank["numbers"]["requested"] == 2 << 30
    assert out["fixes"][0]["changes"] == ["env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]


def test_rich_report_with_snapshot_and_plot(run, tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_text(MSG_211_FRAGMENTATION + "\n")
    png = tmp_path / "m.png"
    snap = FIXTURES / "snapshot-fragmentation-torch2.11.pickle"
    assert run(str(log), "--snapshot", str(snap), "--plot", str(png)) == 0
    out = capsys.readouterr().out
    assert "diagnosis: fragmentation" in out and "largest free block" in out and "GiB = 2^30 bytes" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_snapshot_alone(run, capsys):
    assert run("--snapshot", str(FIXTURES / "snapshot-fragmentation-torch2.11.pickle"), "--json") == 0
    assert json.loads(capsys.readouterr().out)["label"] == "fragmentation"


def test_nothing_found_exits_1(run, tmp_path):
    log = tmp_path / "fine.log"
    log.write_text("iteration 1 | lm loss 2.0\n")
    assert run(str(log)) == 1


def test_unreadable_inputs_exit_2_with_one_line_each(run, tmp_path, capsys):
    assert run(str(tmp_path / "missing.log")) == 2
    assert (
        capsys.readouterr().err
        == f"memtune diagnose: {tmp_path / 'missing.log'}: cannot open (No such file or directory)\n"
    )
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(b"cos\nsystem\n(Vtrue\ntR.")
    assert run("--snapshot", str(evil)) == 2
    assert "references os.system" in capsys.readouterr().err
    assert run() == 2
    assert run(str(tmp_path), "--plot", "x.png") == 2
