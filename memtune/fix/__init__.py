"""``memtune fix``: the cheapest changes that make a failing configuration fit.

:mod:`memtune.fix.changes` holds the remedies (shared with ``memtune diagnose``'s advice);
:mod:`memtune.fix.search` estimates each on the failing rank and predicts its throughput cost.
"""

import sys as _sys

from memtune.entry import EntryModule as _EntryModule

_sys.modules[__name__].__class__ = _EntryModule  # memtune.fix(config): memtune/api.py
