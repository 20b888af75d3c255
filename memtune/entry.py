"""The packages that are also the Python API's functions of the same name.

``memtune.estimate``, ``memtune.check`` and ``memtune.fix`` are packages (the capability's code)
and, called, the entry points of :mod:`memtune.api`: ``memtune.estimate(config)``. Each package
sets its module's class to :class:`EntryModule`; the call finds :mod:`memtune.api` when it is
made, so the capability packages do not import the layer above them.
"""

from __future__ import annotations

import importlib
import types


class EntryModule(types.ModuleType):
    def __call__(self, *args: object, **kwargs: object) -> object:
        api = importlib.import_module("memtune.api")
        return getattr(api, self.__name__.rsplit(".", 1)[1])(*args, **kwargs)
