"""The connector model (syncd.schema): the validation and the JSON Schema come from it, and
agree with each other; plugin kinds bring their own config models."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from syncd.errors import ValidationError
from syncd.indexers.base import IndexerKind
from syncd.models import PaginatorSettings
from syncd.paths import MSG_PATH
from syncd.plugins import Registry
from syncd.schema import connector_file_schema, model_json_schemas
from syncd.schema.spec import parse_create, parse_patch
from syncd.sources.base import SourceKind
from syncd.sources.http import pagination as runtime
from syncd.sources.http.pagination_config import (
    CursorPagination,
    NextUrlPagination,
    OffsetPagination,
    PagePagination,
)

README = Path(__file__).resolve().parents[2] / "README.md"
HTTP = {"type": "http", "url": "http://127.0.0.1:9000/items", "records": "data"}


def _unbuilt(config: Any, context: Any) -> Any:
    raise AssertionError("validation never builds a plugin")


class CounterConfig(BaseModel):
    """A plugin's config model: no ``type`` of its own (the registry adds it)."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(3, ge=1, le=10)
    label: str | None = None


class SearchConfig(BaseModel):
    """A plugin's config model declaring its ``type``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["search"]
    index: str


def registry() -> Registry:
    """The built-in kinds, a plugin source with a model, one without, and a plugin indexer
    with a model."""
    r = Registry.builtin()
    r.register_source("counter", SourceKind("counter", _unbuilt, config_model=CounterConfig))
    r.register_source("feed", _unbuilt)
    r.register_indexer("search", IndexerKind("search", _unbuilt, config_model=SearchConfig))
    return r


def create(body: Any, kinds: Registry | None = None) -> dict[str, Any]:
    return parse_create(body, defaults=PaginatorSettings(), kinds=kinds or registry())


def create_errors(body: Any, kinds: Registry | None = None) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        create(body, kinds)
    return info.value.errors


def patch_errors(body: Any) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        parse_patch(body, kinds=registry())
    return info.value.errors


# --- unknown keys of every built-in kind ----------------------------------------------------

UNKNOWN_KEYS: list[tuple[dict[str, Any], str, str]] = [
    ({"source": {**HTTP, "colour": 1}}, "source.colour", "Unknown field"),
    (
        {"source": {**HTTP, "auth": {"type": "bearer", "token": "t", "x": 1}}},
        "source.auth.x",
        "Unknown field for auth type 'bearer'",
    ),
    (
        {"source": {**HTTP, "incremental": {"field": "u", "param": "s", "x": 1}}},
        "source.incremental.x",
        "Unknown field",
    ),
    (
        {"source": {**HTTP, "timeout": {"read": 1, "total": 9}}},
        "source.timeout.total",
        "Unknown field",
    ),
    (
        {"source": {**HTTP, "pagination": {"cursor": "c"}}},
        "source.pagination.cursor",
        "Unknown field for pagination type 'cursor'",
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "next_url", "next_cursor": "n"}}},
        "source.pagination.next_cursor",
        "Unknown field for pagination type 'next_url'",
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "link_header", "next_url": "n"}}},
        "source.pagination.next_url",
        "Unknown field for pagination type 'link_header'",
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "offset", "start": 1}}},
        "source.pagination.start",
        "Unknown field for pagination type 'offset'",
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "page", "limit": 5}}},
        "source.pagination.limit",
        "Unknown field for pagination type 'page'",
    ),
    ({"indexer": {"type": "store", "url": "http://h/"}}, "indexer.url", "Unknown field"),
    (
        {"indexer": {"type": "webhook", "url": "http://h/", "method": "PUT"}},
        "indexer.method",
        "Unknown field",
    ),
]


@pytest.mark.parametrize(("fields", "path", "message"), UNKNOWN_KEYS)
def test_unknown_keys_of_every_builtin_kind(
    fields: dict[str, Any], path: str, message: str
) -> None:
    body = {"name": "n", "source": HTTP, **fields}
    assert create_errors(body) == {path: message}
    assert patch_errors(fields) == {path: message}


# --- pagination: a tagged union -----------------------------------------------------------


@pytest.mark.parametrize(
    ("pagination", "errors"),
    [
        (
            {"type": "offset", "limit": "5", "offset_param": "", "limit_param": 3},
            {
                "source.pagination.limit": "Must be an integer between 1 and 1000000",
                "source.pagination.offset_param": MSG_PATH,
                "source.pagination.limit_param": MSG_PATH,
            },
        ),
        (
            {"type": "page", "start": 1.5, "page_param": None},
            {
                "source.pagination.start": "Must be an integer between 0 and 1000000000",
                "source.pagination.page_param": MSG_PATH,
            },
        ),
        (
            {"cursor_param": "", "next_cursor": "a."},
            {
                "source.pagination.cursor_param": "Must be a non-empty string",
                "source.pagination.next_cursor": MSG_PATH,
            },
        ),
        (
            {"type": "next_url", "next_url": ""},
            {"source.pagination.next_url": MSG_PATH},
        ),
        (
            {"type": "scroll"},
            {
                "source.pagination.type": "Unknown pagination type 'scroll'; known: cursor, "
                "link_header, next_url, offset, page"
            },
        ),
        ({"type": 1}, {"source.pagination.type": "Must be a string"}),
        ([], {"source.pagination": "Must be a JSON object"}),
    ],
)
def test_pagination_errors_name_the_style_key(pagination: Any, errors: dict[str, str]) -> None:
    body = {"source": {**HTTP, "pagination": pagination}}
    assert create_errors({"name": "n", **body}) == errors
    assert patch_errors(body) == errors


def test_model_defaults_are_the_runtime_defaults() -> None:
    """The defaults the JSON Schema shows are the ones a crawl applies."""
    cursor = CursorPagination()
    assert runtime.build_pagination({"type": "cursor"}) == runtime.CursorPagination(
        cursor_param=cursor.cursor_param,
        where=cursor.in_,
        next_cursor=cursor.next_cursor,
        next_from=cursor.next_from,
    )
    assert runtime.build_pagination({"type": "next_url"}) == runtime.NextUrlPagination(
        next_url_path=NextUrlPagination(type="next_url").next_url
    )
    offset = OffsetPagination(type="offset")
    assert runtime.build_pagination({"type": "offset"}) == runtime.OffsetPagination(
        offset_param=offset.offset_param,
        limit_param=offset.limit_param,
        limit=offset.limit,
        where=offset.in_,
    )
    page = PagePagination(type="page")
    assert runtime.build_pagination({"type": "page"}) == runtime.PagePagination(
        page_param=page.page_param, start=page.start, where=page.in_, size_param=page.size_param
    )


def test_stored_configs_keep_only_what_was_sent() -> None:
    source = {"url": "http://h/x", "pagination": {"type": "offset"}, "timeout": {"read": 5}}
    out = create(
        {"name": "n", "source": source, "indexer": {"type": "webhook", "url": "http://h/"}}
    )
    assert out["source"] == {**source, "type": "http"}
    assert out["indexer"] == {"type": "webhook", "url": "http://h/"}
    counter = create({"name": "n", "source": {"type": "counter"}})
    assert counter["source"] == {"type": "counter"}  # no "count": 3 written into it


# --- plugin kinds -------------------------------------------------------------------------


def test_a_plugin_config_model_is_validated_on_create_and_patch() -> None:
    body = {"source": {"type": "counter", "count": "many", "bogus": True}}
    expected = {
        "source.count": "Input should be a valid integer, unable to parse string as an integer",
        "source.bogus": "Unknown field",
    }
    assert create_errors({"name": "n", **body}) == expected
    assert patch_errors(body) == expected
    assert create_errors({"name": "n", "source": {"type": "counter", "count": 11}}) == {
        "source.count": "Input should be less than or equal to 10"
    }
    ok = {"type": "counter", "count": 5, "label": "x"}
    assert create({"name": "n", "source": ok})["source"] == ok


def test_a_plugin_indexer_model_declaring_its_type() -> None:
    errors = create_errors({"name": "n", "source": HTTP, "indexer": {"type": "search"}})
    assert errors == {"indexer.index": "Field required"}
    indexer = {"type": "search", "index": "tickets"}
    assert create({"name": "n", "source": HTTP, "indexer": indexer})["indexer"] == indexer


def test_a_plugin_without_a_model_accepts_any_object() -> None:
    source = {"type": "feed", "anything": [1, {"deep": True}], "url": 5}
    assert create({"name": "n", "source": source})["source"] == source
    # ... but what no store holds is still refused.
    assert create_errors({"name": "n", "source": {"type": "feed", "x": "\x00"}}) == {
        "source.x": "Must not contain NUL characters (\\u0000)"
    }


def test_kinds_registered_later_are_known() -> None:
    r = Registry.builtin()
    assert create_errors({"name": "n", "source": {"type": "counter"}}, r) == {
        "source.type": "Unknown source type 'counter'; known: http"
    }
    r.register_source("counter", SourceKind("counter", _unbuilt, config_model=CounterConfig))
    assert create_errors({"name": "n", "source": {"type": "counter", "x": 1}}, r) == {
        "source.x": "Unknown field"
    }
    assert "CounterConfig" in connector_file_schema(r)["$defs"]


# --- JSON Schema ----------------------------------------------------------------------------


def readme_connector() -> dict[str, Any]:
    """The connector file of the README's quick tour."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"cat > tickets\.json <<'EOF'\n(.*?)\nEOF", text, re.DOTALL)
    assert match, "the README's example connector moved"
    body: dict[str, Any] = json.loads(match[1])
    return body


