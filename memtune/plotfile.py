"""Where ``--plot`` may write: checked before any work, so a bad path costs nothing.

The file's extension picks the format and is required (matplotlib would otherwise append
``.png`` and write a file of another name than the one given); the directory must exist and be
writable (memtune does not create directories).
"""

from __future__ import annotations

import os
from pathlib import Path

from memtune.errors import InputError
from memtune.numbers import cut

PLOT_FORMATS = (".png", ".pdf", ".svg")


def check_plot_path(path: str) -> Path:
    target = Path(path)
    shown = cut(path)
    if path.endswith(("/", os.sep)):  # Path() drops the separator, matplotlib would write DIR/.png
        raise InputError(f"--plot {shown}: names a directory; give a file name such as plot.png")
    if target.suffix.lower() not in PLOT_FORMATS:
        raise InputError(
            f"--plot {shown}: the file name must end in {', '.join(PLOT_FORMATS)} (the extension picks the format)"
        )
    directory = target.parent
    try:
        if target.is_dir():
            raise InputError(f"--plot {shown}: is a directory")
        if not directory.is_dir():
            raise InputError(f"--plot {shown}: directory {cut(str(directory))} does not exist")
    except OSError as exc:
        raise InputError(f"--plot {shown}: {exc.strerror or exc.__class__.__name__}") from None
    if not os.access(directory, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise InputError(f"--plot {shown}: not writable")
    return target


def save_figure(fig, path: str, **options: object) -> None:  # type: ignore[no-untyped-def]
    """``fig.savefig`` with its failures (disk full, permissions changed meanwhile) as one line."""
    try:
        fig.savefig(path, **options)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else cut(str(exc))
        raise InputError(f"--plot {cut(path)}: cannot write the plot ({reason})") from None
