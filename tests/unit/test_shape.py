"""The document shape (syncd.rules.shape) and its model (syncd.schema.document)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncd.errors import ValidationError
from syncd.models import DEFAULT_PAGINATOR, DocumentFields
from syncd.plugins import Registry
from syncd.rules.shape import fields_object, parse_template, shaper, template_problem
from syncd.schema import spec
from syncd.schema.document import TEMPLATE_PATTERN, DocumentMapping

ISSUE = {
    "key": "OPS-7",
    "fields": {
        "summary": "Disk full",
        "description": "<p>The <b>backup</b> volume is full.</p><ul><li>db</li><li>logs</li></ul>",
        "labels": ["infra", "urgent"],
        "updated": "2024-05-01T12:30:00.000+0200",
    },
    "links": {"web.html": "https://tracker.example.com/browse/OPS-7"},
    "votes": 3,
}


def shape(mapping: dict[str, Any], record: Any = ISSUE) -> DocumentFields:
    return shaper(mapping)(record)


def test_paths_read_title_url_and_metadata() -> None:
    found = shape(
        {
            "title": "fields.summary",
            "url": "/links/web.html",
            "metadata": {"labels": "fields.labels", "votes": "votes", "gone": "fields.none"},
        }
    )
    assert found == DocumentFields(
        title="Disk full",
        url="https://tracker.example.com/browse/OPS-7",
        metadata={"labels": ["infra", "urgent"], "votes": 3},
    )


def test_a_template_fills_its_placeholders_and_keeps_literal_braces() -> None:
    found = shape({"title": {"template": "{{{key}}} {fields.summary} ({fields.missing})"}})
    assert found.title == "{OPS-7} Disk full ()"


def test_a_template_whose_placeholders_are_all_missing_is_null() -> None:
    assert shape({"title": {"template": "Issue {nope}"}}).title is None


def test_text_joins_the_values_present_by_a_blank_line() -> None:
    found = shape({"text": ["fields.summary", "fields.missing", "fields.labels"]})
    assert found.text == "Disk full\n\ninfra\nurgent"


def test_html_text_becomes_plain_text_laid_out() -> None:
    found = shape({"text": ["fields.summary", "fields.description"], "text_format": "html"})
    assert found.text is not None
    assert found.text.startswith("Disk full\n\nThe backup volume is full.")
    assert "<" not in found.text
    assert "* db" in found.text and "* logs" in found.text
    assert shape({"title": "fields.description", "text_format": "html"}).title.startswith("<p>")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-01T12:30:00.000+0200", "2024-05-01T10:30:00Z"),
        ("2024-05-01T10:30:00Z", "2024-05-01T10:30:00Z"),
        ("2024-05-01 10:30:00.5", "2024-05-01T10:30:00.500000Z"),
        (1714559400, "2024-05-01T10:30:00Z"),
        (1714559400.25, "2024-05-01T10:30:00.250000Z"),
        ("yesterday", None),
        (True, None),
        (10**30, None),
        (None, None),
    ],
)
def test_updated_at_is_rfc3339_utc_or_null(value: Any, expected: str | None) -> None:
    assert shape({"updated_at": "t"}, {"t": value}).updated_at == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", None),
        (None, None),
        (0, "0"),
        (False, "false"),
        (2**70, str(2**70)),
        ([1, "a", None], "1\na"),
        ({"b": 1}, '{"b":1}'),
        ([{"a": 1}], '[{"a":1}]'),
    ],
)
def test_values_read_as_text(value: Any, expected: str | None) -> None:
    assert shape({"title": "v"}, {"v": value}).title == expected


def test_a_record_that_is_not_an_object_shapes_to_nothing() -> None:
    assert (
        shape({"title": "a", "metadata": {"x": "b"}}, ["not", "an", "object"]) == DocumentFields()
    )


def test_fields_object_keeps_integers_of_any_size() -> None:
    import orjson

    found = shape({"metadata": {"n": "n"}}, {"n": 2**80})
    assert orjson.dumps(fields_object(found)) == (
        b'{"title":null,"text":null,"url":null,"updated_at":null,"metadata":{"n":%d}}' % 2**80
    )


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{a}", None),
        ("{{a}}", "Must hold at least one {path} placeholder"),
        ("{a", "Must be text with"),
        ("a}", "Must be text with"),
        ("{}", "Must be text with"),
        ("{a..b}", "Must be text with"),
        ("{/x~1y}", None),
    ],
)
def test_template_problems(template: str, problem: str | None) -> None:
    found = template_problem(template)
    assert (found is None) if problem is None else (found or "").startswith(problem)


def test_parse_template_pieces() -> None:
    assert parse_template("a{b.c}d") == ("a", ("b", "c"), "d")


def create(document: Any) -> dict[str, Any]:
    body = {"name": "n", "source": {"url": "https://example.com/x"}, "document": document}
    return spec.parse_create(body, defaults=DEFAULT_PAGINATOR, kinds=Registry.builtin())


def test_a_mapping_is_kept_as_written() -> None:
    mapping = {"title": {"template": "{key}"}, "text": ["a", "b"], "text_format": "html"}
    assert create(mapping)["document"] == mapping
    assert create(None)["document"] is None


@pytest.mark.parametrize(
    ("mapping", "errors"),
    [
        ({}, {"document": "Must map at least one of title, text, url, updated_at, metadata"}),
        ({"text_format": "html"}, {"document": "Must map at least one of"}),
        ({"title": 3}, {"document.title": 'Must be a path or {"template": "…"}'}),
        ({"text": []}, {"document.text": "Must list 1 to 20 paths"}),
        ({"text": ["a", "b..c"]}, {"document.text.1": "Must be a dotted path"}),
        ({"url": {"template": "x", "y": 1}}, {"document.url.y": "Unknown field"}),
        ({"metadata": {"a": ""}}, {"document.metadata.a": "Must be a dotted path"}),
        ({"title": "a", "extra": 1}, {"document.extra": "Unknown field"}),
        ("title", {"document": ""}),
    ],
)
def test_a_bad_mapping_names_its_field(mapping: Any, errors: dict[str, str]) -> None:
    with pytest.raises(ValidationError) as caught:
        create(mapping)
    for key, message in errors.items():
        assert caught.value.errors[key].startswith(message), caught.value.errors


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="{}ab./~01 \u00e9", max_size=12))
def test_the_template_pattern_is_exactly_what_the_server_takes(template: str) -> None:
    described = re.fullmatch(TEMPLATE_PATTERN, template) is not None
    assert described == (template_problem(template) is None), template


def test_the_schema_says_a_mapping_names_a_field() -> None:
    import jsonschema

    schema = DocumentMapping.model_json_schema()
    jsonschema.validate({"title": "t"}, schema)
    for refused in ({}, {"text_format": "html"}, {"url": {"template": "x"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(refused, schema)
