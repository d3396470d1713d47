"""The connector reference (``docs/connectors.md``) is generated from the connector models
(:mod:`syncd.cli.reference`), and the committed text is the generated one."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from syncd.cli.reference import (
    COMMAND,
    END,
    REFERENCE_FILE,
    START,
    between_markers,
    main,
    render_reference,
    replace_between_markers,
)
from syncd.indexers.base import Indexer, IndexerContext
from syncd.plugins import Registry
from syncd.schema.base import type_of
from syncd.sources.base import Source, SourceContext, SourceKind
from syncd.sources.http.pagination_config import PAGINATION_MODELS

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / REFERENCE_FILE


def test_the_committed_reference_is_the_generated_one() -> None:
    committed = between_markers(REFERENCE.read_text(encoding="utf-8"))
    generated = render_reference(Registry.builtin()).strip("\n")
    if committed != generated:
        diff = "\n".join(
            difflib.unified_diff(
                committed.splitlines(),
                generated.splitlines(),
                REFERENCE_FILE,
                "generated",
                lineterm="",
            )
        )
        pytest.fail(
            f"{REFERENCE_FILE}'s connector reference is out of date: regenerate it with "
            f"`{COMMAND}`\n"
            f"{diff}"
        )


def test_the_command_writes_the_committed_file_and_the_readme_links_it() -> None:
    assert COMMAND.endswith(f" --write {REFERENCE_FILE}")
    assert f"`{COMMAND}`" in REFERENCE.read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"]({REFERENCE_FILE})" in readme
    assert START not in readme and END not in readme  # one copy of the reference, not two


def _section(text: str, heading: str) -> str:
    """The text of the ``### heading`` section of ``text``."""
    match = re.search(rf"^### {re.escape(heading)}\n(.*?)(?=^### |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r}"
    return match[1]


def _row(section: str, key: str) -> list[str]:
    """The cells of ``key``'s row (key, type, default, range, description, example)."""
    for line in section.splitlines():
        if line.startswith(f"| `{key}` |"):
            return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    raise AssertionError(f"no row for {key!r} in:\n{section}")


def test_every_builtin_kind_and_pagination_style_has_its_section() -> None:
    text = render_reference(Registry.builtin())
    registry = Registry.builtin()
    for name in registry.source_names:
        assert f"### Source `{name}`\n" in text
    for name in registry.indexer_names:
        assert f"### Indexer `{name}`\n" in text
    for model in PAGINATION_MODELS:
        assert f"### Pagination `{type_of(model)}`\n" in text
        assert f"`{model.__name__}`: " in text
    for heading in ("Connector file", "`incremental`", "`timeout`"):
        _section(text, heading)


def test_rows_say_type_default_range_description_and_example() -> None:
    text = render_reference(Registry.builtin())
    connector = _section(text, "Connector file")
    assert _row(connector, "name")[1:3] == ["string", "**required**"]
    _, kind, default, bounds, about, _ = _row(connector, "page_retries")
    assert (kind, default, bounds) == ("integer", "`3`", "0\u201320")
    assert about.startswith("Retries of a failing page")
    retry_on_status = _row(connector, "retry_on_status")
    assert (retry_on_status[3], retry_on_status[5]) == (
        "each 400\u2013599",
        "`[429, 502, 503, 504]`",
    )
    offset = _section(text, "Pagination `offset`")
    assert _row(offset, "limit")[1:4] == ["integer", "`100`", "1\u20131000000"]
    assert _row(offset, "type")[2] == "**required**"
    cursor = _section(text, "Pagination `cursor`")
    assert _row(cursor, "type")[1:3] == ['`"cursor"`', '`"cursor"`']
    assert _row(_section(text, "`timeout`"), "read")[3] == "> 0, ≤ 3600"
    http = _section(text, "Source `http`")
    assert _row(http, "url")[5] == '`"https://api.example.com/tickets"`'
    # A key holding models links to their sections; a model's own example is shown.
    assert "[`CursorPagination`](#pagination-cursor)" in _row(http, "pagination")[1]
    assert "[`Incremental`](#incremental)" in _row(http, "incremental")[1]
    assert '```json\n{\n  "headers"' in http


def test_every_link_points_at_a_heading() -> None:
    text = render_reference(Registry.builtin())
    anchors = {
        "#" + re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^### (.+)$", text, re.M)
    }
    links = set(re.findall(r"\]\((#[^)]+)\)", text))
    assert links and links <= anchors, links - anchors


class _QueueConfig(BaseModel):
    """Reads a message queue."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["queue"]
    topic: str = Field(description="The topic.", examples=["tickets"])


def test_plugin_kinds_are_described_too() -> None:
    def source(config: Mapping[str, Any], context: SourceContext) -> Source:
        raise NotImplementedError

    def indexer(config: Mapping[str, Any], context: IndexerContext) -> Indexer:
        raise NotImplementedError

    registry = Registry.builtin()
    registry.register_source("queue", SourceKind("queue", source, config_model=_QueueConfig))
    registry.register_indexer("plain", indexer)
    text = render_reference(registry)
    queue = _section(text, "Source `queue`")
    assert "`_QueueConfig`: Reads a message queue." in queue
    assert _row(queue, "topic")[1:] == [
        "string",
        "**required**",
        "—",
        "The topic.",
        '`"tickets"`',
    ]
    assert "Other keys are accepted" in _section(text, "Indexer `plain`")


def test_write_replaces_only_the_text_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "connectors.md"
    page.write_text(f"# title\n\n{START}\nstale\n{END}\n\n## after\n", encoding="utf-8")
    assert main(["--write", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"# title\n\n{START}\n\n")
    assert text.endswith(f"\n\n{END}\n\n## after\n")
    assert between_markers(text) == render_reference(Registry.builtin()).strip("\n")
    assert main(["--write", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == text  # idempotent


@pytest.mark.parametrize(
    "text", ["no markers", f"{START}\n{START}\n{END}", f"{END}\n{START}"], ids=str
)
def test_write_refuses_a_file_without_one_pair_of_markers(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "connectors.md"
    page.write_text(text, encoding="utf-8")
    assert main(["--write", str(page)]) == 2
    assert page.read_text(encoding="utf-8") == text
    assert "connectors.md" in capsys.readouterr().err
    with pytest.raises(ValueError):
        replace_between_markers(text, "x")


def test_without_write_it_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert capsys.readouterr().out == render_reference(Registry.builtin())
