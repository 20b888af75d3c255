"""The environment of every process memtune starts: an explicit copy, without git's variables
that say which repository git works on.

git reads ``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` and more before its own command line:
with ``GIT_WORK_TREE`` set, a checkout memtune makes in a temporary worktree lands in the user's
work tree instead. git itself exports ``GIT_DIR`` (and more) to the hooks it runs, and some
dotfile set-ups export ``GIT_DIR``/``GIT_WORK_TREE`` for a whole shell, so a memtune started from
either would act on the wrong repository. So:

- the processes memtune runs for itself (git, the measurement's Python) get no ``GIT_*``
  variable at all, and the git commands name their git directory and work tree on the command
  line (``memtune/regress/gitbisect.py``);
- a user's command (``memtune run``, ``bisect``'s command at each commit) gets the user's
  environment without the variables that point git at a repository: the list git itself clears
  when it enters another repository (``git rev-parse --local-env-vars``; ``local_repo_env`` in
  git's ``environment.c``), the ``GIT_CONFIG_KEY_n``/``VALUE_n`` pairs that ``GIT_CONFIG_COUNT``
  enables, and the object quarantine of a receive hook. ``GIT_SSL_CAINFO``, ``GIT_SSH_COMMAND``
  and the like, which say how git reaches a network, are the user's and stay.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

GIT_PREFIX = "GIT_"
# git 2.39's `git rev-parse --local-env-vars`, and GIT_QUARANTINE_PATH (set for pre-receive hooks).
REPOSITORY_VARIABLES = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_OBJECT_DIRECTORY",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_GRAFT_FILE",
        "GIT_INDEX_FILE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_REPLACE_REF_BASE",
        "GIT_PREFIX",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_SHALLOW_FILE",
        "GIT_COMMON_DIR",
        "GIT_QUARANTINE_PATH",
    }
)


def repository_variables(base: Mapping[str, str]) -> list[str]:
    """The names of ``base``'s variables that point git at a repository, sorted."""
    return sorted(
        name
        for name in base
        if name in REPOSITORY_VARIABLES or name.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    )


def command_environment(base: Mapping[str, str]) -> dict[str, str]:
    """A user's command's environment: ``base`` without :func:`repository_variables`."""
    dropped = set(repository_variables(base))
    return {k: v for k, v in base.items() if k not in dropped}


def child_environment(
    base: Mapping[str, str] | None = None, updates: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a process memtune runs for itself: ``base`` (default: this process's
    environment) without any of git's variables, with ``updates``."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith(GIT_PREFIX)}
    env.update(updates or {})
    return env
