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
from memtune.infile import read_capped
from memtune.limits import MAX_ALIASES, MAX_CONFIG_BYTES, MAX_ECHO, MAX_NESTING, MAX_NODES
from memtune.numbers import echo

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
        node = loader.get_single_node()
        if node is not None:
            _refuse_duplicate_keys(node)
        data = None if node is None else loader.construct_document(node)
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


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _refuse_duplicate_keys(root: yaml.Node) -> None:
    """A mapping that names a key twice: YAML loaders keep the last value without a word, so a
    setting written twice would silently lose the first (``<<:`` merges are not duplicates:
    keys written beside a merge override the merged ones by design)."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # an alias: the node is checked once
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                stack += [key, value]
                if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                    continue
                line, ident = key.start_mark.line + 1, (key.tag, key.value)
                if ident in lines:
                    where = f"lines {lines[ident]} and {line}" if lines[ident] != line else f"line {line}"
                    raise InputError(
                        f"key {echo(key.value)} is given twice, at {where} (YAML would keep only the last); "
                        "remove one"
                    )
                lines[ident] = line
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    mapping: dict[str, object] = {}
    for key, value in pairs:
        if key in mapping:
            raise _DuplicateKey(key)
        mapping[key] = value
    return mapping


def load_json(text: str, where: str) -> object:
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise InputError(
            f"{where}: key {echo(exc.args[0])} is given twice in one object (JSON readers keep only the last); "
            "remove one"
        ) from None
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
    """The file's text, refusing more than ``max_bytes`` (read with a cap: sizes of pipes lie; a
    FIFO is opened without waiting for a writer, ``memtune/infile.py``)."""
    data = read_capped(path, "a config", max_bytes, regular=False)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: cannot read as text (UnicodeDecodeError)") from None
