import gzip
import io

import pytest

from memtune.diagnose import diagnose
from memtune.diagnose import logscan as scan_module
from memtune.diagnose.logscan import scan, scan_text
from memtune.errors import InputError
from tests.diagnose.diagnose_samples import MSG_211_CAPACITY, MSG_211_FRAGMENTATION


def test_torchrun_prefixes_interleaved_and_wrapped():
    a = MSG_211_FRAGMENTATION
    b = MSG_211_CAPACITY.replace("GPU 0", "GPU 1")
    text = "\n".join(
        [
            "[rank0]: Traceback (most recent call last):",
            f"[rank0]: {a[:150]}",
            f"[rank1]: {b[:90]}",
            f"[rank0]: {a[150:330]}",
            f"[rank1]: {b[90:]}",
            f"[rank0]: {a[330:]}",
        ]
    )
    r = scan_text(text)
    by_rank = {f.where.rank: f for f in r.failures}
    assert sorted(by_rank) == [0, 1]
    assert by_rank[0].where.line == 2 and by_rank[1].where.line == 3
    assert by_rank[0].numbers.unallocated == 50 << 30 and by_rank[0].numbers.device == 0
    assert by_rank[1].numbers.requested == 4 << 30 and by_rank[1].numbers.device == 1
    # the continuation lines were consumed, not read again as separate findings
    assert len(r.failures) == 2


@pytest.mark.parametrize("prefix, rank", [("[default3]:", 3), ("3: ", 3), ("[1,3]<stderr>:", 3)])
def test_other_launcher_prefixes(prefix, rank):
    r = scan_text(f"{prefix}{MSG_211_CAPACITY}\n")
    assert [f.where.rank for f in r.failures] == [rank]


def test_rank_from_file_name_and_directory_input(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank_7.log").write_text("iteration 1\n" + MSG_211_FRAGMENTATION + "\n")
    (tmp_path / "logs" / "rank_8.log").write_text("iteration 1\n")
    (tmp_path / "logs" / "snap.pickle").write_bytes(b"\x80\x04K\x01.")  # not a log: ignored in a directory
    d = diagnose([str(tmp_path / "logs")])
    assert d.verdict.failed_ranks == [7]
    assert [s.name.rsplit("/", 1)[1] for s in d.scan.sources] == ["rank_7.log", "rank_8.log"]


def test_rank_from_a_torchrun_log_dir_tree(tmp_path):
    # torchrun --log-dir writes <dir>/<run>/attempt_<n>/<local rank>/stderr.log without rank prefixes.
    for rank, message in ((0, MSG_211_CAPACITY), (3, MSG_211_FRAGMENTATION)):
        folder = tmp_path / "run1" / "attempt_0" / str(rank)
        folder.mkdir(parents=True)
        (folder / "stderr.log").write_text(message + "\n")
    d = diagnose([str(tmp_path)])
    assert d.verdict.failed_ranks == [0, 3]


def test_gzip_and_stdin(tmp_path, monkeypatch):
    path = tmp_path / "job.log.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(MSG_211_CAPACITY + "\n")
    assert scan([str(path)]).failures[0].numbers.requested == 4 << 30
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(MSG_211_CAPACITY.encode())))
    r = scan(["-"])
    assert r.sources[0].name == "<stdin>" and r.failures[0].numbers.requested == 4 << 30


def test_message_across_a_chunk_boundary(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_module, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(scan_module, "LOOKAHEAD_BYTES", 1024)
    filler = "".join(f"iteration {i} | lm loss 2.0\n" for i in range(1000))
    path = tmp_path / "big.log"
    # a wrapped message whose pieces straddle many chunk edges
    pieces = [MSG_211_FRAGMENTATION[i : i + 80] for i in range(0, len(MSG_211_FRAGMENTATION), 80)]
    path.write_text(filler + "\n".join(pieces) + "\n" + filler)
    r = scan([str(path)])
    assert len(r.failures) == 1
    assert r.failures[0].where.line == 1001
    assert r.failures[0].numbers.unallocated == 50 << 30
    assert r.sources[0].lines == 2000 + len(pieces)


def test_a_line_without_newlines_is_cut_and_memory_stays_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_module, "CHUNK_BYTES", 1 << 16)
    monkeypatch.setattr(scan_module, "LOOKAHEAD_BYTES", 1 << 12)
    path = tmp_path / "one-line.log"
    path.write_bytes(b"x" * (1 << 20) + b" Killed\n")
    r = scan([str(path)])
    assert r.sources[0].bytes_read == (1 << 20) + 8
    assert [f.kind for f in r.failures] == []  # "x…x Killed" is not the shell's bare "Killed" line


def test_binary_empty_and_missing_inputs(tmp_path):
    garbage = tmp_path / "core.dump"
    garbage.write_bytes(bytes(range(256)) * 400)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(InputError) as exc:
        scan([str(garbage)])
    assert exc.value.problems == [f"{garbage}: skipped: binary data, not a text log"]
    r = scan([str(garbage), str(empty)])
    assert [s.note for s in r.sources] == ["skipped: binary data, not a text log", "empty"]
    with pytest.raises(InputError) as exc:
        scan([str(tmp_path / "nope.log")])
    assert exc.value.problems == [f"{tmp_path / 'nope.log'}: cannot open (No such file or directory)"]


def test_invalid_utf8_and_ansi_colours_are_tolerated():
    raw = b"\xff\xfe\x1b[31m" + MSG_211_CAPACITY.encode() + b"\x1b[0m\n"
    r = scan_module.ScanResult()
    report = scan_module.SourceReport("x")
    scan_module._Stream("x", r).run(io.BytesIO(raw), report)
    assert r.failures[0].numbers.requested == 4 << 30


def test_repeated_findings_are_capped(monkeypatch):
    monkeypatch.setattr(scan_module, "KEEP_PER_KIND", 5)
    r = scan_text("gpu1:1:1 [0] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'\n" * 12)
    assert len(r.failures) == 5 and r.suppressed["nccl_oom"] == 7
