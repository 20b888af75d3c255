"""Files memtune writes for a user: checked before any work, written atomically, and never
replacing an existing file unless the user asked for it.

A file is written to a temporary file in its directory and then moved into place, so a reader
never sees half a file and a failure (a full disk, an interrupt) leaves nothing behind. Without
``replace`` the move is a hard link, which fails rather than replaces when the name exists, so a
file created meanwhile is not lost either.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from memtune.errors import InputError
from memtune.numbers import cut


def _created_mode() -> int:
    """The mode ``open()`` gives a new file (mkstemp's is 0o600, too private for a config)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def check_output_path(option: str, path: str, *, force: bool, inputs: tuple[str, ...] = ()) -> Path:
    """``path`` as a place ``option`` may write to, or a one-line refusal.

    A file that is one of ``inputs`` is refused even with ``force``: the input is the record of
    what the user ran, and a suggestion written over it cannot be compared with it any more."""
    target = Path(path)
    shown = f"{option} {cut(path)}"
    if path.endswith(("/", os.sep)):  # Path() drops the separator: DIR/ would become a file DIR
        raise InputError(f"{shown}: names a directory; give a file name")
    try:
        for source in inputs:
            if target.exists() and Path(source).exists() and os.path.samefile(target, source):
                raise InputError(f"{shown}: is the input {cut(source)}; write to another file")
        if target.is_dir():
            raise InputError(f"{shown}: is a directory")
        if not target.parent.is_dir():
            raise InputError(f"{shown}: directory {cut(str(target.parent))} does not exist")
        if not force and (target.exists() or target.is_symlink()):
            raise InputError(f"{shown}: already exists (--force replaces it)")
        if target.exists() and not target.is_file():  # a device or a pipe is not replaced by a file
            raise InputError(f"{shown}: not a regular file")
    except OSError as exc:
        raise InputError(f"{shown}: {exc.strerror or exc.__class__.__name__}") from None
    if not os.access(target.parent, os.W_OK):
        raise InputError(f"{shown}: directory {cut(str(target.parent))} is not writable")
    return target


def write_atomically(
    target: Path, write: Callable[[BinaryIO], object], *, replace: bool, option: str | None = None
) -> None:
    """Call ``write`` on a temporary file next to ``target``, then move it to ``target``.

    With ``option`` (the command-line option that named the file) a failure is an InputError
    naming it; without, the OSError propagates (the Python API's callers handle their own)."""
    # A short name of its own: the target's name plus a suffix could exceed the file system's limit.
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".memtune-", suffix=".tmp")
    try:
        os.fchmod(fd, _created_mode())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(temporary, target)
        else:
            os.link(temporary, target)
    except FileExistsError:
        if option is None:
            raise
        raise InputError(f"{option} {cut(str(target))}: already exists (--force replaces it)") from None
    except OSError as exc:
        if option is None:
            raise
        raise InputError(f"{option} {cut(str(target))}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
