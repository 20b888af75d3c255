"""The "ignored N keys" line is prefixed like every other stderr line (issue 29 item 7), by every
command that loads a config, fix and diff included."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import run_cli

SCRIPT = "examples/megatron-lm-llama3-8b.sh"  # a launch script with flags memtune does not use


@pytest.mark.parametrize(
    "argv",
    [("check", SCRIPT), ("estimate", SCRIPT), ("fix", SCRIPT), ("diff", SCRIPT, SCRIPT)],
)
def test_the_ignored_keys_line_names_the_command(capsys, argv):
    _, _, err = run_cli(capsys, *argv)
    lines = [line for line in err.splitlines() if "keys memtune does not use" in line]
    assert lines, err
    assert all(
        line.startswith(f"memtune {argv[0]}: {SCRIPT}: ignored 24 keys memtune does not use: ")
        for line in lines
    )
    assert len(lines) == (2 if argv[0] == "diff" else 1)
