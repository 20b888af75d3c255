"""Opt-in OOM capture: bounded allocation history, and the failing rank's snapshot on OOM.

::

    with capture_oom("runs/mem"):          # or @capture_oom("runs/mem") on the training function
        train()

On ``torch.OutOfMemoryError`` the allocator's snapshot (segments, blocks, the last
``max_entries`` allocation events with Python stacks) is written to
``DIR/oom-rank{R}/oom-snapshot-rank{R}.pickle`` through a temporary file and a rename, so a
reader never sees half a file, and the exception propagates unchanged. ``memtune diagnose
--snapshot`` reads it.
"""

from __future__ import annotations

import os
import pickle
import sys
from contextlib import ContextDecorator
from pathlib import Path
from typing import Any

from memtune import apicheck
from memtune.errors import ArgumentTypeError
from memtune.limits import MAX_PARALLEL
from memtune.numbers import echo
from memtune.outfile import write_atomically
from memtune.runtime.monitor import default_output

DEFAULT_MAX_ENTRIES = 100_000  # allocation events kept; each holds a Python stack (a few KB)
MAX_HISTORY_ENTRIES = 10_000_000  # tens of GB of stacks; torch's C++ count overflows far above


def snapshot_path(directory: str | os.PathLike[str], rank: int) -> Path:
    # A rank is a number, so the file stays inside ``directory`` (a rank of "../x" would not).
    apicheck.integer("rank", rank, 0, MAX_PARALLEL - 1)
    return apicheck.directory("directory", directory) / f"oom-rank{rank}" / f"oom-snapshot-rank{rank}.pickle"


def write_snapshot(snapshot: Any, directory: str | os.PathLike[str], rank: int) -> Path:
    """Pickle ``snapshot`` to :func:`snapshot_path` atomically: a temporary file in the same
    directory, then ``os.replace``; on failure nothing is left behind."""
    if not isinstance(snapshot, dict | list):  # what torch.cuda.memory._snapshot() returns
        raise ArgumentTypeError(f"snapshot: must be a memory snapshot (a dict or list), got {echo(snapshot)}")
    target = snapshot_path(directory, rank)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(
        target, lambda handle: pickle.dump(snapshot, handle, protocol=pickle.HIGHEST_PROTOCOL), replace=True
    )
    return target


def _rank() -> int:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return int(os.environ.get("RANK", "0"))


class capture_oom(ContextDecorator):
    """Record allocation history (at most ``max_entries`` events) while the block runs; on an
    OOM write this rank's snapshot under ``out_dir`` and re-raise. Without CUDA it records
    nothing and ``active`` is False."""

    def __init__(self, out_dir: str | os.PathLike[str] | None = None, max_entries: int = DEFAULT_MAX_ENTRIES):
        apicheck.integer("max_entries", max_entries, 1, MAX_HISTORY_ENTRIES)
        if out_dir is not None:
            apicheck.directory("out_dir", out_dir)
        self.out_dir = Path(out_dir if out_dir is not None else default_output())
        self.max_entries = max_entries
        self.active = False
        self.written: Path | None = None

    def __enter__(self) -> capture_oom:
        import torch

        self.active = torch.cuda.is_available()
        if self.active:
            torch.cuda.memory._record_memory_history(
                enabled="all", stacks="python", max_entries=self.max_entries
            )
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        import torch

        if not self.active:
            return
        try:
            if exc_type is not None and issubclass(exc_type, torch.OutOfMemoryError):
                self.written = write_snapshot(torch.cuda.memory._snapshot(), self.out_dir, _rank())
                print(f"memtune: OOM snapshot written to {self.written}", file=sys.stderr)
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
            self.active = False
        # Returning None lets the exception propagate.
