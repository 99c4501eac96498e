"""The `boundary` command: a bad option is one line naming it, never a usage dump; every option
says what it is and its default; user commands and pipeline stages are listed apart."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import boundary
from boundary.cli import COMMANDS, STAGES, USER_COMMANDS, main, parsers
from boundary.core.options import HelpFormatter

PARSERS = dict(parsers())


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_option_is_one_line(command, capsys):
    assert main([command, "--no-such-option", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"boundary {command}: error: "), err
    assert "--no-such-option" in err[0] or "required" in err[0], err


def test_parsers_yield_every_command_once_in_help_order():
    assert list(PARSERS) == list(COMMANDS)
    assert all(parser.prog == f"boundary {name}" for name, parser in PARSERS.items())


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help_and_shows_its_default(command):
    parser = PARSERS[command]
    formatter = HelpFormatter(parser.prog)
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        assert (action.help or "").strip(), f"{command} {name}: no help"
        if action.default not in (None, False, [], argparse.SUPPRESS) and not action.required:
            shown = formatter._get_help_string(action) % {"default": action.default}
            assert "default" in shown, f"{command} {name}: help does not show its default"
    assert parser.format_help()  # every help string formats (no stray %)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_descriptions_are_whole_sentences(command):
    text = PARSERS[command].description
    assert text and text.rstrip().endswith("."), f"{command}: {text!r}"


@pytest.mark.parametrize("command", sorted(USER_COMMANDS))
def test_user_commands_end_with_an_example(command):
    epilog = PARSERS[command].epilog or ""
    assert epilog.startswith("example") and f"boundary {command} " in epilog, epilog
    assert PARSERS[command].format_help().rstrip().endswith(epilog.splitlines()[-1].strip())


def test_help_lists_user_commands_and_stages_apart(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    users, stages = out.split("user commands:")[1].split("pipeline stages")
    assert all(f"  {name} " in users for name in USER_COMMANDS)
    assert all(f"  {name} " in stages.split("options:")[0] for name in STAGES)
    assert not any(f"  {name} " in users for name in STAGES)


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"boundary {boundary.__version__}"


def test_one_spelling_of_the_output_flag():
    """--out everywhere; --out-dir, the old spelling of three commands, still parses as --out."""
    for name, parser in PARSERS.items():
        for action in parser._actions:
            if "--out-dir" in action.option_strings:
                assert "--out" in action.option_strings and action.dest == "out", name
    args = {"arithmetic": ["--split", "train=4"], "data": ["--settings", "{}"], "report": ["--results", "r", "--settings", "{}"]}
    for name, rest in args.items():
        for flag in ("--out", "--out-dir"):
            assert PARSERS[name].parse_args([flag, "somewhere", *rest]).out == "somewhere", (name, flag)


def test_train_help_imports_neither_torch_nor_trl():
    """`boundary train --help` builds its parser without torch or TRL (seconds, and their warnings)."""
    code = ("import sys\nfrom boundary.cli import main\ntry:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'trl', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "usage: boundary train" in done.stdout and done.stdout.strip().endswith("[]"), done.stdout
    assert done.stderr == "", done.stderr
