"""Every relative link of the README and docs/*.md points to a file of the checkout, and its
#anchor to a heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces
as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page`` (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    inside_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside_code = not inside_code
        if inside_code or not line.startswith("#"):
            continue
        text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", line.lstrip("#").strip()).lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The link targets of ``page`` outside code blocks and code spans."""
    targets, inside_code = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside_code = not inside_code
        if not inside_code:
            targets += LINK.findall(re.sub(r"`[^`]*`", "", line))
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"
