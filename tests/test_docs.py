"""The docs stay navigable: every relative link in the README, the docs and the config
README names a file or folder that exists, and every results page is in the results index."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "config" / "README.md",
            *sorted((ROOT / "docs").rglob("*.md"))]


def local_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks are not links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_relative_link_in_the_docs_resolves():
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in pages() if page.exists()
              for target in local_links(page)
              if not (page.parent / target.split("#")[0]).exists()]
    assert not broken, "\n".join(broken)


def test_every_results_page_is_in_the_index():
    index = (ROOT / "docs" / "results" / "index.md").read_text()
    missing = [p.name for p in sorted((ROOT / "docs" / "results").glob("*.md"))
               if p.name != "index.md" and f"({p.name})" not in index]
    assert not missing, missing
