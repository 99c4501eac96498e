"""docs/reference/cli.md, written from the `boundary` command's own argparse parsers.

Every command, user commands first, then the pipeline stages: its description, every option
with its value, default and help, and its example, so the reference cannot disagree with
`boundary <command> --help`. `tests/test_docs.py` renders it again and compares it with the
committed file. After changing a command's options:

    PYTHONPATH=workflow python workflow/scripts/cli_reference.py            # rewrites the page
    PYTHONPATH=workflow python workflow/scripts/cli_reference.py --check
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from boundary import cli
from boundary.core.config_reference import page_main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
HEADER = """# CLI reference

<!-- Generated from the parsers of workflow/boundary/ by
`PYTHONPATH=workflow python workflow/scripts/cli_reference.py`; do not edit by hand. -->

    boundary [--gpus N [--own]] <command> [options]        boundary <command> --help

`boundary --gpus N <command>` first claims N GPUs that no other job holds (the workflow's GPU
rules do); with `--own` it takes every slot of them (`$BOUNDARY_JOBS_PER_GPU`), so no other job
runs there while it does (a training job with a colocated vLLM engine). A bad option or input stops a command with one line naming it. Walk-throughs:
[the testbed](../tutorials/testbed_cpu.md), [diagnosing another tool's
run](../tutorials/diagnose_other_runs.md).
"""


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _shown(value) -> str:
    if isinstance(value, (str, Path)) and str(value).startswith(f"{PAGE.parents[2]}/"):
        value = Path(value).relative_to(PAGE.parents[2])  # the checkout's path is no default of the CLI
    if isinstance(value, (list, tuple, dict)):
        return "`" + json.dumps(value if not isinstance(value, tuple) else list(value)) + "`"
    return f"`{value}`"


def _row(action: argparse.Action, prog: str) -> str:
    if action.option_strings:
        name = ", ".join(f"`{s}`" for s in action.option_strings)
    else:
        name = f"`{action.metavar or action.dest}`"
    if action.choices:
        value = "one of " + ", ".join(f"`{c}`" for c in action.choices)
    elif action.nargs == 0:
        value = "flag"
    else:
        metavar = action.metavar if action.metavar is not None else action.dest.upper()
        value = " ".join(metavar) if isinstance(metavar, tuple) else metavar
        if action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction):
            value += " ..." if action.nargs in ("+", "*") else " (repeatable)"
        value = f"`{value}`"
    if action.required:
        default = "*required*"
    elif action.default is None or action.default is argparse.SUPPRESS or action.nargs == 0 \
            or (isinstance(action.default, list) and not action.default):  # 0 is a default; False and [] are not
        default = ""
    else:
        default = _shown(action.default)
    text = action.help or ""
    if "%(" in text:
        try:
            text = text % {**vars(action), "prog": prog}
        except (KeyError, TypeError, ValueError):
            pass
    return f"| {name} | {_cell(value)} | {_cell(default)} | {_cell(text)} |"


def _section(name: str, parser: argparse.ArgumentParser) -> str:
    parts = [f"### `boundary {name}`\n"]
    if parser.description:
        parts.append(parser.description.strip() + "\n")
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    if actions:
        parts.append("| option | value | default | help |\n|---|---|---|---|")
        parts.append("\n".join(_row(a, parser.prog) for a in actions) + "\n")
    if parser.epilog:
        parts.append("```\n" + parser.epilog.strip("\n") + "\n```\n")
    return "\n".join(parts)


def render() -> str:
    """The page: the header, then every command's section, user commands first."""
    found = dict(cli.parsers())
    groups = [("User commands", cli.USER_COMMANDS), ("Pipeline stages (the workflow's rules run these)", cli.STAGES)]
    parts = [HEADER]
    for title, commands in groups:
        parts.append(f"## {title}\n")
        parts.append("\n".join(f"- [`{n}`](#boundary-{n}): {_cell(text)}" for n, (_, text) in commands.items()) + "\n")
        parts += [_section(n, found[n]) for n in commands]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    return page_main("cli_reference.py", "Write docs/reference/cli.md from the parsers.", PAGE, render, argv)


if __name__ == "__main__":
    sys.exit(main())
