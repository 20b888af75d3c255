"""The environment of every process memtune starts: explicit, and without git's variables.

git reads ``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` and some forty other ``GIT_*``
variables before its own command line: with ``GIT_WORK_TREE`` set, a checkout memtune makes in a
temporary worktree lands in the user's work tree instead. git itself exports ``GIT_DIR`` (and
more) to the hooks it runs, and some dotfile set-ups export ``GIT_DIR``/``GIT_WORK_TREE`` for a
whole shell, so a memtune started from either would act on the wrong repository. Every child
therefore gets a copy of the environment without them, and the git commands memtune runs name
their git directory and work tree on the command line (``memtune/regress/gitbisect.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

GIT_PREFIX = "GIT_"


def git_variables(base: Mapping[str, str]) -> list[str]:
    """The names of ``base``'s git variables, sorted."""
    return sorted(name for name in base if name.startswith(GIT_PREFIX))


def child_environment(
    base: Mapping[str, str] | None = None, updates: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` (default: this process's environment) without git's variables, with ``updates``."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith(GIT_PREFIX)}
    env.update(updates or {})
    return env
