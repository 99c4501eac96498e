"""Every `boundary` command answers a bad option with one line naming it, never a usage dump."""

from __future__ import annotations

import pytest

from boundary.cli import COMMANDS, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_option_is_one_line(command, capsys):
    assert main([command, "--no-such-option", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"boundary {command}: error: "), err
    assert "--no-such-option" in err[0] or "required" in err[0], err
