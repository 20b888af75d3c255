"""Readers that turn a file into a plain dict in memtune's own layout.

Each reader returns a :class:`RawJob`; nothing here validates values, that is the schema's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from memtune.config.loaders import native
from memtune.errors import InputError


@dataclass
class RawJob:
    data: dict
    format: str
    ignored: list[str] = field(default_factory=list)


def read_raw(path: Path) -> RawJob:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a config file (.yaml, .json, .sh)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read as text ({exc.__class__.__name__})") from None
    data, ignored = native.read(path, text)
    return RawJob(data=data, format="memtune", ignored=ignored)
