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
from memtune.config.loaders._guards import read_config_text
from memtune.errors import InputError
from memtune.numbers import echo

FORMATS = ("memtune", "bridge", "megatron-args", "hf")


@dataclass
class RawJob:
    data: dict
    format: str  # one of FORMATS
    ignored: list[str] = field(default_factory=list)


def read_raw(path: Path) -> RawJob:
    shown = echo(str(path))[1:-1]
    try:
        if not path.exists():
            raise InputError(f"{shown}: no such file")
        if path.is_dir():
            raise InputError(f"{shown}: is a directory, expected a config file (.yaml, .json, .sh)")
    except OSError as exc:  # a name too long for the file system, a directory we may not search
        raise InputError(f"{shown}: cannot open ({exc.strerror or exc.__class__.__name__})") from None
    text = read_config_text(path)
    if megatron_args.looks_like_launch(path, text):
        data, ignored = megatron_args.read(path, text)
        return RawJob(data=data, format="megatron-args", ignored=ignored)
    mapping = native.parse_mapping(path, text)
    if hf.is_hf_config(mapping):
        data, ignored = hf.read(path, mapping)
        return RawJob(data=data, format="hf", ignored=ignored)
    if bridge.is_bridge_dump(mapping):
        data, ignored = bridge.read(mapping)
        return RawJob(data=data, format="bridge", ignored=ignored)
    return RawJob(data=native.read(mapping), format="memtune")
