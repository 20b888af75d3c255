"""Files memtune writes for a user: checked before any work, written atomically, never through a
link, never over a file it was asked to read, and never replacing an existing file unless the
user asked for it. Every file memtune writes for a user goes through here.

A whole file is written to a temporary file in its directory and then moved into place, so a
reader never sees half a file and a failure (a full disk, an interrupt) leaves nothing behind.
Without ``replace`` the move is a hard link, which fails rather than replaces when the name
exists, so a file created meanwhile is not lost either. The move replaces a name, never the file
behind it, so a name that is a link to a file elsewhere (``output.log -> ~/.bashrc``) or one of
several hard links would be safe to replace; it is refused all the same, because a link in the
place of a file memtune writes was not made by memtune. A stream written while a command runs
(``memtune run``'s ``output.log``, the monitor's records) is opened with ``O_NOFOLLOW``, created
new rather than truncated, and checked to be a regular file before the first byte.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from memtune.errors import InputError
from memtune.infile import kind_of, reason
from memtune.numbers import cut

LINK_REFUSED = "is a symbolic link; memtune does not write through links (name the file itself)"


def _created_mode() -> int:
    """The mode ``open()`` gives a new file (mkstemp's is 0o600, too private for a config)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _is_input(target: Path, source: str) -> bool:
    """Whether writing ``target`` would write a file of the input ``source``: the same file, or
    an existing file inside an input directory (it was read, or will be)."""
    try:
        if not target.exists() or not os.path.exists(source):
            return False
        if os.path.samefile(target, source):
            return True
        if not os.path.isdir(source):
            return False
        folder = Path(source).resolve()
        return folder in target.resolve().parents
    except (OSError, ValueError):
        return False


def check_output_path(
    option: str, path: str, *, force: bool, inputs: tuple[str, ...] = (), replaces: bool = False
) -> Path:
    """``path`` as a place ``option`` may write to, or a one-line refusal.

    A file that is one of ``inputs`` (or lies in an input directory) is refused even with
    ``force``: the input is the record of what the user ran, and output written over it cannot be
    compared with it any more. A link or a special file in the target's place is refused always;
    an existing file needs ``force`` unless ``replaces`` (a plot, which is replaced as it is
    drawn again)."""
    target = Path(path)
    shown = f"{option} {cut(path)}"
    if not path or path.endswith(("/", os.sep)):  # Path() drops the separator: DIR/ would become a file DIR
        raise InputError(f"{shown}: names a directory; give a file name")
    try:
        for source in inputs:
            if _is_input(target, source):
                what = "the input" if os.path.samefile(target, source) else "a file of the input"
                raise InputError(f"{shown}: is {what} {cut(source)}; write to another file")
        if target.is_symlink():
            raise InputError(f"{shown}: {LINK_REFUSED}")
        if target.is_dir():
            raise InputError(f"{shown}: is a directory")
        if not target.parent.is_dir():
            raise InputError(f"{shown}: directory {cut(str(target.parent))} does not exist")
        if target.exists() and not target.is_file():  # a device or a pipe is not replaced by a file
            raise InputError(f"{shown}: not a regular file")
        if not (force or replaces) and target.exists():
            raise InputError(f"{shown}: already exists (--force replaces it)")
    except OSError as exc:
        raise InputError(f"{shown}: {reason(exc)}") from None
    if not os.access(target.parent, os.W_OK):
        raise InputError(f"{shown}: directory {cut(str(target.parent))} is not writable")
    return target


def _refuse_non_file(target: Path) -> None:
    """An OSError when ``target`` is a link or anything but a regular file (checked again at the
    moment of writing: the place may have changed since :func:`check_output_path`)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise OSError(errno.ELOOP, LINK_REFUSED, str(target))
    if not stat.S_ISREG(mode):
        raise OSError(errno.EEXIST, f"is {kind_of(mode)}, not a regular file", str(target))


def write_atomically(
    target: Path, write: Callable[[BinaryIO], object], *, replace: bool, option: str | None = None
) -> None:
    """Call ``write`` on a temporary file next to ``target``, then move it to ``target``.

    With ``option`` (the command-line option that named the file) a failure is an InputError
    naming it; without, the OSError propagates (the Python API's callers handle their own)."""
    try:
        _refuse_non_file(target)
        # A short name of its own: the target's name plus a suffix could exceed the file system's limit.
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".memtune-", suffix=".tmp")
    except OSError as exc:
        if option is None:
            raise
        raise InputError(f"{option} {cut(str(target))}: {exc.strerror or reason(exc)}") from None
    try:
        os.fchmod(fd, _created_mode())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        _move(Path(temporary), target, replace)
    except OSError as exc:
        if option is None:
            raise
        raise _refusal(option, target, exc) from None
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def _move(source: Path, target: Path, replace: bool) -> None:
    """``source`` to ``target`` in one step: replacing it with ``replace``, else a hard link,
    which fails rather than replaces when the name exists."""
    _refuse_non_file(target)
    if replace:
        os.replace(source, target)
    else:
        os.link(source, target)


def _refusal(option: str, target: Path, exc: OSError) -> InputError:
    if isinstance(exc, FileExistsError):
        return InputError(f"{option} {cut(str(target))}: already exists (--force replaces it)")
    return InputError(f"{option} {cut(str(target))}: cannot write ({exc.strerror or exc})")


def scratch_beside(target: Path) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory next to ``target`` for a file another process writes (the
    measurement's snapshot), which :func:`move_into_place` then moves to ``target`` in one step."""
    return tempfile.TemporaryDirectory(dir=target.parent, prefix=".memtune-")


def move_into_place(source: Path, target: Path, *, replace: bool, option: str) -> None:
    """``source`` (made in :func:`scratch_beside`) moved to ``target``, as
    :func:`write_atomically` moves its temporary file."""
    try:
        _move(source, target, replace)
    except OSError as exc:
        raise _refusal(option, target, exc) from None


def open_stream(target: Path, *, replace: bool, append: bool = False) -> BinaryIO:
    """``target`` open for writing as output arrives: created new (an existing regular file is
    removed first with ``replace``, so a hard link elsewhere keeps its content), or appended to
    with ``append``; never through a link, never a device or a pipe. OSError on failure."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if append:
        flags |= os.O_APPEND
    else:
        if replace:
            _refuse_non_file(target)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
        flags |= os.O_EXCL
    try:
        fd = os.open(target, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, LINK_REFUSED, str(target)) from None
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise OSError(errno.ENXIO, "is a pipe, not a regular file", str(target)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OSError(errno.EEXIST, f"is {kind_of(mode)}, not a regular file", str(target))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab" if append else "wb")
