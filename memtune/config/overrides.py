"""Hydra/Bridge-style dotted overrides: ``model.tensor_model_parallel_size=8``."""

from __future__ import annotations

import copy
from typing import Any

from memtune.config.loaders._guards import load_yaml
from memtune.errors import InputError
from memtune.numbers import echo


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    result = copy.deepcopy(data)
    problems = []
    for item in overrides:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if path == ["defaults"] and sep:  # the one top-level scalar: the stack whose defaults apply
            result["defaults"] = text.strip()
            continue
        if not sep or len(path) < 2 or not all(path):
            problems.append(
                f"override {echo(item)}: expected section.key=value, e.g. model.tensor_model_parallel_size=8 (or defaults=STACK)"
            )
            continue
        try:
            value = load_yaml(text, f"override {echo(item)}") if text.strip() else None
        except InputError as exc:
            if "invalid YAML" not in exc.problems[0]:
                raise  # too deep, too many values: not something to read as a plain string
            value = text
        node = result
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                problems.append(f"override {echo(item)}: {echo(part)[1:-1]} is not a section")
                break
            node = child
        else:
            node[path[-1]] = value
    if problems:
        raise InputError(problems)
    return result
