"""Just enough of a bash reader for training launch scripts.

Launch scripts build the argument list out of variables (``GPT_ARGS="..."``, bash arrays
``MODEL_ARGS=( ... )``, ``${VAR:-default}``, ``$((GPUS_PER_NODE*NUM_NODES))``) and end in one
``torchrun ... pretrain_gpt.py ${ARGS[@]}`` line. This module expands what can be expanded without
running anything; what it cannot expand (``$1``, ``$(command)``, unset variables) stays literal.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from memtune.errors import InputError
from memtune.limits import MAX_ARITHMETIC_CHARS, MAX_ARITHMETIC_VALUE, MAX_LIST, MAX_SHELL_VALUE

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGNMENT = re.compile(rf"^({_NAME})(\+?=)(.*)$", re.S)
_ARRAY_START = re.compile(rf"^\s*(?:export\s+|declare\s+-a\s+|local\s+)?({_NAME})(\+?=)\(")

# What `evaluate` gives: an integer or a (nested) list of them.
Arithmetic: TypeAlias = int | list["Arithmetic"]


@dataclass
class Command:
    words: list[str]
    env: dict[str, str]  # NAME=value prefixes of this command


@dataclass
class Script:
    variables: dict[str, str | list[str]] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)
    commands: list[Command] = field(default_factory=list)

    def exported_value(self, name: str) -> str | None:
        value = self.variables.get(name)
        return value if name in self.exported and isinstance(value, str) else None


def parse_script(text: str) -> Script:
    script = Script()
    for number, line in enumerate(_logical_lines(text), 1):
        array = _ARRAY_START.match(line)
        if array:
            name, op = array.groups()
            body = line[array.end() :].rsplit(")", 1)[0]
            items = _split(_bounded(_expand(body, script.variables), number))
            previous = script.variables.get(name, []) if op == "+=" else []
            elements = (previous if isinstance(previous, list) else [previous]) + items
            _bounded(" ".join(elements), number)
            script.variables[name] = elements
            if line.lstrip().startswith("export"):
                script.exported.add(name)
            continue
        words = _split(_bounded(_expand(line, script.variables), number))
        if not words:
            continue
        exporting = words[0] == "export"
        if exporting:
            words = words[1:]
        prefix: dict[str, str] = {}
        while words and (assignment := _ASSIGNMENT.match(words[0])):
            words.pop(0)
            name, op, value = assignment.groups()
            prefix[name] = _bounded(
                (str(script.variables.get(name, "")) + value) if op == "+=" else value, number
            )
        if exporting:
            script.exported.update(words)  # `export NAME` of an existing variable
            words = []
        if words:
            script.commands.append(Command(words=words, env=prefix))
        else:
            script.variables.update(prefix)
            if exporting:
                script.exported.update(prefix)
    return script


def _bounded(text: str, line: int) -> str:
    if len(text) > MAX_SHELL_VALUE:
        raise InputError(
            f"logical line {line} is longer than {MAX_SHELL_VALUE} characters once variables are expanded "
            "(a variable that keeps doubling itself?); memtune reads no further"
        )
    return text


# `cat <<EOF`, `<<-'END'`: the lines up to the delimiter are data, not commands (`<<<` is a here-string).
_HEREDOC = re.compile(r"(?<!<)<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined, multi-line array assignments kept whole, and
    here-document bodies left out."""
    lines = re.sub(r"\\\r?\n", " ", text).splitlines()
    out: list[str] = []
    open_array: list[str] | None = None
    heredoc: tuple[str, bool] | None = None  # (delimiter, tabs stripped)
    for line in lines:
        if heredoc is not None:
            delimiter, strip_tabs = heredoc
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                heredoc = None
            continue
        if "<<" in line and (doc := _HEREDOC.search(_strip_comment(line))):
            heredoc = (doc.group(3), doc.group(1) == "-")
        if open_array is not None:
            open_array.append(_strip_comment(line))
            if ")" in _strip_comment(line):
                out.append(" ".join(open_array))
                open_array = None
            continue
        if (array := _ARRAY_START.match(line)) and ")" not in _strip_comment(line[array.end() :]):
            open_array = [line]
            continue
        out.append(line)
    if open_array is not None:
        out.append(" ".join(open_array) + ")")
    return out


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` that starts a word, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote, as on each line of a multi-line string: close it
        for quote in ('"', "'"):
            try:
                return shlex.split(text + quote, comments=True)
            except ValueError:
                continue
        return text.split()


def _expand(text: str, variables: dict[str, str | list[str]]) -> str:
    def array(match: re.Match[str]) -> str:
        """``"${A[@]}"``: one word per element, as they are."""
        value = variables.get(match.group(1))
        if value is None:
            return match.group(0)
        return " ".join(shlex.quote(v) for v in (value if isinstance(value, list) else _split(value)))

    def unquoted_array(match: re.Match[str]) -> str:
        """``${A[@]}``: the elements split again on blanks (``A=("--num-layers 32")`` gives two words)."""
        value = variables.get(match.group(1))
        if value is None:
            return match.group(0)
        return " ".join(value) if isinstance(value, list) else value

    def scalar(match: re.Match[str]) -> str:
        name, default = match.group("name") or match.group("bare"), match.group("default")
        found = variables.get(name)
        value = " ".join(found) if isinstance(found, list) else found
        if value is None or (value == "" and default is not None and match.group("colon")):
            return _expand(default, variables) if default is not None else match.group(0)
        return value

    def arithmetic(whole: str, inner: str) -> str:
        expression = re.sub(rf"\$?({_NAME})", lambda m: str(variables.get(m.group(1), m.group(0))), inner)
        result = evaluate(expression.replace("/", "//"))
        return str(result) if isinstance(result, int) else whole

    text = _substitute_arithmetic(text, arithmetic)
    text = re.sub(rf'"\$\{{({_NAME})\[[@*]\]\}}"', array, text)
    text = re.sub(rf"\$\{{({_NAME})\[[@*]\]\}}", unquoted_array, text)
    return re.sub(
        rf"\$(?:\{{(?P<name>{_NAME}|[0-9]+)(?:(?P<colon>:?)-(?P<default>[^}}]{{0,256}}))?\}}|(?P<bare>{_NAME}))",
        scalar,
        text,
    )


def _substitute_arithmetic(text: str, replace: Callable[[str, str], str]) -> str:
    """Each ``$(( ... ))`` replaced by ``replace(whole, inside)``, scanning the text once (a lazy
    regex would rescan the rest of the line from every unclosed ``$((``)."""
    out: list[str] = []
    pos = 0
    while (start := text.find("$((", pos)) >= 0:
        end = text.find("))", start + 3)
        if end < 0:
            break
        out.append(text[pos:start])
        out.append(replace(text[start : end + 2], text[start + 3 : end]))
        pos = end + 2
    out.append(text[pos:])
    return "".join(out)


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}


def evaluate(expression: str) -> Arithmetic | None:
    """Integer arithmetic and list literals (``[0]*3+[1]*58``); None for anything else, and for
    expressions longer than MAX_ARITHMETIC_CHARS or with values beyond the limits."""
    if len(expression) > MAX_ARITHMETIC_CHARS:
        return None
    try:
        return _evaluate(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, RecursionError, MemoryError):
        return None


def _evaluate(node: ast.AST) -> Arithmetic:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_evaluate(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = _evaluate(node.operand)
        if isinstance(operand, list):
            raise TypeError("a list cannot be negated")
        return -operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Mult):
            items, count = (left, right) if isinstance(left, list) else (right, left)
            if isinstance(items, list) and isinstance(count, int) and count * len(items) > MAX_LIST:
                raise ValueError("list too long")
        return _checked(_OPERATORS[type(node.op)](left, right))
    raise ValueError("not a plain integer or list expression")


def _checked(value: Arithmetic) -> Arithmetic:
    if isinstance(value, list) and len(value) > MAX_LIST:
        raise ValueError("list too long")
    if isinstance(value, int) and abs(value) > MAX_ARITHMETIC_VALUE:
        raise ValueError("number too large")
    return value
