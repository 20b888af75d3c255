"""No import cycles in memtune: neither between its packages nor between its modules.

Imports are read from the source (lazy ones inside functions included, ``if TYPE_CHECKING:``
blocks left out, since they never run). The commands' ``cli.py`` modules are the top layer
(docs/architecture.md) and may import any package, so they count as one package of their own.
"""

from __future__ import annotations

import ast
import functools
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memtune"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


class _Imports(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING":
            for statement in node.orelse:
                self.visit(statement)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        assert node.level == 0 and node.module, "memtune imports absolutely"
        submodules = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
        self.found |= submodules
        if len(submodules) < len(node.names):  # names from the module itself, not its submodules
            self.found.add(node.module)


@functools.cache
def _imports(module: str) -> frozenset[str]:
    visitor = _Imports()
    visitor.visit(ast.parse(MODULES[module].read_text(encoding="utf-8")))
    # importing a submodule imports its parent packages first; that is no edge of the module's own
    return frozenset(name for name in visitor.found if name in MODULES and not module.startswith(f"{name}."))


def _package(module: str) -> str:
    if module == "memtune.cli" or module.endswith(".cli"):
        return "commands"
    return ".".join(module.split(".")[:2])


def _cycle(graph: dict[str, frozenset[str]] | dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return list(error.args[1])
    return None


def test_no_module_imports_itself_through_others():
    assert _cycle({module: _imports(module) for module in MODULES}) is None


def test_no_package_imports_itself_through_others():
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        graph.setdefault(_package(module), set()).update(
            _package(imported) for imported in _imports(module) if _package(imported) != _package(module)
        )
    assert _cycle(graph) is None


@pytest.mark.parametrize(
    "source, cycle",
    [
        ({"a": "import memtune.b\n", "b": "def f():\n    from memtune.a import x\n"}, ["a", "b"]),
        (
            {
                "a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import memtune.b\n",
                "b": "import memtune.a\n",
            },
            None,
        ),
    ],
)
def test_the_cycle_finder_sees_lazy_imports_and_skips_type_checking(source, cycle):
    graph = {}
    for name, text in source.items():
        visitor = _Imports()
        visitor.visit(ast.parse(text))
        graph[name] = {found.removeprefix("memtune.") for found in visitor.found} & source.keys()
    found = _cycle(graph)
    assert (sorted(set(found)) if found else None) == cycle
