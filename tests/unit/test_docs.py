"""The documentation holds together: the README and every page of ``docs/`` link only to files
that exist and to headings that exist, and every page is reachable from the README."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RECIPES = DOCS / "recipes"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def _prose(text: str) -> str:
    """``text`` without fenced code blocks; code spans are kept apart by :func:`_links`."""
    return _FENCE.sub("", text)


def _links(text: str) -> list[str]:
    """The targets of the Markdown links and images in ``text``, code left out (a code span
    inside a link's text, as in ``[`Model`](#model)``, still leaves the link)."""
    prose = _prose(text)
    return [m[1] for m in _LINK.finditer(_CODE.sub("code", prose))]


def anchors(text: str) -> set[str]:
    """The anchors of ``text``'s headings, as GitHub makes them: lower case, punctuation but
    ``-`` and ``_`` dropped, spaces as ``-``, ``-1``, ``-2``… after repeats."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in _HEADING.findall(_prose(text)):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def test_the_anchor_rule_is_githubs() -> None:
    text = "# syncd\n## A quick tour\n### Source `http`\n## Production: PostgreSQL, Redis\n"
    text += "```sh\n# not a heading\n```\n## Notes\n## Notes\n"
    assert anchors(text) == {
        "syncd",
        "a-quick-tour",
        "source-http",
        "production-postgresql-redis",
        "notes",
        "notes-1",
    }


def test_links_in_code_are_not_links() -> None:
    text = "[a](a.md) `[b](b.md)`\n```md\n[c](c.md)\n```\n[`D`](#d) [e\nf](g.md)\n"
    assert _links(text) == ["a.md", "#d", "g.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in _links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, …
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / unquote(path)).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif fragment and file.suffix == ".md":
            if fragment not in anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{target}: no heading #{fragment} in {file.name}")
        elif fragment:
            broken.append(f"{target}: an anchor into a file that is not Markdown")
    assert not broken, "\n".join(broken)


def test_every_page_is_reachable_from_the_readme() -> None:
    seen = {README.resolve()}
    todo = [README]
    while todo:
        page = todo.pop()
        for target in _links(page.read_text(encoding="utf-8")):
            path = target.partition("#")[0]
            if not path or re.match(r"[a-z][a-z0-9+.-]*:", path):
                continue
            file = (page.parent / unquote(path)).resolve()
            if file.suffix == ".md" and file.exists() and file not in seen:
                seen.add(file)
                todo.append(file)
    pages = {p.resolve() for p in DOCS.glob("*.md")}
    assert pages, "no docs/*.md"
    assert pages <= seen, sorted(str(p.relative_to(ROOT)) for p in pages - seen)


def test_the_readme_stays_short_and_keeps_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "the README is the way in: move detail into docs/"
    assert "```sh\npython3 -m pip install -e . && syncd run --config config.toml\n```" in text
    assert "```sh\n./tests/run\n```" in text


_EMBEDDED = re.compile(
    r"^\[`docs/recipes/([\w-]+\.json)`\]\(recipes/\1\):\n\n```json\n(.*?)^```[ \t]*$", re.M | re.S
)


def test_recipes_md_embeds_every_recipe_file_verbatim() -> None:
    """Each connector file of ``docs/recipes/`` appears once in docs/recipes.md, under its
    link, exactly as the file holds it (tests/integration/realapis/test_recipes.py runs the
    files)."""
    text = (DOCS / "recipes.md").read_text(encoding="utf-8")
    embedded = _EMBEDDED.findall(text)
    names = [name for name, _ in embedded]
    files = {p.name: p.read_text(encoding="utf-8") for p in RECIPES.glob("*.json")}
    assert len(files) == 10
    assert sorted(names) == sorted(files), "every recipe embedded, each once"
    assert text.count("```json") == len(embedded), "no other JSON block to drift"
    for name, block in embedded:
        assert block == files[name], f"docs/recipes.md differs from docs/recipes/{name}"


def test_the_event_stream_section_states_the_code_s_figures() -> None:
    """docs/api.md holds the ``GET /events`` contract; its figures are the code's."""
    from syncd.config import ApiConfig
    from syncd.service import events

    text = (DOCS / "api.md").read_text(encoding="utf-8")
    # One space for every run of whitespace: the figures do not depend on where lines wrap.
    section = " ".join(text[text.index("## The event stream: `GET /events`") :].split())
    for figure in (
        f"at most {events.MAX_FILTER_IDS} ids",
        f"per connector per {events.COALESCE_SECONDS:g} s",
        f"up to {events.SNAPSHOT_LIMIT:,} of them",
        f"the last {events.RING_SIZE:,} events",
        f"more than {events.SUBSCRIBER_BUFFER:,} events",
        f"the last {events.LINGER_SECONDS / 60:g} minutes",
        f"`{events.OPENING.decode().strip()}`",
        f"`{events.PING.decode().strip()}`",
        f"`api.events_heartbeat_seconds` ({ApiConfig.events_heartbeat_seconds:g})",
    ):
        assert figure in section, figure