def schema_errors(schema: dict[str, Any], body: Any) -> list[str]:
    """What the JSON Schema finds wrong with ``body`` (with the ``jsonschema`` package when
    installed; otherwise the model the schema comes from decides)."""
    try:
        import jsonschema
    except ImportError:
        try:
            create(body)
        except ValidationError as exc:
            return list(exc.errors)
        return []
    validator = jsonschema.Draft202012Validator(schema)
    return [error.message for error in validator.iter_errors(body)]


def test_the_schema_describes_a_connector_file() -> None:
    schema = connector_file_schema(registry())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["required"] == ["name", "source"]
    assert schema["additionalProperties"] is False
    assert {
        "HttpSourceConfig",
        "CursorPagination",
        "NextUrlPagination",
        "LinkHeaderPagination",
        "OffsetPagination",
        "PagePagination",
        "StoreIndexerConfig",
        "WebhookIndexerConfig",
        "CounterConfig",
        "FeedSourceConfig",
        "SearchConfig",
    } <= set(schema["$defs"])
    http = schema["$defs"]["HttpSourceConfig"]
    assert http["properties"]["url"]["description"]
    assert http["properties"]["max_pages"] == {
        "description": "Stop a crawl after this many pages.",
        "maximum": 1_000_000_000,
        "minimum": 1,
        "title": "Max Pages",
        "type": "integer",
    }
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.Draft202012Validator.check_schema(schema)


