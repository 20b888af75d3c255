"""Where ``--plot`` may write: checked before any work, so a bad path costs nothing, and written
through :mod:`memtune.outfile` (atomically, never through a link or over a file read).

The file's extension picks the format and is required (matplotlib would otherwise append
``.png`` and write a file of another name than the one given); the directory must exist and be
writable (memtune does not create directories). An existing plot is replaced: drawing it again is
what a user who names the same file wants.
"""

from __future__ import annotations

import os
from pathlib import Path

from memtune.errors import InputError
from memtune.numbers import cut
from memtune.outfile import check_output_path, write_atomically

PLOT_FORMATS = (".png", ".pdf", ".svg")
OPTION = "--plot"


def check_plot_path(path: str, inputs: tuple[str, ...] = ()) -> Path:
    """``path`` as a place to draw a plot (``inputs``: the files the command reads), or a one-line
    refusal."""
    if path.endswith(("/", os.sep)):  # Path() drops the separator, matplotlib would write DIR/.png
        raise InputError(f"{OPTION} {cut(path)}: names a directory; give a file name such as plot.png")
    if Path(path).suffix.lower() not in PLOT_FORMATS:
        raise InputError(
            f"{OPTION} {cut(path)}: the file name must end in {', '.join(PLOT_FORMATS)} (the extension picks the format)"
        )
    return check_output_path(OPTION, path, force=False, inputs=inputs, replaces=True)


def save_figure(fig, path: str, **options: object) -> None:  # type: ignore[no-untyped-def]
    """``fig.savefig`` into ``path`` through the one writer; its failures (a full disk, a figure
    matplotlib cannot draw) are one line naming the file."""
    target = Path(path)
    fmt = target.suffix.lower().lstrip(".")

    def draw(handle: object) -> None:
        try:
            fig.savefig(handle, format=fmt, **options)
        except (ValueError, RuntimeError, OverflowError) as exc:  # matplotlib's own refusals
            raise InputError(f"{OPTION} {cut(path)}: cannot draw the plot ({cut(str(exc))})") from None

    write_atomically(target, draw, replace=True, option=OPTION)
