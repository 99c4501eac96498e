"""The lab's pages stay navigable: every relative link in them resolves, every study folder's
page is in the index, and the product's one link into the lab (what it has shown) resolves."""

from __future__ import annotations

from conftest import ROOT
from test_docs import broken_links

LAB = ROOT / "lab"


def test_every_relative_link_in_the_lab_resolves():
    broken = broken_links(sorted(LAB.rglob("*.md")))
    assert not broken, "\n".join(broken)


def test_every_study_is_in_the_index():
    index = (LAB / "index.md").read_text()
    missing = [p.name for p in sorted((LAB / "studies").iterdir()) if f"(studies/{p.name}/README.md)" not in index]
    assert not missing, missing


def test_every_study_folder_has_its_page():
    assert not [p.name for p in sorted((LAB / "studies").iterdir()) if not (p / "README.md").is_file()]


def test_the_product_links_to_what_it_has_shown():
    from test_product_boundary import SHOWN

    assert (ROOT / SHOWN).is_file()
    assert f"]({SHOWN})" in (ROOT / "README.md").read_text()
    assert f"](../{SHOWN})" in (ROOT / "docs" / "README.md").read_text()
