"""A proposed job written in the user's own format: what ``fix --write`` and ``plan --write`` emit.

- ``memtune``: the whole job as memtune YAML;
- ``bridge``: a Megatron-Bridge override file with only the changed keys, in ConfigContainer
  sections, to lay over the same config or recipe (``memtune estimate --recipe NAME OUT.yaml``);
- ``hydra``: the changed keys as dotted overrides, one a line (Bridge's and Hydra's CLI syntax);
- ``megatron-args``: a copy of the Megatron-LM launch script with only the changed flags touched:
  a flag's value replaced where it stands, a switch added or removed, a new flag put after
  ``--num-layers``; comments and layout kept.

Loading what is written (over the same base, for ``bridge`` and ``hydra``) gives the proposed job:
``tests/config/test_writers.py`` checks each format round trip.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from memtune.config import LoadedJob
from memtune.config.changes import Change, job_data
from memtune.config.loaders.megatron_args import ENV_VARIABLES, FLAGS, Switch, Value, int_tuple
from memtune.config.schema import JobConfig
from memtune.errors import InputError
from memtune.outfile import write_atomically

WRITE_FORMATS = ("memtune", "bridge", "hydra", "megatron-args")
WRITE_HELP = (
    "with --write: megatron-args (a patched copy of the launch script), bridge (an override file), "
    "hydra (dotted overrides) or memtune (YAML); default: the input's own kind"
)
# The format a job is written in by default, by the format it was read from.
DEFAULT_FORMAT = {"megatron-args": "megatron-args", "bridge": "bridge", "recipe": "bridge"}


def default_format(loaded: LoadedJob) -> str:
    return DEFAULT_FORMAT.get(loaded.format, "memtune")


def changes_between(before: JobConfig, after: JobConfig) -> list[Change]:
    """Every key whose value in effect differs, as the changes that turn ``before`` into ``after``."""
    old, new = before.model_dump(mode="json"), after.model_dump(mode="json")
    out = []
    for section, values in new.items():
        if not isinstance(values, dict):
            if values != old.get(section):
                out.append(Change(section, values))
            continue
        for key, value in values.items():
            if value != (old.get(section) or {}).get(key):
                out.append(Change(f"{section}.{key}", value))
    return out


def render(loaded: LoadedJob, proposed: JobConfig, fmt: str, title: str) -> str:
    """The text of ``proposed`` in ``fmt``, a change of ``loaded`` (the user's input)."""
    if fmt not in WRITE_FORMATS:
        raise InputError(f"--format: must be one of {', '.join(WRITE_FORMATS)}, got {fmt!r}")
    header = f"# written by {title}\n"
    if fmt == "memtune":
        return header + yaml.safe_dump(job_data(proposed), sort_keys=False)
    changes = changes_between(loaded.job, proposed)
    if fmt == "hydra":
        return header + "".join(f"{c}\n" for c in changes)
    if fmt == "bridge":
        return (
            header + f"# lay it over {loaded.source}\n" + yaml.safe_dump(_sections(changes), sort_keys=False)
        )
    if loaded.format != "megatron-args":
        raise InputError(
            f"--format megatron-args: {loaded.source} is not a Megatron-LM launch script; "
            "use --format bridge, hydra or memtune"
        )
    with open(loaded.source, encoding="utf-8") as handle:
        return patch_launch(handle.read(), changes)


def _sections(changes: list[Change]) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for change in changes:
        section, _, key = change.key.partition(".")
        if not key:
            raise InputError(f"--format bridge: {change} is not a section key; use --format memtune")
        out.setdefault(section, {})[key] = change.value
    return out


# -- Megatron-LM launch scripts ------------------------------------------------------------------

# Flags memtune reads from older launch scripts that Megatron-LM's parser no longer takes
# (megatron/training/arguments.py at d98e8a6): never written.
NOT_IN_PARSER = frozenset(
    {"cpu-offloading", "num-layers-in-first-pipeline-stage", "num-layers-in-last-pipeline-stage"}
)
# Writing one of these flags removes the other: both set the same fact (validate_args).
_EXCLUSIVE = {
    "num-virtual-stages-per-pipeline-rank": ("num-layers-per-virtual-pipeline-stage",),
    "num-layers-per-virtual-pipeline-stage": ("num-virtual-stages-per-pipeline-rank",),
}


def patch_launch(text: str, changes: list[Change]) -> str:
    """``text`` with the flags of ``changes`` set; every other byte as it was."""
    wanted = {c.key: c.value for c in changes}
    plans = {str(c): _actions(c, wanted, text) for c in changes}
    unmapped = [shown for shown, actions in plans.items() if actions is None]
    if unmapped:
        raise InputError(
            f"--format megatron-args: {', '.join(unmapped)} has no Megatron-LM flag memtune writes; "
            "use --format hydra or memtune"
        )
    for change in changes:
        section, _, key = change.key.partition(".")
        if section == "env":
            text = _set_export(text, key, change.value)
            continue
        for action, flag in plans[str(change)] or ():
            text = _act(text, action, flag, change.value)
    return text


def _actions(change: Change, wanted: dict[str, object], text: str) -> list[tuple[str, str]] | None:
    """How to write ``change``: ``[(action, flag)]`` with action ``set`` (a valued flag), ``add``
    or ``remove`` (a switch, or a valued flag whose value goes back to the default); None when
    no flag memtune reads sets the key."""
    section, _, key = change.key.partition(".")
    if section == "env":
        return [] if key in ENV_VARIABLES else None
    valued = [
        f
        for f, s in FLAGS.items()
        if isinstance(s, Value) and s.dest == change.key and f not in NOT_IN_PARSER
    ]
    if valued:
        if change.value is None or change.value == []:
            return [("remove", f) for f in valued]
        present = [f for f in valued if _find(text, f)]
        return [("set", (present or valued)[0])]
    if change.key == "model.cpu_offloading" and change.value is True:
        layers = wanted.get("model.cpu_offloading_num_layers", 0)
        return [] if isinstance(layers, int) and layers > 0 else None  # the layer count implies it
    switches = {
        f: s
        for f, s in FLAGS.items()
        if isinstance(s, Switch) and change.key in s.sets and f not in NOT_IN_PARSER
    }
    setting = [
        f
        for f, s in switches.items()
        if all(
            not k.startswith("_") and wanted.get(k, v if k == change.key else None) == v
            for k, v in s.sets.items()
        )
    ]
    others = [("remove", f) for f, s in switches.items() if s.sets[change.key] != change.value]
    if setting:
        return [("add", setting[0]), *others]
    # no switch sets the value: removing those that set another restores Megatron-LM's default
    return others if others and isinstance(change.value, bool) else None


def _act(text: str, action: str, flag: str, value: object) -> str:
    spec = FLAGS[flag]
    many = isinstance(spec, Value) and spec.many
    if action == "set":
        for other in _EXCLUSIVE.get(flag, ()):
            text = _remove_flag(text, other)
        if many and isinstance(value, list):
            values = [str(v) for v in value]
        elif isinstance(spec, Value) and spec.convert is int_tuple and isinstance(value, list):
            values = [",".join(str(v) for v in value)]  # Megatron-LM's tuple_type: 127,0
        else:
            values = [_text(value)]
        return _set_flag(text, flag, values)
    if action == "add":
        return text if _find(text, flag) else _insert(text, [f"--{flag}"])
    return _remove_flag(text, flag)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):  # Megatron's list syntax (--moe-layer-freq)
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def _pattern(flag: str) -> str:
    spelled = "[-_]".join(re.escape(part) for part in flag.split("-"))
    return rf"(?<![\w-])--{spelled}(?![\w-])"


