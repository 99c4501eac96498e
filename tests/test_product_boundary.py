"""The product and the project's lab stay apart.

The product is every tracked file outside `lab/`. Its user-facing text (workflow/, config/,
docs/, README.md, ARCHITECTURE.md, CHANGELOG.md) never names the project's own bookkeeping: a
tracker number, a GPU lease, a pre-registration's amendment, a pilot. What the project has
measured is one link away: README.md and docs/README.md link to the lab's index once each
("what it has shown"), and ARCHITECTURE.md gives the lab one line of its map. No other product
file names a path in the lab, so nothing in the product reads or imports it, and a clone
without `lab/` installs, runs and passes these tests.
"""

from __future__ import annotations

import re
import subprocess

from conftest import ROOT

SHOWN = "lab/index.md"  # the lab's index of what has been measured
LAB_WORDS = re.compile(r"\bissue ?#?\d+|\blease|amendment|pilot|docs/results", re.I)
LAB_PATH = re.compile(r"\blab/|[\"']lab[\"']")
USER_TEXT = ("workflow/", "config/", "docs/", "README.md", "ARCHITECTURE.md", "CHANGELOG.md")
# where the lab may be named, and how: (file, the line's pattern, how many such lines)
ALLOWED = {"README.md": (re.escape(f"]({SHOWN})"), 1), "docs/README.md": (re.escape(f"](../{SHOWN})"), 1),
           "ARCHITECTURE.md": (r"^lab/ ", 1), "tests/test_product_boundary.py": (".", 99)}
BINARY = (".png", ".parquet", ".gguf", ".tgz", ".whl", ".pdf", ".jpg")


def product_files() -> list[str]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in files if not f.startswith("lab/") and not f.endswith(BINARY) and (ROOT / f).is_file()]


def lines_of(path: str) -> list[str]:
    return (ROOT / path).read_text(errors="replace").splitlines()


def test_the_user_facing_text_never_names_the_project_s_bookkeeping():
    hits = [f"{f}:{i}: {m.group(0)!r}" for f in product_files() if f.startswith(USER_TEXT)
            for i, line in enumerate(lines_of(f), 1) for m in [LAB_WORDS.search(line)] if m]
    assert not hits, "lab words in the product (say it in the product's own words, or move it to lab/):\n" + \
        "\n".join(hits)


def test_no_product_file_names_a_path_in_the_lab_but_the_one_link():
    hits = []
    for f in product_files():
        named = [(i, line) for i, line in enumerate(lines_of(f), 1) if LAB_PATH.search(line)]
        pattern, most = ALLOWED.get(f, ("$^", 0))
        allowed = [(i, line) for i, line in named if re.search(pattern, line)]
        hits += [f"{f}:{i}: {line.strip()[:100]}" for i, line in named if (i, line) not in allowed]
        if len(allowed) > most:
            hits.append(f"{f}: names the lab on {len(allowed)} lines, {most} allowed")
    assert not hits, "the product names the lab (a clone without lab/ must work):\n" + "\n".join(hits)


def test_the_default_tests_collect_nothing_of_the_lab():
    """pytest's testpaths stay tests/: the lab's tests run by their own command (lab/test.sh)."""
    import tomllib

    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert settings["testpaths"] == ["tests"]
