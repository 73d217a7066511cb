"""Every relative link in the docs reaches a file that exists, and a heading that exists in it.

Benchmark and operations pages link to each other's dated sections; a heading
renamed on one side leaves a link that GitHub renders and that goes nowhere.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)
_LINK = re.compile(r"\]\(([^)\s]*)\)")


@functools.cache
def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives ``page``'s headings: lower case, punctuation dropped, spaces to hyphens."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def relative_links(page: Path) -> list[str]:
    return [
        link
        for link in _LINK.findall(_FENCE.sub("", page.read_text()))
        if link and not re.match(r"[a-z][a-z0-9+.-]*:", link)  # http:, mailto: ...
    ]


def test_anchors__follow_githubs_rules():
    page = ROOT / "docs" / "benchmarks.md"

    assert "process-execution-benchbench_processespy" in anchors(page)
    assert "the-vacuum-dutys-look" in anchors(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links__reach_a_file_and_a_heading(page):
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {target.relative_to(ROOT)}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading with anchor #{anchor} in {target.name}")

    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_index__numbers_its_pages_once_each_in_reading_order():
    index = (ROOT / "docs" / "index.md").read_text()
    numbers = [int(n) for n in re.findall(r"(?m)^(\d+)\. \[", index)]
    assert numbers == list(range(1, len(numbers) + 1))


SOURCES = sorted(
    path
    for folder in ("django_strait", "tests", "bench", "example_project")
    for path in (ROOT / folder).rglob("*")
    if path.suffix in {".py", ".sql", ".html", ".md"} and "suite" not in path.parts
)


def test_code_points_to_docs_pages_that_exist():
    """Code says where its contract is written as ``docs/<page>.md``: each such page is here."""
    missing = sorted(
        f"{source.relative_to(ROOT)}: {name}"
        for source in SOURCES
        for name in set(
            re.findall(r"(?<![\w/.-])docs/([\w.-]+\.md)", source.read_text(errors="replace"))
        )
        if not (ROOT / "docs" / name).exists()
    )
    assert not missing


def test_nothing_refers_to_a_design_document_the_repository_does_not_hold():
    # Written in two parts, so that this file does not match itself.
    absent = re.compile("DESIGN" + r"(\.md| §)")
    found = sorted(
        str(path.relative_to(ROOT))
        for path in [*SOURCES, *PAGES]
        if absent.search(path.read_text(errors="replace"))
    )
    assert not found