# A shell word: quoted, or bare up to a blank, `\`, `)` or `;`; never the next flag.
_WORD = r"""(?!--)(?:"[^"]*"|'[^']*'|[^\s\\);"']+)"""
_SEPARATOR = r"(?:[ \t]*=[ \t]*|[ \t]+)"


def _value_pattern(flag: str) -> str:
    spec = FLAGS[flag]
    if not isinstance(spec, Value):
        return ""
    return rf"{_SEPARATOR}{_WORD}(?:[ \t]+{_WORD})*" if spec.many else rf"{_SEPARATOR}{_WORD}"


def _find(text: str, flag: str) -> list[re.Match[str]]:
    return list(re.finditer(_pattern(flag), text))


def _set_flag(text: str, flag: str, values: list[str]) -> str:
    """Every ``--flag VALUE`` given the new value where it stands, or the flag inserted."""
    pattern = re.compile(rf"(?P<flag>{_pattern(flag)})(?P<value>{_value_pattern(flag)})")
    if not pattern.search(text):
        return _insert(text, [f"--{flag}", *values])

    def put(match: re.Match[str]) -> str:
        separator = "=" if match["value"].lstrip().startswith("=") else " "
        return f"{match['flag']}{separator}{' '.join(values)}"

    return pattern.sub(put, text)


def _remove_flag(text: str, flag: str) -> str:
    pattern = re.compile(rf"[ \t]*{_pattern(flag)}(?:{_value_pattern(flag)})?")
    out = []
    for line in text.splitlines(keepends=True):
        new = pattern.sub("", line)
        if new != line and re.fullmatch(r"[ \t]*\\?[ \t]*\r?\n?", new):
            continue  # the flag stood alone on its line (an array item, a continued line)
        out.append(new)
    return "".join(out)


def _insert(text: str, words: list[str]) -> str:
    """``words`` after the ``--num-layers`` flag: on a line of its own like it, else beside it."""
    match = re.search(rf"{_pattern('num-layers')}{_value_pattern('num-layers')}", text)
    if match is None:
        raise InputError(
            "--format megatron-args: the launch script has no --num-layers to put new flags beside"
        )
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    end = len(text) if end < 0 else end
    alone = re.fullmatch(rf"([ \t]*){re.escape(match.group(0))}([ \t]*\\)?[ \t]*", text[start:end])
    if alone:
        indent, continuation = alone.group(1), alone.group(2) or ""
        return text[:end] + f"\n{indent}{' '.join(words)}{continuation}" + text[end:]
    return text[: match.end()] + " " + " ".join(words) + text[match.end() :]


def _set_export(text: str, name: str, value: object) -> str:
    """``export NAME=value`` where the script sets NAME, else a new line before the first command."""
    shown = "" if value is None else str(value)
    line = re.compile(rf"^([ \t]*(?:export[ \t]+)?){re.escape(name)}=.*$", re.M)
    if line.search(text):
        return line.sub(lambda m: f"{m.group(1)}{name}={shown}", text, count=1)
    first = re.search(r"^(?!#)(?![ \t]*$).*$", text, re.M)
    at = first.start() if first else len(text)
    return text[:at] + f"export {name}={shown}\n" + text[at:]


def write_job(
    target: Path, loaded: LoadedJob, proposed: JobConfig, fmt: str | None, title: str, *, replace: bool
) -> str:
    """Write ``proposed`` to ``target`` (checked by :func:`memtune.outfile.check_output_path`) in
    ``fmt``, by default the input's own format; returns the format written."""
    chosen = fmt or default_format(loaded)
    text = render(loaded, proposed, chosen, title)
    write_atomically(target, lambda handle: handle.write(text.encode()), replace=replace, option="--write")
    return chosen
