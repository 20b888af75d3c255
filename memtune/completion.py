"""Shell completion scripts for bash, zsh and fish, written from the command's own parser.

``memtune completion bash`` prints a script that completes the commands, each command's options,
and the values of ``--recipe`` (the catalog's recipes), ``--gpu`` (its GPUs), ``--format``,
``--mode`` and every other option with fixed choices, presets for ``plan``'s MODEL and for
``model.preset=``, and file names elsewhere. The names are written into the script, so
completing runs no Python; regenerate it after upgrading memtune.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass

from memtune.catalog.gpus import list_gpus
from memtune.catalog.models import list_models
from memtune.catalog.recipes import list_recipes
from memtune.errors import InputError

SHELLS = ("bash", "zsh", "fish")
INSTALL = {
    "bash": 'eval "$(memtune completion bash)"   # e.g. in ~/.bashrc',
    "zsh": 'eval "$(memtune completion zsh)"    # e.g. in ~/.zshrc',
    "fish": "memtune completion fish > ~/.config/fish/completions/memtune.fish",
}


@dataclass(frozen=True)
class Words:
    """What completes where: commands, each command's options, and option values."""

    commands: dict[str, list[str]]  # command -> its options
    values: dict[str, list[str]]  # option -> the words it takes (same for every command)
    presets: list[str]


def words_of(parser: argparse.ArgumentParser) -> Words:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands: dict[str, list[str]] = {}
    values: dict[str, list[str]] = {
        "--recipe": [r.label for r in list_recipes()],
        "--gpu": [g.name for g in list_gpus()],
    }
    for name, command in sub.choices.items():
        commands[name] = sorted(o for a in command._actions for o in a.option_strings if o.startswith("--"))
        for action in command._actions:
            if action.choices and action.option_strings:
                for option in action.option_strings:
                    values.setdefault(option, [str(c) for c in action.choices])
    return Words(commands, values, [m.name for m in list_models()])


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    if shell not in SHELLS:
        raise InputError(f"completion: shell must be one of {', '.join(SHELLS)}, got {shell!r}")
    words = words_of(parser)
    return _fish(words) if shell == "fish" else _bash(words, zsh=shell == "zsh")


def _words(items: list[str]) -> str:
    return shlex.quote(" ".join(items))


def _bash(words: Words, *, zsh: bool) -> str:
    lines = ["# memtune completion (memtune completion --help)"]
    if zsh:
        lines.append("autoload -U +X bashcompinit && bashcompinit")
    lines += [
        "_memtune() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local command="${COMP_WORDS[1]}"',
        '    if [ "$COMP_CWORD" -eq 1 ]; then',
        f'        COMPREPLY=($(compgen -W {_words(list(words.commands))} -- "$cur")); return',
        "    fi",
        '    case "$prev" in',
    ]
    for option, choices in sorted(words.values.items()):
        lines.append(f'        {option}) COMPREPLY=($(compgen -W {_words(choices)} -- "$cur")); return;;')
    lines += [
        "    esac",
        '    case "$cur" in',
        f'        model.preset=*) COMPREPLY=($(compgen -P model.preset= -W {_words(words.presets)} -- "${{cur#model.preset=}}")); return;;',
        "        -*)",
        '            case "$command" in',
    ]
    for command, options in words.commands.items():
        lines.append(f'                {command}) COMPREPLY=($(compgen -W {_words(options)} -- "$cur"));;')
    lines += [
        "            esac; return;;",
        "    esac",
        f'    if [ "$command" = plan ]; then COMPREPLY=($(compgen -W {_words(words.presets)} -- "$cur")); fi',
        '    COMPREPLY+=($(compgen -f -- "$cur"))',
        "}",
        "complete -o filenames -F _memtune memtune",
    ]
    return "\n".join(lines) + "\n"


def _fish(words: Words) -> str:
    lines = ["# memtune completion (memtune completion --help)", "complete -c memtune -f"]
    commands = " ".join(words.commands)
    lines.append(
        f"complete -c memtune -n 'not __fish_seen_subcommand_from {commands}' -a {_words(list(words.commands))}"
    )
    for command, options in words.commands.items():
        seen = f"-n '__fish_seen_subcommand_from {command}'"
        for option in options:
            choices = words.values.get(option)
            takes = f" -xa {_words(choices)}" if choices else ""
            lines.append(f"complete -c memtune {seen} -l {option[2:]}{takes}")
        lines.append(f"complete -c memtune {seen} -F")  # files for CONFIG, logs, snapshots
    lines.append(f"complete -c memtune -n '__fish_seen_subcommand_from plan' -a {_words(words.presets)}")
    return "\n".join(lines) + "\n"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish)",
        description="Print a completion script for memtune's commands, options, recipes, presets and GPUs. "
        + " ".join(f"{shell}: {how}." for shell, how in INSTALL.items()),
    )
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    print(script(args.shell, args.root_parser), end="")
    return 0
