"""Load a training job from any supported format, apply overrides, validate.

Data flows one way: a loader turns a file into a plain dict in memtune's own layout (plus
the keys it had to ignore), dotted overrides are applied to that dict, and the schema
validates it into a :class:`JobConfig`.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from memtune.config.derived import Derived, derive
from memtune.config.loaders import RawJob, read_layer, read_raw, read_recipe, with_layer
from memtune.config.loaders.native import resolve_preset
from memtune.config.overrides import apply_overrides
from memtune.config.schema import JobConfig
from memtune.config.stacks import ReceivedDefault, received_defaults
from memtune.config.validation import validate
from memtune.errors import InputError

__all__ = [
    "Derived",
    "JobConfig",
    "LoadedJob",
    "derive",
    "load_job",
    "load_object",
    "report_ignored",
    "validate",
]


@dataclass(frozen=True)
class LoadedJob:
    job: JobConfig
    source: str  # the file it came from
    format: str  # memtune | bridge | megatron-args | hf | recipe
    ignored: list[str] = field(default_factory=list)  # keys or flags the loader did not use
    received: list[ReceivedDefault] = field(default_factory=list)  # values from the stack, not the file
    fine_tuning: str | None = None  # why the file says the job fine-tunes; None when it does not

    @property
    def defaults(self) -> list[ReceivedDefault]:
        """Every value the job took from its stack (and, for HF configs, Bridge's model bridge)
        rather than from what the user wrote: what ``--explain`` lists."""
        return [*self.received, *received_defaults(self.job)]


def load_job(
    path: str | Path | None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    recipe: str | None = None,
    layers: list[str] | tuple[str, ...] = (),
) -> LoadedJob:
    """The job in ``path`` (or Megatron-Bridge's ``recipe``), each Bridge override file of
    ``layers`` laid over it in turn, then the dotted ``overrides``; a model preset any of them
    names is filled in last, under the job's own keys."""
    if recipe is not None:
        raw: RawJob = read_recipe(recipe)
        source = f"recipe {recipe}"
    elif path is not None:
        raw = read_raw(Path(path))
        source = str(path)
    else:
        raise InputError("a config file or --recipe NAME is required")
    return _finish(raw, source, overrides, layers)


def load_object(config: object, overrides: list[str] | tuple[str, ...] = ()) -> LoadedJob:
    """The job a live object describes (a Megatron-Bridge ``ConfigContainer``, a Megatron-LM
    ``argparse.Namespace``, a dict or a path: :mod:`memtune.config.loaders.objects`), then the
    dotted ``overrides``."""
    from memtune.config.loaders.objects import read_object

    raw, source = read_object(config)
    return _finish(raw, source, overrides, ())


def _finish(
    raw: RawJob, source: str, overrides: list[str] | tuple[str, ...], layers: list[str] | tuple[str, ...]
) -> LoadedJob:
    for layer in layers:
        raw = with_layer(raw, read_layer(Path(layer)))
    data = apply_overrides(raw.data, overrides)
    if isinstance(data.get("model"), dict) and "preset" in data["model"]:
        data = resolve_preset(data)
    try:
        job = validate(data)
    except InputError as exc:
        # one line per problem: a loader's line may stand for several missing keys
        raise InputError(list(dict.fromkeys(_missing_line(raw, line) for line in exc.problems))) from None
    # an override may have replaced a value the loader took from the stack
    received = [d for d in raw.received if _value_at(job, d.key) == d.value]
    return LoadedJob(
        job=job,
        source=source,
        format=raw.format,
        ignored=raw.ignored,
        received=received,
        fine_tuning=raw.fine_tuning,
    )


def _missing_line(raw: RawJob, line: str) -> str:
    """The loader's own line for a required key the file could not give, else ``line``."""
    key, _, problem = line.partition(": ")
    return raw.missing.get(key, line) if problem == "required, but missing" else line


def _value_at(job: JobConfig, key: str) -> object:
    section, name = key.split(".")
    return getattr(getattr(job, section), name)


# Up to this many ignored keys are named in the line; a longer list (a whole ConfigContainer
# dump names a hundred and more) is counted by section, and `memtune check --json` names each.
NAMED_IGNORED = 30


def report_ignored(loaded: LoadedJob, command: str) -> None:
    """Every command that loads a config says on stderr, in one line prefixed like its errors,
    what it did not use."""
    if loaded.ignored:
        print(
            f"memtune {command}: {loaded.source}: ignored {len(loaded.ignored)} keys memtune does not use: "
            + ignored_summary(loaded.ignored, loaded.source),
            file=sys.stderr,
        )


def ignored_summary(ignored: list[str], source: str) -> str:
    """Each ignored key by name, or past ``NAMED_IGNORED`` of them, the count in each section
    (launch flags apart), the wholly ignored sections by name, and where each key is listed."""
    if len(ignored) <= NAMED_IGNORED:
        return ", ".join(ignored)
    flags = sum(1 for key in ignored if key.startswith("-"))
    keys = [key for key in ignored if not key.startswith("-")]
    counts = Counter(key.split(".")[0] for key in keys if "." in key)
    parts = [f"{count} in {section}" for section, count in counts.most_common()]
    if flags:
        parts.append(f"{flags} launch flags")
    summary = ", ".join(parts)
    whole = [key for key in keys if "." not in key]
    if whole:
        summary += "; whole sections " + ", ".join(whole)
    recipe = source.removeprefix("recipe ")
    where = f"--recipe {recipe}" if recipe != source else source
    return summary + f" (memtune check {where} --json lists each)"
