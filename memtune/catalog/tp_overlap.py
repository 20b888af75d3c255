"""Megatron-Bridge's named userbuffer overlap configurations (``data/tp_overlap_cfgs.yaml``).

A Bridge recipe names one (``comm_overlap.tp_comm_overlap_cfg = userbuffers_...``); a job may
too, as ``model.tp_comm_overlap_cfg``. The file is written by ``benchmarks/catalog_comm_overlap.py``
from Bridge's ``training/comm_overlap.py``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from memtune.catalog._data import read_catalog


@cache
def _configs() -> dict[str, dict[str, dict[str, Any]]]:
    configs: dict[str, dict[str, dict[str, Any]]] = read_catalog("tp_overlap_cfgs.yaml")["configs"]
    return configs


def named_overlap_cfg(name: str) -> dict[str, dict[str, Any]]:
    """The per-GEMM settings of Bridge's configuration ``name``; a ValueError names the known ones."""
    configs = _configs()
    if name not in configs:
        raise ValueError(
            f"no Megatron-Bridge userbuffer configuration named {name!r}; known: {', '.join(configs)}"
        )
    return {gemm: dict(fields) for gemm, fields in configs[name].items()}
