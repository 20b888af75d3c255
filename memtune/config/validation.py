"""Schema validation with one clear line per problem: key path, value, what is allowed."""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from memtune.config.schema import JobConfig
from memtune.config.stacks import apply_stack_defaults
from memtune.errors import InputError
from memtune.limits import MAX_ECHO, MAX_PROBLEM_LINES
from memtune.numbers import echo

# Pydantic inserts the member type of a union into the error location; users never typed it.
_UNION_TAGS = ("int", "str", "bool", "float", "list", "constrained-int", "function-after", "literal")


def validate(data: object) -> JobConfig:
    """The job ``data`` describes, with its stack's defaults (:mod:`memtune.config.stacks`) for the
    keys it leaves out."""
    if not isinstance(data, dict):
        raise InputError(
            f"config: expected a mapping of sections (model, train, ...), got {type(data).__name__}"
        )
    try:
        job = JobConfig.model_validate(data)
    except ValidationError as exc:
        raise InputError(_describe(exc)) from None
    return apply_stack_defaults(job)


def _describe(exc: ValidationError) -> list[str]:
    lines: list[str] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"] if not _is_union_tag(p)]
        where = ".".join(loc) or "config"
        if where in seen:
            continue
        seen.add(where)
        if len(lines) < MAX_PROBLEM_LINES:
            lines.append(f"{_cut(where)}: {_explain(err, loc)}")
    if len(seen) > MAX_PROBLEM_LINES:
        lines.append(f"... and {len(seen) - MAX_PROBLEM_LINES} more problems")
    return lines


def _some(keys: list[str], shown: int = 40) -> str:
    """The allowed keys, at most ``shown`` of them (docs/config.md lists every key)."""
    if len(keys) <= shown:
        return ", ".join(keys)
    return ", ".join(keys[:shown]) + f", ... ({len(keys) - shown} more; docs/config.md lists them all)"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ECHO else text[: MAX_ECHO - 1] + "…"


def _is_union_tag(part: object) -> bool:
    return isinstance(part, str) and (
        part in _UNION_TAGS or "[" in part or part.startswith(("constrained", "function"))
    )


def _explain(err: ErrorDetails, loc: list[str]) -> str:
    kind, raw = err["type"], err.get("input")
    value = _Echo(raw)
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"allowed: {_some(allowed)}"
        return f"unknown key; {hint}"
    if kind == "missing":
        return "required, but missing"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')} (memtune's plausibility limit), got {value!r}"
    if kind == "finite_number":
        return f"must be a finite number, got {value!r}"
    if (
        kind in ("greater_than", "greater_than_equal")
        and isinstance(raw, int)
        and ctx.get("gt", ctx.get("ge")) == 1
    ):
        return f"must be a positive integer, got {value!r}"
    if kind == "greater_than" and ctx.get("gt") == 0:
        # every such field is a number that may have a fraction (a capacity factor, GiB)
        return f"must be more than 0, got {value!r}"
    if kind == "greater_than_equal" and ctx.get("ge") == 0:
        return f"must be zero or more, got {value!r}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer, got {value!r}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, got {value!r}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, got {value!r}"
    if kind in ("list_type",):
        return f"must be a list, got {value!r}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys, got {value!r}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {value!r}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg'][0].lower()}{err['msg'][1:]}, got {value!r}"


class _Echo:
    """A user's value as error lines quote it: its repr, cut short."""

    def __init__(self, value: object):
        self.value = value

    def __repr__(self) -> str:
        return echo(self.value)


def _allowed_keys(section_path: list[str]) -> list[str]:
    """The keys the section at ``section_path`` allows; a mapping's own keys (a GEMM's name in
    ``model.tp_comm_overlap_cfg``) step into its values' section."""
    model: type[BaseModel] = JobConfig
    parts = iter(section_path)
    for part in parts:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        members = getattr(annotation, "__args__", (annotation,))
        inner = [a for a in members if isinstance(a, type) and issubclass(a, BaseModel)]
        values = [
            getattr(a, "__args__", (None, None))[1] for a in members if getattr(a, "__origin__", None) is dict
        ]
        mapped = [v for v in values if isinstance(v, type) and issubclass(v, BaseModel)]
        if mapped:
            next(parts, None)  # the mapping's key
            inner = mapped
        if not inner:
            return []
        model = inner[0]
    return sorted(model.model_fields)