def test_the_schema_validates_the_readme_example() -> None:
    body = readme_connector()
    assert schema_errors(connector_file_schema(Registry.builtin()), body) == []
    assert create(body)["source"] == body["source"]


# Bodies the server accepts (left) or refuses (right): the schema must say the same.
AGREED: list[dict[str, Any]] = [
    {"name": "n", "source": HTTP},
    {"name": "  n  ", "source": {"url": "https://h:65535/x?q=1"}},
    {"name": "n", "source": {**HTTP, "params": {"a": "${env:A}", "b": 1, "c": 1.5, "d": True}}},
    {"name": "n", "source": {**HTTP, "headers": {"X-Key": "k ${file:/run/k} $x $"}}},
    {"name": "n", "source": {**HTTP, "pagination": {"type": "link_header"}}},
    {"name": "n", "source": {**HTTP, "pagination": {"type": "offset", "limit": 1_000_000}}},
    {"name": "n", "source": {**HTTP, "incremental": {"field": "a.b", "param": "since"}}},
    {"name": "n", "source": {**HTTP, "timeout": {"read": 0.5}}, "sync_schedule": None},
    {"name": "n", "source": {"type": "feed", "any": {"thing": [1]}}},
    {"name": "n", "source": {"type": "counter", "count": 10}},
    {"name": "n", "source": HTTP, "indexer": {"type": "webhook", "url": "http://h/hook"}},
    {"name": "n", "source": HTTP, "indexer": {"type": "search", "index": "i"}},
    {"name": "n", "source": HTTP, "page_retries": 20, "retry_on_status": [400, 599]},
    {"name": "n", "source": HTTP, "page_retry_backoff": 3600, "throttle_seconds": 0},
]
REFUSED: list[dict[str, Any]] = [
    {"source": HTTP},
    {"name": "n"},
    {"name": "", "source": HTTP},
    {"name": "   ", "source": HTTP},
    {"name": "n", "source": HTTP, "colour": 1},
    {"name": "n", "source": {**HTTP, "type": "ftp"}},
    {"name": "n", "source": {"records": "data"}},
    {"name": "n", "source": {**HTTP, "url": "ftp://h/x"}},
    {"name": "n", "source": {**HTTP, "url": "http://h/\x00"}},
    {"name": "n", "source": {**HTTP, "records": "a..b"}},
    {"name": "n", "source": {**HTTP, "records": None}},
    {"name": "n", "source": {**HTTP, "params": {"a": None}}},
    {"name": "n", "source": {**HTTP, "params": {"a": "${vault:x}"}}},
    {"name": "n", "source": {**HTTP, "headers": {"A B": "x"}}},
    {"name": "n", "source": {**HTTP, "headers": {"A": "x\r\nB: y"}}},
    {"name": "n", "source": {**HTTP, "headers": {"A": "${env: }"}}},
    {"name": "n", "source": {**HTTP, "headers": {"A": 1}}},
    {"name": "n", "source": {**HTTP, "pagination": {"type": "scroll"}}},
    {"name": "n", "source": {**HTTP, "pagination": {"type": "page", "limit": 5}}},
    {"name": "n", "source": {**HTTP, "pagination": {"type": "offset", "limit": 0}}},
    {"name": "n", "source": {**HTTP, "pagination": {"type": "page", "start": -1}}},
    {"name": "n", "source": {**HTTP, "incremental": {"field": "u"}}},
    {"name": "n", "source": {**HTTP, "timeout": {"read": 0}}},
    {"name": "n", "source": {**HTTP, "timeout": {"connect": 3601}}},
    {"name": "n", "source": {**HTTP, "timeout": {"read": None}}},
    {"name": "n", "source": {**HTTP, "max_pages": 0}},
    {"name": "n", "source": {**HTTP, "max_pages": 1.5}},
    {"name": "n", "source": {"type": "counter", "count": "many"}},
    {"name": "n", "source": {"type": "counter", "bogus": True}},
    {"name": "n", "source": {"type": "nope"}},
    {"name": "n", "source": HTTP, "indexer": {}},
    {"name": "n", "source": HTTP, "indexer": {"type": "store", "url": "http://h/"}},
    {"name": "n", "source": HTTP, "indexer": {"type": "webhook"}},
    {"name": "n", "source": HTTP, "indexer": None},
    {"name": "n", "source": HTTP, "page_retries": 21},
    {"name": "n", "source": HTTP, "page_retries": True},
    {"name": "n", "source": HTTP, "page_retries": None},
    {"name": "n", "source": HTTP, "throttle_seconds": -1},
    {"name": "n", "source": HTTP, "retry_on_status": [399]},
    {"name": "n", "source": HTTP, "retry_on_status": 503},
    {"name": "n", "source": HTTP, "sync_schedule": 5},
]


