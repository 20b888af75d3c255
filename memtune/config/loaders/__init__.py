"""Readers that turn a file into a plain dict in memtune's own layout.

Each reader returns the dict and the keys or flags it did not use; nothing here validates
values, that is the schema's job. :func:`read_raw` picks the reader from the file itself:

- a shell script or argument text (``.sh``, starts with ``torchrun``/``python``/``deepspeed``,
  or has ``--num-layers``): a Megatron-LM launch;
- a mapping with ``architectures`` or ``model_type``: a Hugging Face ``config.json``;
- a mapping with ``_target_`` anywhere or a section only Megatron-Bridge has (``dataset``,
  ``logger``, ``checkpoint``, ...): a Bridge ``ConfigContainer`` dump;
- any other mapping: memtune's own format, checked strictly by the schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from memtune.config.loaders import bridge, hf, megatron_args, native
from memtune.config.stacks import ReceivedDefault
from memtune.errors import InputError

FORMATS = ("memtune", "bridge", "megatron-args", "hf")


@dataclass
class RawJob:
    data: dict
    format: str  # one of FORMATS
    ignored: list[str] = field(default_factory=list)
    # values the loader took from a stack rather than the file (Bridge's model bridges for HF)
    received: list[ReceivedDefault] = field(default_factory=list)
    # dotted key -> the line to report when no override supplies that required key
    missing: dict[str, str] = field(default_factory=dict)


def read_raw(path: Path) -> RawJob:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a config file (.yaml, .json, .sh)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read as text ({exc.__class__.__name__})") from None
    if megatron_args.looks_like_launch(path, text):
        data, ignored, missing = megatron_args.read(path, text)
        return RawJob(data=data, format="megatron-args", ignored=ignored, missing=missing)
    mapping = native.parse_mapping(path, text)
    if hf.is_hf_config(mapping):
        data, ignored, received = hf.read(path, mapping)
        return RawJob(data=data, format="hf", ignored=ignored, received=received)
    if bridge.is_bridge_dump(mapping):
        data, ignored = bridge.read(mapping)
        return RawJob(data=data, format="bridge", ignored=ignored)
    return RawJob(data=native.read(mapping), format="memtune")
