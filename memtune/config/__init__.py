"""Load a training job from any supported format, apply overrides, validate.

Data flows one way: a loader turns a file into a plain dict in memtune's own layout (plus
the keys it had to ignore), dotted overrides are applied to that dict, and the schema
validates it into a :class:`JobConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from memtune.config.derived import Derived, derive
from memtune.config.loaders import RawJob, read_raw
from memtune.config.overrides import apply_overrides
from memtune.config.schema import JobConfig
from memtune.config.validation import validate

__all__ = ["Derived", "JobConfig", "LoadedJob", "derive", "load_job", "validate"]


@dataclass(frozen=True)
class LoadedJob:
    job: JobConfig
    source: str  # the file it came from
    format: str  # memtune | bridge | megatron-args | hf
    ignored: list[str] = field(default_factory=list)  # keys or flags the loader did not use


def load_job(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedJob:
    raw: RawJob = read_raw(Path(path))
    data = apply_overrides(raw.data, overrides)
    return LoadedJob(job=validate(data), source=str(path), format=raw.format, ignored=raw.ignored)
