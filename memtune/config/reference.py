"""docs/config.md: every key of the schema with its type, default and description, and whether
the estimator reads it.

"Read by the estimator" is found from the source, not written by hand: a key counts when the
estimator's modules (``memtune/estimate``, the LoRA model, the pipeline layout) read it, directly
or through a :class:`~memtune.config.derived.Derived` fact that reads it.
"""

from __future__ import annotations

import ast
import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from memtune.config.schema import JobConfig

PACKAGE = Path(__file__).resolve().parents[1]
ESTIMATOR_MODULES = ("estimate", "peft/model.py", "config/layout.py")


def _attributes(tree: ast.AST) -> set[str]:
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


def _derived_reads() -> dict[str, set[str]]:
    """For each member of Derived, the attribute names its body reads."""
    tree = ast.parse((PACKAGE / "config" / "derived.py").read_text(encoding="utf-8"))
    derived = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Derived")
    return {
        member.name: _attributes(member)
        for member in derived.body
        if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def estimator_reads() -> set[str]:
    """Attribute names the estimator reads, with Derived facts expanded to what they read."""
    names: set[str] = set()
    for entry in ESTIMATOR_MODULES:
        path = PACKAGE / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if file.exists():
                names |= _attributes(ast.parse(file.read_text(encoding="utf-8")))
    members = _derived_reads()
    pending = [name for name in names if name in members]
    seen: set[str] = set()
    while pending:
        member = pending.pop()
        if member in seen:
            continue
        seen.add(member)
        for name in members[member]:
            names.add(name)
            if name in members:
                pending.append(name)
    return names


def _section_model(annotation: Any) -> type[BaseModel] | None:
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return next((o for o in options if isinstance(o, type) and issubclass(o, BaseModel)), None)


def _type_text(annotation: Any) -> str:
    text = repr(annotation).replace("typing.", "")
    # The schema's strict bounded integers and finite floats (memtune/config/schema.py), said plainly.
    text = _BOUNDED_INT.sub(lambda m: f"int {m.group(1)}..{m.group(2)}", text)
    text = text.replace("Annotated[float, AllowInfNan(allow_inf_nan=False)]", "finite float")
    return text.removeprefix("<class '").removesuffix("'>")


_BOUNDED_INT = re.compile(
    r"Annotated\[int, Strict\(strict=True\), FieldInfo\(annotation=NoneType, required=True, "
    r"metadata=\[Ge\(ge=(-?\d+)\), Le\(le=(-?\d+)\)\]\)\]"
)


def config_markdown() -> str:
    read = estimator_reads()
    lines = [
        "# Configuration keys",
        "",
        "Generated from the schema's field docstrings (`memtune/config/schema.py`); regenerate with",
        '`python -c "from memtune.config.reference import config_markdown as m; '
        "open('docs/config.md','w').write(m())\"`.",
        "Names and defaults are Megatron-Core's; a job's `defaults:` stack fills the keys it leaves out",
        "(docs/real-jobs.md). **E**: read by the estimator (directly or through a derived fact).",
        "",
    ]
    top = [(name, field) for name, field in JobConfig.model_fields.items()]
    lines += ["## Top level", "", "| key | E | default | meaning |", "|---|---|---|---|"]
    for name, field in top:
        if _section_model(field.annotation) is None:
            lines.append(_row(name, field, read))
    for name, field in top:
        section = _section_model(field.annotation)
        if section is None:
            continue
        lines += ["", f"## `{name}`: {field.description}", "", "| key | E | default | meaning |"]
        lines.append("|---|---|---|---|")
        lines += _rows(name, section, read)
    return "\n".join(lines) + "\n"


def _rows(prefix: str, section: type[BaseModel], read: set[str]) -> list[str]:
    """One row per key; a nested section (``cluster.network``) lists its own keys."""
    rows = []
    for key, field in section.model_fields.items():
        nested = _section_model(field.annotation)
        if nested is None:
            rows.append(_row(f"{prefix}.{key}", field, read))
        else:
            rows += _rows(f"{prefix}.{key}", nested, read)
    return rows


def _row(key: str, field: Any, read: set[str]) -> str:
    default = "required" if field.is_required() else f"`{field.get_default(call_default_factory=True)!r}`"
    marker = "E" if key.rsplit(".", 1)[-1] in read else ""
    # one table row: a docstring's line breaks become spaces
    description = " ".join((field.description or "").split()).replace("|", "\\|")
    return f"| `{key}` | {marker} | {default} | {description} <br>*{_type_text(field.annotation)}* |"
