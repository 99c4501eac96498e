"""The docs stay navigable: every relative link in the README, the docs and the config
README names a file or folder that exists, and every page and config is listed."""

from __future__ import annotations

import re
from pathlib import Path

from test_product_boundary import SHOWN

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "config" / "README.md",
            *sorted((ROOT / "docs").rglob("*.md"))]


def local_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks are not links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def anchors(page: Path) -> set[str]:
    """The fragment ids GitHub gives a page's headings: lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def broken_links(pages) -> list[str]:
    """Each relative link of these pages that names no file, or no heading of its page."""
    broken = []
    for page in pages:
        for target in local_links(page):
            path, _, fragment = target.partition("#")
            file = page.parent / path if path else page
            if file.resolve() == ROOT / SHOWN:
                continue  # what the project has measured: checked where it lives (a clone may lack it)
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif fragment and file.suffix == ".md" and fragment not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return broken


def test_every_relative_link_in_the_docs_resolves():
    broken = broken_links(p for p in pages() if p.exists())
    assert not broken, "\n".join(broken)


def test_the_config_reference_is_the_schema_rendered():
    """docs/reference/config.md is generated; a schema change must regenerate it
    (PYTHONPATH=workflow python -m boundary.core.config_reference)."""
    from boundary.core import config_reference

    page = config_reference.render()
    assert (ROOT / "docs" / "reference" / "config.md").read_text() == page, \
        "docs/reference/config.md is out of date: PYTHONPATH=workflow python -m boundary.core.config_reference"
    # every section and a nested key of each kind: a default, one read only with another, a named
    # map, required
    for row in ["## `train`", "| `regimes.boundary` | number >= 0 and <= 1 | `0.1` |",
                "| `methods.<name>.support_floor` | number > 0 and <= 1 | `0.02` | *read only with anchor: support.*",
                "| `data.benchmarks.<name>.path` | string | *required* |", "| `run` | string | *required* |"]:
        assert row in page, row


def test_every_key_of_the_config_reference_has_a_description():
    """Each key row of docs/reference/config.md (every leaf key of the schema, and each section
    it lists) says what the key does: a `description:` in the schema or a comment above the key."""
    from boundary.core import config_reference

    rows = [re.split(r"(?<!\\)\|", line)[1:-1] for line in config_reference.render().splitlines()
            if line.startswith("| `")]
    keys = {cells[0].strip() for cells in rows}
    assert len(rows) > 200 and "`gate.tau`" in keys and "`methods.<name>.anchor`" in keys
    bare = [cells[0].strip() for cells in rows if not cells[3].strip()]
    assert not bare, f"schema keys without a description (add `description:`): {bare}"


def test_the_cli_reference_is_the_parsers_rendered():
    """docs/reference/cli.md is generated from every command's parser; an option change must
    regenerate it (PYTHONPATH=workflow python workflow/scripts/cli_reference.py)."""
    import importlib.util

    from boundary import cli

    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "workflow" / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.render()
    assert (ROOT / "docs" / "reference" / "cli.md").read_text() == page, \
        "docs/reference/cli.md is out of date: PYTHONPATH=workflow python workflow/scripts/cli_reference.py"
    for name in cli.COMMANDS:
        assert f"### `boundary {name}`" in page, name
    assert "| `--trained` |" in page and "| `--calibration` |" in page


def test_every_page_is_listed_in_the_docs_index():
    """A page by purpose that docs/README.md does not list is one a reader never finds."""
    index = (ROOT / "docs" / "README.md").read_text()
    missing = [str(p.relative_to(ROOT / "docs")) for kind in ("tutorials", "how-to", "reference", "explanation")
               for p in sorted((ROOT / "docs" / kind).glob("*.md"))
               if f"({p.relative_to(ROOT / 'docs')})" not in index]
    assert not missing, missing


def test_every_config_has_its_line_in_config_readme():
    listed = (ROOT / "config" / "README.md").read_text()
    missing = [p.name for p in sorted((ROOT / "config").glob("*.yaml")) if f"]({p.name})" not in listed]
    assert not missing, missing
