"""Issue 43 items 5 and 6: reading and comparing snapshots is bounded by the input's size, whatever
the pickle asks for, however a folder is linked, and whatever pattern a user gives."""

from __future__ import annotations

import io
import os
import pickle
import tracemalloc
from pathlib import Path

import pytest

from memtune.diagnose import compare
from memtune.diagnose import snapshot as snapshot_module
from memtune.diagnose.snapshot import _check_opcodes, load_plain_pickle, read_snapshot
from memtune.errors import InputError
from memtune.limits import MAX_SNAPSHOT_MEMORY_PER_BYTE, MIN_SNAPSHOT_MEMORY
from memtune.numbers import cut
from tests.hostile.conftest import run_cli


def bombs(count: int) -> dict[str, bytes]:
    """Pickles of ``count`` opcodes that each build an object: empty sets (216 bytes each), empty
    dicts (64), and one-element tuples of one memoized value (48 and a reference)."""
    return {
        "sets": b"\x80\x04](" + b"\x8f" * count + b"e.",
        "dicts": b"\x80\x04](" + b"}" * count + b"e.",
        "tuples": b"\x80\x04N\x94](" + b"h\x00\x85" * (count // 3) + b"e.",
    }


# 8 MiB of them: 1.8 GiB of sets, 0.6 GiB of dicts unpickled.
BOMBS = {name: data for name, data in bombs(8 << 20).items() if name != "tuples"}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_pickle_that_would_take_more_memory_than_its_size_allows_is_refused_before_loading(
    name, monkeypatch
):
    def never(*args: object) -> None:
        raise AssertionError("the unpickler ran")

    monkeypatch.setattr(snapshot_module, "_PlainDataUnpickler", never)  # refused from the opcodes alone
    with pytest.raises(InputError) as refused:
        load_plain_pickle(BOMBS[name], "bomb.pickle")
    assert refused.value.problems[0].startswith("bomb.pickle: unpickling it would take more than ")
    assert f"more than {MAX_SNAPSHOT_MEMORY_PER_BYTE} times its size" in refused.value.problems[0]


def test_the_count_bounds_what_unpickling_really_takes():
    """The estimate is never below what the objects take (checked by tracemalloc), so the limit
    bounds the memory; a real snapshot's shape passes with room."""
    small = bombs(64 << 10)
    realistic = pickle.dumps(
        {
            "segments": [
                {
                    "device": 0,
                    "address": i << 21,
                    "total_size": 1 << 21,
                    "blocks": [
                        {
                            "address": i << 21,
                            "size": 1 << 20,
                            "state": "active_allocated",
                            "frames": [
                                {"filename": f"/m/layer{i % 7}.py", "line": i % 300, "name": "forward"}
                            ],
                        }
                    ],
                }
                for i in range(2000)
            ]
        },
        protocol=4,
    )
    for data in (*small.values(), realistic):
        estimate = _check_opcodes(data)
        tracemalloc.start()
        loaded = pickle.Unpickler(io.BytesIO(data)).load()
        used = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del loaded
        assert estimate >= used
    assert _check_opcodes(realistic) < MAX_SNAPSHOT_MEMORY_PER_BYTE * len(realistic) + MIN_SNAPSHOT_MEMORY
    assert _check_opcodes(realistic) < MAX_SNAPSHOT_MEMORY_PER_BYTE * len(realistic) / 1.5


def snapshot(device: int = 0) -> dict[str, object]:
    block = {"address": 0, "size": 1 << 20, "state": "active_allocated", "frames": [{"filename": "a" * 40 + "!", "line": 1, "name": "f"}]}  # fmt: skip
    return {"segments": [{"device": device, "address": 0, "total_size": 1 << 21, "blocks": [block]}], "device_traces": [[]]}  # fmt: skip


def test_a_negative_device_is_a_corrupt_file(capsys, tmp_path):
    (tmp_path / "a.pickle").write_bytes(pickle.dumps(snapshot(-3)))
    (tmp_path / "b.pickle").write_bytes(pickle.dumps(snapshot()))
    status, _, err = run_cli(
        capsys, "diff", "--snapshots", str(tmp_path / "a.pickle"), str(tmp_path / "b.pickle")
    )
    assert (status, err) == (2, "memtune diff: snapshot: a device index of -3; the file is corrupt\n")


def test_a_folder_of_links_to_one_snapshot_is_refused_at_once(capsys, tmp_path):
    one = tmp_path / "one.pickle"
    one.write_bytes(pickle.dumps(snapshot()))
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(1024):
        (folder / f"rank{rank}.pickle").symlink_to(one)
    status, _, err = run_cli(capsys, "diff", "--snapshots", str(folder))
    assert status == 2
    assert err == (
        f"memtune diff: {cut(str(folder / 'rank1.pickle'))} and {cut(str(folder / 'rank0.pickle'))} are the "
        "same file; give each snapshot once\n"
    )


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir, lambda p: os.symlink("/nonexistent", p)])
def test_a_folder_entry_that_is_not_a_file_is_named(capsys, tmp_path, make):
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.pickle").write_bytes(pickle.dumps(snapshot()))
    odd = tmp_path / "rank2.pickle"
    make(odd)
    status, _, err = run_cli(capsys, "diff", "--snapshots", str(tmp_path))
    assert (
        status == 2
        and err.startswith(f"memtune diff: {odd}: is a")
        and "not a file of a memory snapshot" in err
    )


def test_a_snapshot_fifo_nobody_writes_is_not_waited_on_forever(tmp_path, monkeypatch):
    from memtune import infile

    monkeypatch.setattr(infile, "FIFO_WAIT_SECONDS", 0.1)
    fifo = tmp_path / "s.pickle"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="a pipe nothing wrote to in 0.1 s"):
        read_snapshot(fifo)


def pair(directory: Path) -> tuple[str, str]:
    for name in ("a", "b"):
        (directory / f"{name}.pickle").write_bytes(pickle.dumps(snapshot()))
    return str(directory / "a.pickle"), str(directory / "b.pickle")


def test_a_backtracking_category_stops_at_its_budget(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "MAX_PATTERN_SECONDS", 0.2)
    status, _, err = run_cli(capsys, "diff", "--snapshots", *pair(tmp_path), "--category", "x=(a+)+$")
    assert (status, err) == (
        2,
        "memtune diff: --category x=(a+)+$: took more than 0.2 CPU second on one stack (nested repetition such "
        "as (a+)+ backtracks without end); simplify the pattern\n",
    )


def test_a_linear_category_is_untouched_by_the_budget(capsys, tmp_path):
    status, out, _ = run_cli(capsys, "diff", "--snapshots", *pair(tmp_path), "--category", "mine=a+!")
    assert status == 0 and "mine" in out
