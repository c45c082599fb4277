"""The README's and docs/'s links: every in-page anchor and every relative link to a file or a
heading of another page resolves (GitHub's heading anchors)."""
from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: collections.Counter = collections.Counter()
    out, fence = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"^#+ (.*)", line)):
            s = slug(m.group(1))
            out.add(s if not seen[s] else f"{s}-{seen[s]}")
            seen[s] += 1
    return out


def test_slug_follows_github():
    assert slug("The issue's tables from one `make bench` run (2026-11-27 night)") == \
        "the-issues-tables-from-one-make-bench-run-2026-11-27-night"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_of_the_page_resolves(page: Path):
    text = page.read_text()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not checked here
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(target)
    assert not broken, f"{page.name}: links that resolve to nothing: {broken}"
