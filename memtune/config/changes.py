"""A change to a job, as a dotted key and a value: what check's fixes, diagnose's advice and
``memtune fix`` propose, and what ``memtune diff`` attributes memory to.

A :class:`Change` prints as the dotted override a user would type (``model.sequence_parallel=true``)
and applies to an already loaded job without reading any file again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from memtune.config.derived import Derived
from memtune.config.overrides import apply_overrides
from memtune.config.schema import JobConfig
from memtune.config.validation import validate
from memtune.errors import InputError
from memtune.numbers import cut, echo


@dataclass(frozen=True)
class Change:
    key: str  # dotted, e.g. "model.tensor_model_parallel_size"
    value: Any  # a YAML scalar or list, as the override would parse it

    def __str__(self) -> str:
        return f"{self.key}={_yaml_text(self.value)}"

    @classmethod
    def parse(cls, text: str) -> Change:
        """``"model.x=8"`` -> Change("model.x", 8); raises InputError on anything else."""
        key, sep, value = text.partition("=")
        if not sep or "." not in key:
            raise InputError(f"change {echo(text)}: expected section.key=value")
        try:
            parsed = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            parsed = value
        return cls(key.strip(), parsed)


def allocator_option_change(d: Derived | None, option: str, value: str) -> Change:
    """The allocator options in effect with ``option`` set, under the name Megatron's guards read
    (``PYTORCH_CUDA_ALLOC_CONF``, docs/allocator.md S2)."""
    options = {**(d.allocator.options if d else {}), option: value}
    return Change("env.PYTORCH_CUDA_ALLOC_CONF", ",".join(f"{k}:{v}" for k, v in options.items()))


def expandable_segments_changes(d: Derived) -> tuple[Change, ...] | None:
    """``Derived.expandable_segments_settings`` as changes: () when on, None when refused."""
    settings = d.expandable_segments_settings
    return None if settings is None else tuple(Change(key, value) for key, value in settings)


def _yaml_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_yaml_text(v) for v in value) + "]"
    if isinstance(value, dict):  # a mapping-valued key (model.tp_comm_overlap_cfg)
        return "{" + ", ".join(f"{k}: {_yaml_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def default_of(key: str) -> Any:
    """The schema's default for a dotted key (what "unset" means); InputError if there is none."""
    model: Any = JobConfig
    *sections, name = key.split(".")
    for section in sections:
        field = model.model_fields.get(section)
        model = field.annotation if field is not None else None
        if not isinstance(model, type) or not issubclass(model, BaseModel):
            raise InputError(f"{cut(key)}: no such section {echo(section)}")
    field = model.model_fields.get(name)
    if field is None or field.is_required():
        raise InputError(f"{key}: no default to return to")
    return field.get_default(call_default_factory=True)


def job_data(job: JobConfig) -> dict[str, Any]:
    """The job as plain data that validates back into an equal job: every key that was set (by
    the user, a loader or a stack's defaults) and nothing else."""
    return job.model_dump(mode="json", exclude_unset=True)


def with_changes(job: JobConfig, changes: list[Change] | tuple[Change, ...]) -> JobConfig:
    """``job`` with ``changes`` applied, validated again."""
    return validate(apply_overrides(job_data(job), [str(c) for c in changes]))
