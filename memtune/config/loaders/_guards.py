"""Guards every config reader puts in front of untrusted text: parse with bounded work, then
check the parsed tree's shape before anything walks it.

A YAML document can name the same node many times through aliases (a few hundred bytes can
stand for billions of values, or for a list that contains itself), JSON and YAML can nest deeper
than Python's recursion limit, and keys can be numbers or lists. The limits are in
:mod:`memtune.limits`.
"""

from __future__ import annotations

import json

import yaml

from memtune.errors import InputError
from memtune.limits import MAX_ALIASES, MAX_CONFIG_BYTES, MAX_ECHO, MAX_NESTING, MAX_NODES

# libyaml's parser when PyYAML was built with it (about 20x faster, and it caps nesting itself).
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CountingLoader(_SafeLoader):  # type: ignore[misc,valid-type]
    """PyYAML's safe loader (no tags that build objects) that counts, while constructing, every
    node it is asked for and every alias use (a node asked for again), and stops at the limits."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.nodes = 0
        self.aliases = 0

    def construct_object(self, node, deep=False):  # type: ignore[no-untyped-def]
        self.nodes += 1
        if node in self.constructed_objects:
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise InputError(
                    f"more than {MAX_ALIASES} YAML aliases (*name); a config does not need that many"
                )
        if self.nodes > MAX_NODES:
            raise InputError(f"more than {MAX_NODES} values; a config is far smaller")
        return super().construct_object(node, deep)


def load_yaml(text: str, where: str) -> object:
    """Parse one YAML document with the safe loader, bounded in aliases, depth and size."""
    loader = _CountingLoader(text)
    try:
        data = loader.get_single_data()
    except InputError as exc:
        raise InputError(f"{where}: {exc.problems[0]}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "cannot parse"
        raise InputError(f"{where}: invalid YAML{at}: {problem}") from None
    except RecursionError:
        raise InputError(f"{where}: nested deeper than {MAX_NESTING} levels") from None
    except (ValueError, OverflowError) as exc:  # int() of a number with thousands of digits
        raise InputError(f"{where}: invalid YAML: a value cannot be read ({_first_words(exc)})") from None
    finally:
        loader.dispose()
    check_tree(data, where)
    return data


def load_json(text: str, where: str) -> object:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise InputError(f"{where}: nested deeper than {MAX_NESTING} levels") from None
    except ValueError as exc:  # int() of a number with thousands of digits
        raise InputError(f"{where}: invalid JSON: {_first_words(exc)}") from None
    check_tree(data, where)
    return data


def _first_words(exc: Exception) -> str:
    text = str(exc).split(";")[0]
    return text[:120]


def check_tree(data: object, where: str) -> None:
    """Refuse a parsed document that nests too deeply, refers to itself, has more than MAX_NODES
    values counting every alias expansion, or has mapping keys that are not strings."""
    stack: list[tuple[object, int, str]] = [(data, 0, "")]
    nodes = 0
    while stack:
        value, depth, path = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise InputError(
                f"{where}: more than {MAX_NODES} values (aliases expanded); a config is far smaller"
            )
        if not isinstance(value, (dict, list)):
            continue
        if depth >= MAX_NESTING:
            raise InputError(
                f"{where}: nested deeper than {MAX_NESTING} levels at {_cut(path) or 'the top'} (or it contains itself)"
            )
        if isinstance(value, dict):
            for key, child in value.items():
                if not isinstance(key, str):
                    raise InputError(
                        f"{where}: {_cut(path) or 'top level'}: keys must be strings, got {type(key).__name__} key"
                    )
                stack.append((child, depth + 1, f"{path}.{key}" if path else key))
        else:
            stack.extend((child, depth + 1, f"{path}[{i}]") for i, child in enumerate(value))


def _cut(path: str) -> str:
    return path if len(path) <= MAX_ECHO else path[: MAX_ECHO - 1] + "…"


def read_config_text(path, max_bytes: int = MAX_CONFIG_BYTES) -> str:  # type: ignore[no-untyped-def]
    """The file's text, refusing more than ``max_bytes`` (read with a cap: sizes of pipes lie)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
    if len(raw) > max_bytes:
        raise InputError(f"{path}: larger than {max_bytes >> 20} MiB; a config is far smaller")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: cannot read as text (UnicodeDecodeError)") from None
