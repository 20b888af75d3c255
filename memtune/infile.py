"""Files memtune reads for a user: opened without blocking, read with a cap, and named exactly
when they cannot be read.

``open()`` of a FIFO waits for a writer that may never come (a FIFO is waited on for at most
``FIFO_WAIT_SECONDS``), a device such as ``/dev/zero`` never
ends, and a file's reported size is no bound (pipes and devices report 0, a file can grow while it
is read). So a file is opened non-blocking, checked for what it is (a directory, a device), and
read with a cap: a larger input is refused before it is parsed, whatever it claims to be. A word
that may be a file name (``key=value`` words, ``recipe:NAME``) is tested without letting the
system's own refusals (a name longer than 255 bytes) escape as errors.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from memtune.errors import InputError
from memtune.limits import FIFO_WAIT_SECONDS
from memtune.numbers import cut


def names_a_file(word: str) -> bool:
    """Whether ``word`` names something on disk; a name the system refuses to look up (too long,
    a NUL byte) names nothing."""
    try:
        return os.path.lexists(word)
    except (OSError, ValueError):
        return False


def kind_of(mode: int) -> str:
    """What a non-regular file is, in the words an error line uses."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def reason(exc: OSError) -> str:
    """The system's reason for an OSError, as one line."""
    if exc.errno == errno.ENOENT:
        return "no such file"
    return exc.strerror or exc.__class__.__name__


@contextlib.contextmanager
def opened(path: str | os.PathLike[str], what: str, *, regular: bool = True) -> Iterator[BinaryIO]:
    """``path`` open for reading in binary. A FIFO is opened without waiting for a writer; with
    ``regular`` anything but a regular file (a directory, a pipe, a device) is refused by name."""
    shown = cut(os.fspath(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        why = reason(exc) if isinstance(exc, OSError) else "not a file name"
        raise InputError(f"{shown}: cannot read {what} ({why})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode) or (regular and not stat.S_ISREG(mode)):
            raise InputError(f"{shown}: is {kind_of(mode)}, not a file of {what}")
        # A FIFO is readable once a writer has written or gone; one nobody opens is not waited on forever.
        if stat.S_ISFIFO(mode) and not select.select([fd], [], [], FIFO_WAIT_SECONDS)[0]:
            raise InputError(f"{shown}: a pipe nothing wrote to in {FIFO_WAIT_SECONDS:g} s")
        # Reads block again: a pipe whose writer is slow is waited for, not taken for empty.
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        handle = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_capped(path: str | os.PathLike[str], what: str, limit: int, *, regular: bool = True) -> bytes:
    """The bytes of ``path``, refusing more than ``limit`` of them before any is parsed."""
    with opened(path, what, regular=regular) as handle:
        return read_within(handle, limit, cut(os.fspath(path)), what)


def read_within(handle: BinaryIO, limit: int, shown: str, what: str, head: bytes = b"") -> bytes:
    """``head`` and the rest of ``handle``, refusing more than ``limit`` bytes in all (``shown``
    and ``what`` name the file and what it holds in the refusal)."""
    pieces, total = [head], len(head)
    try:
        while total <= limit:
            piece = handle.read(min(1 << 24, limit + 1 - total))
            if not piece:
                break
            pieces.append(piece)
            total += len(piece)
    except OSError as exc:
        raise InputError(f"{shown}: cannot read {what} ({reason(exc)})") from None
    if total > limit:
        raise InputError(f"{shown}: larger than {_size(limit)}, memtune's limit for {what}")
    return b"".join(pieces)


def read_text(path: str | os.PathLike[str], what: str, limit: int, *, regular: bool = True) -> str:
    """:func:`read_capped` decoded as UTF-8."""
    try:
        return read_capped(path, what, limit, regular=regular).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{cut(os.fspath(path))}: cannot read as text (not UTF-8)") from None


def files_in(folder: Path, suffixes: tuple[str, ...], what: str, *, recursive: bool = False) -> list[Path]:
    """The files of ``folder`` (and, with ``recursive``, its subfolders) whose names end in one of
    ``suffixes``, sorted; an entry of that name that is not a regular file (a FIFO, a device, a
    dangling link) is refused by name rather than skipped without a word."""
    try:
        entries = sorted(folder.rglob("*") if recursive else folder.iterdir())
        chosen = []
        for entry in entries:
            if not entry.name.endswith(suffixes):
                continue
            if entry.is_file():
                chosen.append(entry)
            elif not (recursive and entry.is_dir()):  # a subfolder named x.yaml is walked by rglob
                kind = kind_of(entry.stat().st_mode) if entry.exists() else "a dangling link"
                raise InputError(f"{cut(str(entry))}: is {kind}, not a file of {what}")
    except OSError as exc:
        raise InputError(f"{cut(str(folder))}: cannot list ({reason(exc)})") from None
    return chosen


def distinct_files(files: list[Path], what: str) -> list[Path]:
    """``files``, refusing two names of one file (links, hard links): each would be read again."""
    seen: dict[tuple[int, int], Path] = {}
    for path in files:
        try:
            info = path.stat()
        except OSError as exc:
            raise InputError(f"{cut(str(path))}: cannot read {what} ({reason(exc)})") from None
        first = seen.setdefault((info.st_dev, info.st_ino), path)
        if first is not path:
            raise InputError(
                f"{cut(str(path))} and {cut(str(first))} are the same file; give each {what} once"
            )
    return files


def _size(limit: int) -> str:
    return f"{limit >> 30} GiB" if limit >= 1 << 30 else f"{limit >> 20} MiB"
