"""The Python API (``memtune.runtime``, ``memtune.peft``) refuses bad arguments at its boundary
with one ValueError or TypeError naming the argument (issue 29 item 8)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtune.errors import ArgumentError, ArgumentTypeError, InputError
from memtune.peft import LoRA
from memtune.runtime import MemoryMonitor, capture_oom, configure_allocator, write_snapshot
from tests.hostile.conftest import FIXTURE_SETTINGS

HUGE = 10**100


class NoNotes:
    """A stats or device source without the protocol's ``notes``."""

    def sample(self) -> dict[str, int | None]:
        return {}

    def reset_peaks(self) -> None:
        pass


class TextNotes(NoNotes):
    notes = "CUDA missing"


class FailingPath:
    def __fspath__(self) -> str:
        raise RuntimeError("unmounted")


class IntPath:
    def __fspath__(self) -> int:
        return 5


def Linears() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(2, 2))


PROBES: list[tuple[str, Callable[[Path], Any], type[Exception], str]] = [
    # MemoryMonitor
    (
        "gather_every str",
        lambda d: MemoryMonitor(d, gather_every="2"),
        TypeError,
        "gather_every: must be an integer, got '2'",
    ),
    (
        "gather_every float",
        lambda d: MemoryMonitor(d, gather_every=1.5),
        TypeError,
        "gather_every: must be an integer, got 1.5",
    ),
    (
        "gather_every bool",
        lambda d: MemoryMonitor(d, gather_every=True),
        TypeError,
        "gather_every: must be an integer, got True",
    ),
    (
        "gather_every huge",
        lambda d: MemoryMonitor(d, gather_every=HUGE),
        ValueError,
        "gather_every: must be from 1 to 2^40, got an integer of about 100 digits",
    ),
    (
        "margin nan",
        lambda d: MemoryMonitor(d, over_estimate_margin=math.nan),
        ValueError,
        "over_estimate_margin: must be a finite number from 0.0 to 100.0, got nan",
    ),
    (
        "margin inf",
        lambda d: MemoryMonitor(d, over_estimate_margin=math.inf),
        ValueError,
        "over_estimate_margin: must be a finite number from 0.0 to 100.0, got inf",
    ),
    (
        "margin str",
        lambda d: MemoryMonitor(d, over_estimate_margin="0.1"),
        TypeError,
        "over_estimate_margin: must be a number, got '0.1'",
    ),
    (
        "estimate negative",
        lambda d: MemoryMonitor(d, estimate_bytes=-5),
        ValueError,
        "estimate_bytes: must be from 0 to 2^62, got -5",
    ),
    (
        "estimate float",
        lambda d: MemoryMonitor(d, estimate_bytes=1.5e9),
        TypeError,
        "estimate_bytes: must be an integer, got 1500000000.0",
    ),
    (
        "start_step negative",
        lambda d: MemoryMonitor(d, start_step=-1),
        ValueError,
        "start_step: must be from 0 to 2^40, got -1",
    ),
    (
        "out_dir int",
        lambda d: MemoryMonitor(5),
        TypeError,
        "out_dir: must be a path (str or os.PathLike), got 5",
    ),
    (
        "out_dir empty",
        lambda d: MemoryMonitor(""),
        ValueError,
        "out_dir: must be a non-empty path without NUL bytes, got ''",
    ),
    (
        "config NUL",
        lambda d: MemoryMonitor(d, config="a\x00b"),
        ValueError,
        "config: must be a non-empty path without NUL bytes, got 'a\\x00b'",
    ),
    (
        "tensorboard bytes",
        lambda d: MemoryMonitor(d, tensorboard_dir=b"tb"),
        TypeError,
        "tensorboard_dir: must be a path (str or os.PathLike), got b'tb'",
    ),
    (
        "stats object",
        lambda d: MemoryMonitor(d, stats=object()),
        TypeError,
        "stats: must be a stats source (no sample(), reset_peaks()), got <object object at",
    ),
    (
        "both estimates",
        lambda d: MemoryMonitor(d, config="c.yaml", estimate_bytes=1),
        ValueError,
        "give config or estimate_bytes, not both",
    ),
    (
        "stats without notes",
        lambda d: MemoryMonitor(d, stats=NoNotes()),
        TypeError,
        "stats: must be a stats source whose notes is a list of str, got notes=None",
    ),
    (
        "stats notes str",
        lambda d: MemoryMonitor(d, stats=TextNotes()),
        TypeError,
        "stats: must be a stats source whose notes is a list of str, got notes='CUDA missing'",
    ),
    (
        "device without notes",
        lambda d: MemoryMonitor(d, device=NoNotes()),
        TypeError,
        "device: must be a device source whose notes is a list of str, got notes=None",
    ),
    (
        "group int",
        lambda d: MemoryMonitor(d, group=3),
        TypeError,
        "group: must be None or a torch.distributed.ProcessGroup, got 3",
    ),
    (
        "out_dir a file",
        lambda d: MemoryMonitor(d / "file.txt"),
        ValueError,
        "out_dir: must be a directory (or a path to create one), got the file ",
    ),
    (
        "out_dir fspath fails",
        lambda d: MemoryMonitor(FailingPath()),
        TypeError,
        "out_dir: its __fspath__() failed (RuntimeError: 'unmounted')",
    ),
    # capture_oom and write_snapshot
    (
        "snapshot directory a file",
        lambda d: write_snapshot({}, d / "file.txt", 0),
        ValueError,
        "directory: must be a directory (or a path to create one), got the file ",
    ),
    (
        "snapshot not plain data",
        lambda d: write_snapshot(lambda: 0, d, 0),
        TypeError,
        "snapshot: must be a memory snapshot (a dict or list), got <function",
    ),
    (
        "capture out_dir fspath returns int",
        lambda d: capture_oom(IntPath()),
        TypeError,
        "out_dir: its __fspath__() failed (TypeError: ",
    ),
    (
        "max_entries str",
        lambda d: capture_oom(d, max_entries="10"),
        TypeError,
        "max_entries: must be an integer, got '10'",
    ),
    (
        "max_entries huge",
        lambda d: capture_oom(d, max_entries=2**64),
        ValueError,
        "max_entries: must be from 1 to 10000000, got 18446744073709551616",
    ),
    (
        "max_entries nan",
        lambda d: capture_oom(d, max_entries=math.nan),
        TypeError,
        "max_entries: must be an integer, got nan",
    ),
    (
        "capture out_dir list",
        lambda d: capture_oom([d]),
        TypeError,
        "out_dir: must be a path (str or os.PathLike), got [PosixPath(",
    ),
    (
        "snapshot rank traversal",
        lambda d: write_snapshot({}, d, "../../escape"),
        TypeError,
        "rank: must be an integer, got '../../escape'",
    ),
    (
        "snapshot rank negative",
        lambda d: write_snapshot({}, d, -1),
        ValueError,
        "rank: must be from 0 to 999999, got -1",
    ),
    (
        "snapshot rank float",
        lambda d: write_snapshot({}, d, 1.5),
        TypeError,
        "rank: must be an integer, got 1.5",
    ),
    (
        "snapshot directory None",
        lambda d: write_snapshot({}, None, 0),
        TypeError,
        "directory: must be a path (str or os.PathLike), got None",
    ),
    # configure_allocator
    (
        "expandable str",
        lambda d: configure_allocator("no"),
        TypeError,
        "expandable_segments: must be True or False, got 'no'",
    ),
    (
        "gc threshold nan",
        lambda d: configure_allocator(garbage_collection_threshold=math.nan),
        ValueError,
        "garbage_collection_threshold: must be a finite number above 0.0 to 1.0, got nan",
    ),
    (
        "gc threshold str",
        lambda d: configure_allocator(garbage_collection_threshold="0.5"),
        TypeError,
        "garbage_collection_threshold: must be a number, got '0.5'",
    ),
    (
        "split size float",
        lambda d: configure_allocator(max_split_size_mb=512.5),
        TypeError,
        "max_split_size_mb: must be an integer, got 512.5",
    ),
    (
        "split size huge",
        lambda d: configure_allocator(max_split_size_mb=HUGE),
        ValueError,
        "max_split_size_mb: must be from 20 to 2^30, got an integer of about 100 digits",
    ),
    (
        "options str",
        lambda d: configure_allocator(options="expandable_segments:True"),
        TypeError,
        "options: must be a dict of option names to text values, got 'expandable_segments:True'",
    ),
    (
        "options value int",
        lambda d: configure_allocator(options={"max_split_size_mb": 512}),
        TypeError,
        "options['max_split_size_mb']: must be text, got 512",
    ),
    (
        "options value injects",
        lambda d: configure_allocator(options={"max_split_size_mb": "512,backend:x"}),
        ValueError,
        "options['max_split_size_mb']: must be one value without ',' or ':', got '512,backend:x'",
    ),
    (
        "nccl ub str",
        lambda d: configure_allocator(use_nccl_ub="yes"),
        TypeError,
        "use_nccl_ub: must be True or False, got 'yes'",
    ),
    # LoRA
    ("lora dim str", lambda d: LoRA(dim="8"), TypeError, "LoRA dim: must be an integer, got '8'"),
    ("lora dim float", lambda d: LoRA(dim=8.5), TypeError, "LoRA dim: must be an integer, got 8.5"),
    ("lora dim zero", lambda d: LoRA(dim=0), ValueError, "LoRA dim: must be from 1 to 1000000, got 0"),
    (
        "lora alpha huge",
        lambda d: LoRA(alpha=HUGE),
        ValueError,
        "LoRA alpha: must be from 1 to 1000000, got an integer of about 100 digits",
    ),
    (
        "lora dropout nan",
        lambda d: LoRA(dropout=math.nan),
        ValueError,
        "LoRA dropout: must be a finite number from 0.0 to 1.0, got nan",
    ),
    ("lora dropout one", lambda d: LoRA(dropout=1.0), ValueError, "LoRA dropout: must be in [0, 1), got 1.0"),
    (
        "lora targets str",
        lambda d: LoRA(target_modules="linear_qkv"),
        TypeError,
        "LoRA target_modules: must be a tuple of module names, got 'linear_qkv'",
    ),
    (
        "lora targets None",
        lambda d: LoRA(target_modules=None),
        TypeError,
        "LoRA target_modules: must be a tuple of module names, got None",
    ),
    (
        "lora regather str",
        lambda d: LoRA(sequence_parallel_input_regather="yes"),
        TypeError,
        "LoRA sequence_parallel_input_regather: must be True or False, got 'yes'",
    ),
    (
        "lora apply None",
        lambda d: LoRA().apply(None),
        TypeError,
        "model: must be a torch.nn.Module (no parameters(), named_modules()), got None",
    ),
    (
        "lora tp_group str",
        lambda d: LoRA().apply(Linears(), tp_group="tp"),
        TypeError,
        "tp_group: must be None or a torch.distributed.ProcessGroup, got 'tp'",
    ),
    (
        "lora report str",
        lambda d: LoRA().report("model"),
        TypeError,
        "model: must be a torch.nn.Module (no named_modules()), got 'model'",
    ),
    (
        "lora state None",
        lambda d: LoRA().adapter_state_dict(None),
        TypeError,
        "model: must be a torch.nn.Module (no state_dict()), got None",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), [p[1:] for p in PROBES], ids=[p[0] for p in PROBES])
