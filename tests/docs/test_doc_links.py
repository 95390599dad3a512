"""Every relative link in README.md and docs/**/*.md resolves: the file or folder exists and, for
a link into a markdown file with ``#anchor``, a heading of that file has that anchor (GitHub's
rule). Links inside fenced code blocks and to web addresses are not checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("examples/**/*.md")])
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans."""
    text = FENCE.sub("", text)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # a link in a heading keeps its text
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    for m in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', path.read_text()):
        out.add(m.group(1))
    return out


def links(page: Path) -> list[str]:
    text = _prose(page.read_text())
    return [m.group(1) for m in LINK.finditer(text)] + [m.group(1) for m in IMAGE.finditer(text)]


def broken(page: Path, root: Path = ROOT) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
            continue
        try:
            dest.relative_to(root)
        except ValueError:
            bad.append(f"{target}: outside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(root)}")
    return bad


def test_the_checker_finds_what_it_should(tmp_path):
    (tmp_path / "a.md").write_text("# Title: one `x`\n\n## Two, three (2026-12-03)\n\n## Two, three (2026-12-03)\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md) [ok](a.md#title-one-x) [ok](a.md#two-three-2026-12-03-1) [web](https://x.y/z)\n"
                    "[bad](missing.md) [bad](a.md#nope)\n```\n[in code](ignored.md)\n```\n`[span](ignored.md)`\n")
    assert links(page) == ["a.md", "a.md#title-one-x", "a.md#two-three-2026-12-03-1", "https://x.y/z",
                           "missing.md", "a.md#nope"]
    assert broken(page, tmp_path) == ["missing.md: no such file", "a.md#nope: no heading with anchor #nope in a.md"]
    (tmp_path / "sub").mkdir()
    inner = tmp_path / "sub" / "c.md"
    inner.write_text("[up](../a.md) [out](../../elsewhere.md)\n")
    assert broken(inner, tmp_path / "sub") == ["../a.md: outside the repository", "../../elsewhere.md: no such file"]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page):
    assert broken(page) == []


def test_the_index_lists_every_guide_and_the_readme_links_it():
    """docs/index.md names every page of docs/ (a new guide must be added there) and the run logs."""
    index = ROOT / "docs" / "index.md"
    listed = {(index.parent / t.partition("#")[0]).resolve() for t in links(index) if not t.startswith("http")}
    for page in [*ROOT.glob("docs/*.md"), ROOT / "docs" / "results" / "README.md", *ROOT.glob("docs/results/*_log.md")]:
        if page != index:
            assert page.resolve() in listed, f"docs/index.md does not link {page.relative_to(ROOT)}"
    assert "docs/index.md" in links(ROOT / "README.md")
