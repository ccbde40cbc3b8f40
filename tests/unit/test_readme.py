"""README.md is the front door (issue 53): short, and every link in it leads somewhere, on GitHub (the
file exists, its heading exists) as in the site (`scripts/docs build` checks the same strictly)."""

from __future__ import annotations

import re

from ..servers import ROOT

README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and the site's toc both make it for plain headings."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def local_links() -> list[str]:
    return [target for target in LINK.findall(README.read_text()) if not re.match(r"[a-z]+://", target)]


def test_the_readme_is_a_front_door_of_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


def test_every_link_of_the_readme_resolves():
    links = local_links()
    assert "docs/getting-started.md" in links and "DESIGN.md" in links
    broken = []
    for target in links:
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else README
        if not file.is_file() or (anchor and anchor not in anchors(file)):
            broken.append(target)
    assert broken == []


def test_the_anchor_check_sees_a_missing_heading():
    assert "the-regression-guard" in anchors(ROOT / "docs" / "benchmarks.md")
    assert "no-such-heading" not in anchors(ROOT / "docs" / "benchmarks.md")
    assert slug("Config file: several models, several servers") == "config-file-several-models-several-servers"