@pytest.mark.parametrize("body", AGREED)
def test_the_schema_accepts_what_the_server_accepts(body: dict[str, Any]) -> None:
    create(body)
    assert schema_errors(connector_file_schema(registry()), body) == []


@pytest.mark.parametrize("body", REFUSED)
def test_the_schema_refuses_what_the_server_refuses(body: dict[str, Any]) -> None:
    create_errors(body)
    assert schema_errors(connector_file_schema(registry()), body) != []


def test_named_component_schemas() -> None:
    schemas = model_json_schemas(registry())
    assert {
        "ConnectorCreate",
        "ConnectorPatch",
        "HttpSourceConfig",
        "CursorPagination",
        "OffsetPagination",
        "WebhookIndexerConfig",
        "StoreIndexerConfig",
    } <= set(schemas)
    refs = re.findall(r'"\$ref": "([^"]+)"', json.dumps(schemas))
    assert refs and all(ref.startswith("#/components/schemas/") for ref in refs)
    assert {ref.rsplit("/", 1)[1] for ref in refs} <= set(schemas)
    patch = schemas["ConnectorPatch"]
    assert "required" not in patch
    assert patch["properties"]["status"]["enum"] == ["active", "paused"]
    # An absent field is left unchanged: no default is described.
    assert not [k for k, v in patch["properties"].items() if "default" in v]
