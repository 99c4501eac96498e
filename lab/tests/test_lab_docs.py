"""The lab's pages stay navigable: every relative link in them resolves, every study folder's
page is in the index, and the product's one link into the lab (what it has shown) resolves."""

from __future__ import annotations

from conftest import ROOT
from test_docs import anchors, local_links

LAB = ROOT / "lab"


def lab_pages():
    return sorted(LAB.rglob("*.md"))


def test_every_relative_link_in_the_lab_resolves():
    broken = []
    for page in lab_pages():
        for target in local_links(page):
            path, _, fragment = target.partition("#")
            file = page.parent / path if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif fragment and file.suffix == ".md" and fragment not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_study_is_in_the_index():
    index = (LAB / "index.md").read_text()
    missing = [p.name for p in sorted((LAB / "studies").iterdir()) if f"(studies/{p.name}/README.md)" not in index]
    assert not missing, missing


def test_every_study_folder_has_its_page():
    assert not [p.name for p in sorted((LAB / "studies").iterdir()) if not (p / "README.md").is_file()]


def test_the_product_links_to_what_it_has_shown():
    assert "](lab/index.md)" in (ROOT / "README.md").read_text()
