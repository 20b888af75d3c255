"""Load a training job from any supported format, apply overrides, validate.

Data flows one way: a loader turns a file into a plain dict in memtune's own layout (plus
the keys it had to ignore), dotted overrides are applied to that dict, and the schema
validates it into a :class:`JobConfig`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from memtune.config.derived import Derived, derive
from memtune.config.loaders import RawJob, read_raw
from memtune.config.overrides import apply_overrides
from memtune.config.schema import JobConfig
from memtune.config.stacks import ReceivedDefault, received_defaults
from memtune.config.validation import validate
from memtune.errors import InputError

__all__ = ["Derived", "JobConfig", "LoadedJob", "derive", "load_job", "report_ignored", "validate"]


@dataclass(frozen=True)
class LoadedJob:
    job: JobConfig
    source: str  # the file it came from
    format: str  # memtune | bridge | megatron-args | hf
    ignored: list[str] = field(default_factory=list)  # keys or flags the loader did not use
    received: list[ReceivedDefault] = field(default_factory=list)  # values from the stack, not the file

    @property
    def defaults(self) -> list[ReceivedDefault]:
        """Every value the job took from its stack (and, for HF configs, Bridge's model bridge)
        rather than from what the user wrote: what ``--explain`` lists."""
        return [*self.received, *received_defaults(self.job)]


def load_job(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedJob:
    raw: RawJob = read_raw(Path(path))
    data = apply_overrides(raw.data, overrides)
    try:
        job = validate(data)
    except InputError as exc:
        raise InputError([_missing_line(raw, line) for line in exc.problems]) from None
    # an override may have replaced a value the loader took from the stack
    received = [d for d in raw.received if _value_at(job, d.key) == d.value]
    return LoadedJob(job=job, source=str(path), format=raw.format, ignored=raw.ignored, received=received)


def _missing_line(raw: RawJob, line: str) -> str:
    """The loader's own line for a required key the file could not give, else ``line``."""
    key, _, problem = line.partition(": ")
    return raw.missing.get(key, line) if problem == "required, but missing" else line


def _value_at(job: JobConfig, key: str) -> object:
    section, name = key.split(".")
    return getattr(getattr(job, section), name)


def report_ignored(loaded: LoadedJob) -> None:
    """Every command that loads a config says on stderr, in one line, what it did not use."""
    if loaded.ignored:
        print(
            f"{loaded.source}: ignored {len(loaded.ignored)} keys memtune does not use: "
            + ", ".join(loaded.ignored),
            file=sys.stderr,
        )
