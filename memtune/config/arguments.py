"""The command-line words that name a job, shared by every command that takes one.

``CONFIG [OVERRIDE.yaml ...] [key=value ...]`` or ``--recipe NAME [OVERRIDE.yaml ...]
[key=value ...]``: the first file (or the recipe) is the job, each further file a Megatron-Bridge
override laid over it in turn, each ``section.key=value`` (and ``defaults=STACK``) a dotted
override applied last; ``model.preset=NAME`` fills in a model preset. The word ``recipe:NAME`` in
the place of CONFIG names a recipe too: commands that name two jobs (``diff``, ``bisect
--configs``) take each that way (:func:`load_word`).
"""

from __future__ import annotations

import argparse

from memtune.config import LoadedJob, load_job
from memtune.errors import InputError
from memtune.infile import names_a_file

RECIPE_HELP = (
    "start from this Megatron-Bridge recipe (`memtune recipes` lists them); files given are then "
    "Bridge override files laid over it"
)


def add_job_arguments(parser: argparse.ArgumentParser, config_help: str) -> None:
    """``config``, ``overrides`` and ``--recipe`` on ``parser``."""
    parser.add_argument("config", nargs="?", help=config_help)
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="more Bridge override files, then dotted overrides, e.g. model.tensor_model_parallel_size=8",
    )
    add_recipe_argument(parser)


def add_recipe_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recipe", metavar="NAME", help=RECIPE_HELP)


def is_override(word: str) -> bool:
    """A ``key=value`` word that is not the name of a file (a malformed one is still an override:
    the override parser says what is wrong with it)."""
    return "=" in word and not names_a_file(word)


RECIPE_WORD = "recipe:"


def load_from_words(words: list[str], recipe: str | None, usage: str) -> LoadedJob:
    """The job ``words`` (files then dotted overrides) and ``recipe`` describe."""
    files = [w for w in words if not is_override(w)]
    overrides = [w for w in words if is_override(w)]
    if files and files[0].startswith(RECIPE_WORD) and not names_a_file(files[0]):
        if recipe is not None:
            raise InputError(f"{files[0]} and --recipe {recipe}: name one recipe ({usage})")
        recipe, files = files[0].removeprefix(RECIPE_WORD), files[1:]
    if recipe is None and not files:
        raise InputError(f"a config file or --recipe NAME is required: {usage}")
    base, layers = (None, files) if recipe is not None else (files[0], files[1:])
    return load_job(base, overrides, recipe=recipe, layers=layers)


def load_from_args(args: argparse.Namespace, usage: str) -> LoadedJob:
    """The job of a command registered with :func:`add_job_arguments`."""
    words = [w for w in (args.config, *args.overrides) if w is not None]
    return load_from_words(words, args.recipe, usage)


def load_word(word: str, overrides: list[str] | tuple[str, ...], usage: str) -> LoadedJob:
    """One of the two jobs a command compares: a config file or ``recipe:NAME``, with ``overrides``."""
    return load_from_words([word, *overrides], None, usage)


def load_written(args: argparse.Namespace, usage: str) -> LoadedJob:
    """The job as the user's files (or recipe) give it, without the dotted overrides: what a
    file written in the input's own format changes (memtune/config/writers.py)."""
    words = [w for w in (args.config, *args.overrides) if w is not None and not is_override(w)]
    return load_from_words(words, args.recipe, usage)
