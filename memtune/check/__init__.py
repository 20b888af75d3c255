"""``memtune check``: find configurations that would fail at start-up, and memory-tuning
settings that silently do nothing, before a job waits in a queue.

:func:`gate` is the only way to a :class:`CheckedJob`, which every other command requires, so a
config is refused with the same messages everywhere.
"""

from __future__ import annotations

from memtune.check.finding import ERROR, INFO, WARNING, Finding
from memtune.check.gate import CheckedJob, gate, run_checks

__all__ = ["ERROR", "INFO", "WARNING", "CheckedJob", "Finding", "gate", "run_checks"]


import sys as _sys

from memtune.entry import EntryModule as _EntryModule

_sys.modules[__name__].__class__ = _EntryModule  # memtune.check(config): memtune/api.py
