"""Software versions as comparable tuples, without a dependency on ``packaging``."""

from __future__ import annotations

import re

from memtune.errors import InputError
from memtune.numbers import echo

Version = tuple[int, int, int]

_LEADING_RELEASE = re.compile(r"\s*v?([0-9]{1,9})\.([0-9]{1,9})(?:\.([0-9]{1,9}))?(?![0-9])")


def parse_version(text: str, key: str) -> Version:
    """``"0.16.0rc1"`` -> (0, 16, 0); ``"2.11.0+cu130"`` -> (2, 11, 0).

    Pre-release and local suffixes are dropped: every version-dependent rule draws its line at a
    release boundary, and a pre-release of a release already carries that release's behaviour.
    """
    match = _LEADING_RELEASE.match(text)
    if not match:
        raise InputError(f"{key}: expected a version like 2.11.0, got {echo(text)}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def format_version(version: Version) -> str:
    return ".".join(str(part) for part in version)
