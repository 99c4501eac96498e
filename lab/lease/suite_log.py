"""A pytest log cut to what fixing its failures needs, small enough to come back from a device call
(lab/lease/suite_on_device.sh):

    python lab/lease/suite_log.py FULL.log [--head 40] [--tail 120] [--width 400] [--max-kib 2048] > SHORT.log

Kept: the lines before the first section (the progress dots and xdist's start lines dropped), every
failure and error (each one's first `head` and last `tail` lines: its test's code and the assertion
first, then where it broke and what it printed), the short summary (`-rfE`: one line each), the
slowest durations, the first 60 lines of any other section (the warnings), and the last line (pytest's summary). Lines
are cut at `width` characters. If that is still over `max_kib`, every failure is cut further
(halving `head` and `tail`) until it fits."""

from __future__ import annotations

import argparse
import re
import sys

SECTION = re.compile(r"^={3,} (.+?) ={3,}$")
ITEM = re.compile(r"^_{3,} (.+?) _{3,}$")
NOISE = re.compile(r"^([.sSFEXx]+\s*(\[\s*\d+%\])?|bringing up nodes\.\.\.|\s*)$")
OTHER_KEPT = 60  # lines of any other section (the warnings)


def _cut(lines: list[str], head: int, tail: int) -> list[str]:
    if len(lines) <= head + tail + 1:
        return lines
    return [*lines[:head], f"[... {len(lines) - head - tail} lines cut ...]", *lines[len(lines) - tail:]]


def _parts(lines: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The lines before the first section, and each section's (title, lines) in order."""
    first, sections = [], []
    for line in lines:
        match = SECTION.match(line)
        if match:
            sections.append((match.group(1), [line]))
        elif sections:
            sections[-1][1].append(line)
        else:
            first.append(line)
    return first, sections


def _items(lines: list[str]) -> list[list[str]]:
    """A FAILURES or ERRORS section's title line, then each failure's lines (from its ____ header)."""
    items = [[lines[0]]]
    for line in lines[1:]:
        if ITEM.match(line):
            items.append([line])
        else:
            items[-1].append(line)
    return items


def trim(text: str, head: int = 40, tail: int = 120, width: int = 400, max_kib: int = 2048) -> str:
    lines = [line if len(line) <= width else line[:width] + f" [... {len(line) - width} characters cut]"
             for line in text.splitlines()]
    if not lines:
        return ""
    last = lines[-1]
    first, sections = _parts(lines[:-1] if not SECTION.match(last) else lines)
    while True:
        out = [line for line in first if not NOISE.match(line)]
        for title, body in sections:
            if title in ("FAILURES", "ERRORS"):
                items = _items(body)
                out += items[0] + [line for item in items[1:] for line in _cut(item, head, tail)]
            elif title == "short test summary info" or title.startswith("slowest"):
                out += body
            else:  # the warnings, and whatever else pytest or a plugin prints
                out += _cut(body, OTHER_KEPT, 0)
        if not SECTION.match(last):
            out.append(last)
        result = "\n".join(out) + "\n"
        if len(result.encode()) <= max_kib * 1024 or head + tail <= 12:
            return result
        head, tail = max(head // 2, 4), max(tail // 2, 8)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--head", type=int, default=40)
    ap.add_argument("--tail", type=int, default=120)
    ap.add_argument("--width", type=int, default=400)
    ap.add_argument("--max-kib", type=int, default=2048)
    args = ap.parse_args(argv)
    with open(args.log, errors="replace") as f:
        sys.stdout.write(trim(f.read(), args.head, args.tail, args.width, args.max_kib))


if __name__ == "__main__":
    main()
