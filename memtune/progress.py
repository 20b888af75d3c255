"""Progress for output that is not a terminal (a CI log, a notebook, ``| tee``): one line on
stderr every few seconds of a long loop, where a terminal gets rich's live bar instead."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

PROGRESS_SECONDS = 5.0  # between two lines


class ProgressLines:
    def __init__(
        self,
        what: str,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        stream: TextIO | None = None,
    ) -> None:
        self.what, self.clock, self.stream = what, clock, stream
        self.every = PROGRESS_SECONDS if every is None else every
        self.started = self.last = clock()

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if now - self.last < self.every or not total:
            return
        self.last = now
        print(
            f"{self.what}: {done:,} of {total:,} ({done / total:.0%}) after {now - self.started:.0f} s",
            file=self.stream or sys.stderr,
            flush=True,
        )
