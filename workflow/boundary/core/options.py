"""Command-line options shared by the dispatcher and every stage: the parser that turns a bad
option into the one-line `BoundaryError` and shows every option's default, and the checked
option types.

Lives in core so stages never import the dispatcher (cli.py), which loads them.
"""

from __future__ import annotations

import argparse
import math

from boundary.core.errors import BoundaryError


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's help ends with its default, where it has one (required options, flags and
    options that are off unless given show none); the epilog's example keeps its lines."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or "default:" in text or action.required
                or default is None or default is False or default is argparse.SUPPRESS):
            return text
        if isinstance(default, (list, tuple)):
            if not default:
                return text
            default = ",".join(map(str, default))  # as it is typed: 100,200,400
        return f"{text} (default: {str(default).replace('%', '%%')})"


class ArgumentParser(argparse.ArgumentParser):
    """argparse for subcommands: a bad or missing option is a BoundaryError, so the CLI prints
    it as the same one line as every other user error; help shows defaults (HelpFormatter)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise BoundaryError(message)


def description(doc: str) -> str:
    """A command's description: the first paragraph of its module's docstring, whole (its first
    line alone can stop mid-sentence)."""
    return " ".join(doc.split("\n\n")[0].split())


def _typed(convert, check, wanted):
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not check(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value
    parse.__name__ = wanted  # argparse names the type in some messages
    return parse


def _whole(text: str) -> int:
    return int(text.strip())  # int() refuses "1.9" and "1e3"


def _ks(text: str) -> list[int] | None:
    parts = text.split(",")
    return [_whole(x) for x in parts] if all(x.strip() for x in parts) else None


def _numbers(text: str) -> list[float] | None:
    parts = text.split(",")
    return [float(x) for x in parts] if all(x.strip() for x in parts) else None


# Option types: a value outside its range is "argument --level: '1.5' is not ...".
LEVEL = _typed(float, lambda x: 0 < x < 1, "a number between 0 and 1 (exclusive)")
FRACTION = _typed(float, lambda x: 0 <= x <= 1, "a number between 0 and 1")
SHARE = _typed(float, lambda x: 0 < x <= 1, "a number above 0, at most 1")
POSITIVE = _typed(_whole, lambda x: x >= 1, "a whole number >= 1")
NONNEGATIVE = _typed(_whole, lambda x: x >= 0, "a whole number >= 0")
KS = _typed(_ks, lambda ks: all(k >= 1 for k in ks) and len(set(ks)) == len(ks),
            "a comma-separated list of distinct whole numbers >= 1")
COUNTS = _typed(_ks, lambda xs: all(x >= 0 for x in xs) and len(set(xs)) == len(xs),
                "a comma-separated list of distinct whole numbers >= 0")
EDGES = _typed(_numbers, lambda xs: len(xs) >= 2 and xs[0] == 0 and xs[-1] == 1
               and all(a < b for a, b in zip(xs, xs[1:])),
               "comma-separated increasing numbers from 0 to 1 (e.g. 0,0.1,0.5,1)")
FINITE = _typed(float, math.isfinite, "a finite number")
