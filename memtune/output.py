"""Conventions every command's machine-readable output shares."""

from __future__ import annotations

# Every ``--json`` document carries this at its top level; it changes only when a field is
# removed or changes meaning (adding fields keeps it).
SCHEMA_VERSION = 1
