"""The links between the README and the pages of docs/ lead somewhere: every relative link names a
file that exists and, where it names a heading (``page.md#heading``), a heading of that page, as
GitHub makes its anchors. A page moved or a heading renamed without its links fails here. So does
a comment of the code that sends a reader to a page (``docs/page.md, "Section"``) where the page
or a heading that starts with the section's words is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# every source file but this one (whose examples name pages that are not there)
SOURCES = [
    ROOT / "app.py",
    *(p for room in ("siliconfriend", "memory", "finetune", "tests") for p in (ROOT / room).rglob("*.py")),
]
CODE = [p for p in SOURCES if p != Path(__file__).resolve()]
# a page a comment names, and the section it names after it (a comma, maybe "under", the words in
# double quotes; a comment's words may go on in the next line's comment)
CODE_REFERENCE = re.compile(r'(docs/[\w-]+\.md)(?:,\s+(?:under\s+)?"([^"]+)")?')

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
SNIPPETS = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = SNIPPETS.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path) -> list[str]:
    text = SNIPPETS.sub("", page.read_text(encoding="utf-8"))
    out = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            out.append(f"{page.name}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            out.append(f"{page.name}: {target} (no such heading in {file.name})")
    return out


def test_every_link_between_the_docs_leads_somewhere():
    assert len(PAGES) > 5
    assert [b for page in PAGES for b in broken_links(page)] == []


def test_the_checker_sees_a_broken_link(tmp_path):
    (tmp_path / "b.md").write_text("# A heading: with punctuation\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#a-heading-with-punctuation) [gone](c.md) [no heading](b.md#other) `[code](x.md)`\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["a.md: c.md (no such file)", "a.md: b.md#other (no such heading in b.md)"]


def broken_references(source: Path, root: Path = ROOT) -> list[str]:
    """The references of ``source``'s comments to a page, or a section of it, that is not there."""
    out = []
    for m in CODE_REFERENCE.finditer(source.read_text(encoding="utf-8")):
        page, section = root / m.group(1), m.group(2)
        if not page.exists():
            out.append(f"{source.name}: {m.group(1)} (no such page)")
            continue
        if section is None:
            continue
        words = re.sub(r"\s*\n\s*#?\s*", " ", section).strip()
        headings = re.findall(r"^#{1,6} (.+)$", SNIPPETS.sub("", page.read_text(encoding="utf-8")), re.M)
        if not any(h.startswith(words) for h in headings):
            out.append(f'{source.name}: {m.group(1)}, "{words}" (no such heading)')
    return out


def test_every_page_and_section_the_code_names_is_there():
    assert len(CODE) > 100
    assert [b for source in CODE for b in broken_references(source)] == []


def test_the_checker_sees_a_section_that_moved(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n## Numbers behind the code\n", encoding="utf-8")
    source = tmp_path / "x.py"
    source.write_text(
        '# (docs/b.md, "Numbers behind\n# the code") (docs/b.md) (docs/b.md, "Gone") (docs/c.md)\n', encoding="utf-8"
    )
    assert broken_references(source, tmp_path) == [
        'x.py: docs/b.md, "Gone" (no such heading)',
        "x.py: docs/c.md (no such page)",
    ]
