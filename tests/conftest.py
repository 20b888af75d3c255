"""The ``torch`` marker: tests that need torch (and Lightning) are marked by what their module
imports, so ``python -m pytest -m "not torch"`` checks the torch-free rest on a machine without
them. Under that selection torch cannot be imported at all, so a test that reaches it unmarked
fails instead of passing where torch happens to be installed."""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import pytest

# What reaches torch: importing it or Lightning, or the runtime's parts that import it when used
# (memtune/runtime/monitor.py, memtune/runtime/oom.py).
TORCH_USE = re.compile(
    r"^\s*(import|from) (torch|lightning)\b|importorskip\(\"(torch|lightning)"
    r"|^from memtune\.runtime import .*\b(MemoryMonitor|capture_oom)\b",
    re.MULTILINE,
)
TORCH_MODULES = ("torch", "lightning", "pytorch_lightning")


def _torch_deselected(config: pytest.Config) -> bool:
    return "not torch" in (config.getoption("markexpr") or "")


def pytest_configure(config: pytest.Config) -> None:
    if _torch_deselected(config):
        for name in TORCH_MODULES:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # a None entry makes import fail


@cache
def _uses_torch(path: Path) -> bool:
    return bool(TORCH_USE.search(path.read_text(encoding="utf-8")))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_torch(Path(item.path)):
            item.add_marker(pytest.mark.torch)