def test_a_bad_argument_is_one_clear_error_naming_it(tmp_path, monkeypatch, call, kind, message):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    (tmp_path / "file.txt").write_text("not a directory\n")
    with pytest.raises(kind) as caught:
        call(tmp_path)
    assert isinstance(caught.value, ArgumentError | ArgumentTypeError | InputError)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ  # refused before anything changed


def test_load_adapter_state_dict_refuses_a_state_that_is_not_a_mapping():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"^state: must be a mapping of names to tensors, got \[1, 2\]$"):
        LoRA().load_adapter_state_dict(torch.nn.Linear(2, 2), [1, 2])


def test_write_snapshot_stays_inside_its_directory(tmp_path):
    inside = tmp_path / "runs"
    written = write_snapshot({"segments": []}, inside, 3)
    assert written == inside / "oom-rank3" / "oom-snapshot-rank3.pickle"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "runs",
        "runs/oom-rank3",
        "runs/oom-rank3/oom-snapshot-rank3.pickle",
    ]


ANY = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=4)
    | st.lists(st.integers(), max_size=2)
)
KEYWORDS: dict[str, Callable[..., Any]] = {
    "gather_every": lambda d, v: MemoryMonitor(d, gather_every=v),
    "over_estimate_margin": lambda d, v: MemoryMonitor(d, over_estimate_margin=v),
    "estimate_bytes": lambda d, v: MemoryMonitor(d, estimate_bytes=v),
    "start_step": lambda d, v: MemoryMonitor(d, start_step=v),
    "max_entries": lambda d, v: capture_oom(d, max_entries=v),
    "rank": lambda d, v: write_snapshot({}, d, v),
    "dim": lambda d, v: LoRA(dim=v),
    "alpha": lambda d, v: LoRA(alpha=v),
    "dropout": lambda d, v: LoRA(dropout=v),
    "target_modules": lambda d, v: LoRA(target_modules=v),
}


@FIXTURE_SETTINGS
@given(argument=st.sampled_from(sorted(KEYWORDS)), value=ANY)
def test_any_value_is_accepted_or_refused_naming_the_argument(tmp_path, argument, value):
    try:
        KEYWORDS[argument](tmp_path, value)
    except (ArgumentError, ArgumentTypeError) as exc:
        assert argument in str(exc) and "\n" not in str(exc)
