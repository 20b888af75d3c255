"""``memtune check``: find configurations that would fail at start-up, and memory-tuning
settings that silently do nothing, before a job waits in a queue.

:func:`gate` is the only way to a :class:`CheckedJob`, which every other command requires, so a
config is refused with the same messages everywhere; :func:`admit` is the same gate for a change
memtune itself proposes, which must also bring no warning.
"""

from __future__ import annotations

from memtune.check.finding import ERROR, INFO, WARNING, Finding
from memtune.check.gate import Admission, CheckedJob, admit, gate, run_checks

__all__ = ["ERROR", "INFO", "WARNING", "Admission", "CheckedJob", "Finding", "admit", "gate", "run_checks"]


import sys as _sys

from memtune.entry import EntryModule as _EntryModule

_sys.modules[__name__].__class__ = _EntryModule  # memtune.check(config): memtune/api.py
