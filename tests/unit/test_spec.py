"""Validation of connector bodies (syncd.schema.spec): every field, every message, all at once."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.errors import ValidationError
from syncd.indexers.base import IndexerKind
from syncd.models import ConnectorStatus, PaginatorSettings
from syncd.plugins import Registry, builtin_indexer_kinds, builtin_source_kinds
from syncd.schema.spec import INT_MAX, INT_MIN, parse_create, parse_patch
from syncd.sources.base import SourceKind

SOURCES = frozenset({"http", "plugin"})
INDEXERS = frozenset({"store", "webhook"})
DEFAULTS = PaginatorSettings()
HTTP_SOURCE = {
    "type": "http",
    "url": "http://127.0.0.1:9000/items",
    "records": "data",
    "id_field": "id",
    "pagination": {"type": "cursor", "cursor_param": "cursor", "next_cursor": "next_cursor"},
}
PLUGIN_SOURCE = {"type": "plugin", "anything": [1, 2]}
SECONDS = "Must be a number of seconds between 0 and 3600"
NUL = "Must not contain NUL characters (\\u0000)"
SURROGATE = "Must be valid Unicode text (no lone surrogates)"
PORT = "Port must be between 1 and 65535"
BIG = 10**400  # a JSON integer literal of 401 digits: no float holds it


def _unbuilt(config: Any, context: Any) -> Any:
    raise AssertionError("validation never builds a plugin")


def kinds(
    source_types: frozenset[str] | set[str] | tuple[str, ...] = SOURCES,
    indexer_types: frozenset[str] | set[str] | tuple[str, ...] = INDEXERS,
) -> Registry:
    """The built-in kinds of these names, and plain plugins (no validator) for the others."""
    sources = {k.name: k for k in builtin_source_kinds()}
    indexers = {k.name: k for k in builtin_indexer_kinds()}
    return Registry(
        [sources.get(n) or SourceKind(n, _unbuilt) for n in source_types],
        [indexers.get(n) or IndexerKind(n, _unbuilt) for n in indexer_types],
    )


def create(body: Any, **kw: Any) -> dict[str, Any]:
    kw.setdefault("defaults", DEFAULTS)
    registry = kinds(kw.pop("source_types", SOURCES), kw.pop("indexer_types", INDEXERS))
    return parse_create(body, kinds=registry, **kw)


def patch(body: Any) -> dict[str, Any]:
    return parse_patch(body, kinds=kinds())


def create_errors(body: Any, **kw: Any) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        create(body, **kw)
    return info.value.errors


def patch_errors(body: Any) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        patch(body)
    return info.value.errors


# --- create: happy paths ------------------------------------------------------------


def test_minimal_create_fills_defaults() -> None:
    assert create({"name": "tickets", "source": PLUGIN_SOURCE}) == {
        "name": "tickets",
        "source": PLUGIN_SOURCE,
        "indexer": {"type": "store"},
        "sync_schedule": None,
        "sync_timezone": None,
        "page_retries": 3,
        "page_retry_backoff": 2.0,
        "throttle_seconds": 0.0,
        "retry_on_status": (502, 503, 504),
    }


def test_daemon_defaults_are_used() -> None:
    defaults = PaginatorSettings(
        page_retries=7, page_retry_backoff=0.5, throttle_seconds=1.5, retry_on_status=(429,)
    )
    out = create({"name": "n", "source": PLUGIN_SOURCE}, defaults=defaults)
    assert (
        out["page_retries"],
        out["page_retry_backoff"],
        out["throttle_seconds"],
        out["retry_on_status"],
    ) == (7, 0.5, 1.5, (429,))


def test_full_create_from_the_design_example() -> None:
    body = {
        "name": "tickets",
        "source": {**HTTP_SOURCE, "params": {"limit": 100}, "headers": {"Authorization": "x"}},
        "indexer": {"type": "webhook", "url": "https://hooks.example/in", "headers": {"X": "y"}},
        "sync_schedule": "*/15  * * *   *",
        "sync_timezone": "Europe/Paris",
        "page_retries": 0,
        "page_retry_backoff": 1,
        "throttle_seconds": 0.25,
        "retry_on_status": [429, 503, 429],
    }
    out = create(body)
    assert out["source"] == body["source"]
    assert out["indexer"] == body["indexer"]
    assert out["sync_schedule"] == "*/15 * * * *"
    assert out["sync_timezone"] == "Europe/Paris"
    assert out["page_retries"] == 0
    assert out["page_retry_backoff"] == 1.0 and isinstance(out["page_retry_backoff"], float)
    assert out["throttle_seconds"] == 0.25
    assert out["retry_on_status"] == (429, 503)


def test_source_type_defaults_to_http() -> None:
    source = {k: v for k, v in HTTP_SOURCE.items() if k != "type"}
    out = create({"name": "n", "source": source})
    assert out["source"]["type"] == "http"
    assert "type" not in source  # the caller's mapping is not modified


def test_name_is_stripped() -> None:
    assert create({"name": "  tickets \t", "source": PLUGIN_SOURCE})["name"] == "tickets"


def test_name_of_maximum_length_is_accepted() -> None:
    assert len(create({"name": "x" * 200, "source": PLUGIN_SOURCE})["name"]) == 200


def test_null_schedule_and_timezone_are_accepted() -> None:
    out = create(
        {"name": "n", "source": PLUGIN_SOURCE, "sync_schedule": None, "sync_timezone": None}
    )
    assert out["sync_schedule"] is None and out["sync_timezone"] is None


def test_empty_retry_on_status_means_no_status_is_retried() -> None:
    assert (
        create({"name": "n", "source": PLUGIN_SOURCE, "retry_on_status": []})["retry_on_status"]
        == ()
    )


# --- create: errors -----------------------------------------------------------------


@pytest.mark.parametrize("body", [None, [], "x", 1, True])
def test_body_must_be_an_object(body: Any) -> None:
    assert create_errors(body) == {"body": "Must be a JSON object"}


def test_missing_required_fields() -> None:
    assert create_errors({}) == {"name": "Field required", "source": "Field required"}


def test_unknown_fields_are_listed() -> None:
    errors = create_errors({"name": "n", "source": PLUGIN_SOURCE, "colour": 1, "status": "x"})
    assert errors == {"colour": "Unknown field", "status": "Unknown field"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (1, "Must be a string"),
        (None, "Must be a string"),
        ("", "Must not be empty"),
        ("   ", "Must not be empty"),
        ("x" * 201, "Must be at most 200 characters"),
    ],
)
def test_bad_names(name: Any, message: str) -> None:
    assert create_errors({"name": name, "source": PLUGIN_SOURCE}) == {"name": message}


def test_every_bad_field_is_reported_at_once() -> None:
    errors = create_errors(
        {
            "name": "",
            "source": {"type": "ftp"},
            "indexer": {"type": "webhook"},
            "sync_schedule": "* * * *",
            "sync_timezone": "Mars/Olympus",
            "page_retries": 21,
            "page_retry_backoff": -1,
            "throttle_seconds": float("inf"),
            "retry_on_status": [200, "503", 503],
            "extra": 1,
        }
    )
    assert errors == {
        "name": "Must not be empty",
        "source.type": "Unknown source type 'ftp'; known: http, plugin",
        "indexer.url": "Field required",
        "sync_schedule": "Must be a valid 5-field cron expression",
        "sync_timezone": "Must be an IANA time zone name (e.g. Europe/Paris) or null",
        "page_retries": "Must be an integer between 0 and 20",
        "page_retry_backoff": SECONDS,
        "throttle_seconds": SECONDS,
        "retry_on_status.0": "Must be an integer between 400 and 599",
        "retry_on_status.1": "Must be an integer between 400 and 599",
        "extra": "Unknown field",
    }


@pytest.mark.parametrize(
    ("source", "errors"),
    [
        ("http://x", {"source": "Must be a JSON object"}),
        ([], {"source": "Must be a JSON object"}),
        ({"type": 3}, {"source.type": "Must be a string"}),
        ({"type": "ftp"}, {"source.type": "Unknown source type 'ftp'; known: http, plugin"}),
    ],
)
def test_bad_sources(source: Any, errors: dict[str, str]) -> None:
    assert create_errors({"name": "n", "source": source}) == errors


def test_http_source_config_is_validated_by_the_http_source() -> None:
    errors = create_errors({"name": "n", "source": {"type": "http"}})
    assert "source.url" in errors
    assert all(key.startswith("source.") for key in errors)


def test_unknown_source_type_with_no_types_registered() -> None:
    errors = create_errors({"name": "n", "source": PLUGIN_SOURCE}, source_types=())
    assert errors == {"source.type": "Unknown source type 'plugin'; known: none"}


@pytest.mark.parametrize(
    ("indexer", "errors"),
    [
        ("store", {"indexer": "Must be a JSON object"}),
        ({}, {"indexer.type": "Field required"}),
        ({"type": None}, {"indexer.type": "Field required"}),
        ({"type": 1}, {"indexer.type": "Must be a string"}),
        ({"type": "solr"}, {"indexer.type": "Unknown indexer type 'solr'; known: store, webhook"}),
        ({"type": "store", "url": "http://x"}, {"indexer.url": "Unknown field"}),
        ({"type": "webhook"}, {"indexer.url": "Field required"}),
        ({"type": "webhook", "url": 5}, {"indexer.url": "Must be an http:// or https:// URL"}),
        (
            {"type": "webhook", "url": "ftp://host/x"},
            {"indexer.url": "Must be an http:// or https:// URL"},
        ),
        (
            {"type": "webhook", "url": "http://"},
            {"indexer.url": "Must be an http:// or https:// URL"},
        ),
        (
            {"type": "webhook", "url": "http://[::1"},
            {"indexer.url": "Must be an http:// or https:// URL"},
        ),
        (
            {"type": "webhook", "url": "http://h/", "headers": ["a"]},
            {"indexer.headers": "Must be a JSON object"},
        ),
        (
            {"type": "webhook", "url": "http://h/", "headers": {"A": "ok", "B": 1}},
            {"indexer.headers.B": "Must be a string"},
        ),
        (
            {"type": "webhook", "url": "http://h/", "timeout": 3},
            {"indexer.timeout": "Unknown field"},
        ),
        ({"type": "webhook", "url": "http://h:99999/x"}, {"indexer.url": PORT}),
        ({"type": "webhook", "url": "http://h:0/x"}, {"indexer.url": PORT}),
        ({"type": "webhook", "url": "http://a..b/x"}, {"indexer.url": "Invalid host name"}),
        (
            {"type": "webhook", "url": "http://h/", "headers": {"A B": "x", "C": "x\r\nD: y"}},
            {
                "indexer.headers.A B": "Invalid header name",
                "indexer.headers.C": "Must not contain line breaks",
            },
        ),
        (
            {"type": "webhook", "url": "http://h/", "headers": {"A": "${vault:x}"}},
            {
                "indexer.headers.A": "unsupported reference ${vault:x}: "
                "use ${env:NAME} or ${file:/path}"
            },
        ),
    ],
)
def test_bad_indexers(indexer: Any, errors: dict[str, str]) -> None:
    assert create_errors({"name": "n", "source": PLUGIN_SOURCE, "indexer": indexer}) == errors


def test_webhook_without_headers_is_valid() -> None:
    indexer = {"type": "webhook", "url": "http://127.0.0.1:1/hook"}
    assert create({"name": "n", "source": PLUGIN_SOURCE, "indexer": indexer})["indexer"] == indexer


def test_plugin_indexer_config_is_passed_through() -> None:
    indexer = {"type": "search", "index": "tickets"}
    out = create(
        {"name": "n", "source": PLUGIN_SOURCE, "indexer": indexer},
        indexer_types={"store", "search"},
    )
    assert out["indexer"] == indexer


@pytest.mark.parametrize(
    "expression",
    ["* * * *", "* * * * * *", "61 * * * *", "@hourly", "not cron", "", "* * * * 8"],
)
def test_bad_cron_expressions(expression: str) -> None:
    errors = create_errors({"name": "n", "source": PLUGIN_SOURCE, "sync_schedule": expression})
    assert errors == {"sync_schedule": "Must be a valid 5-field cron expression"}


def test_schedule_must_be_a_string() -> None:
    errors = create_errors({"name": "n", "source": PLUGIN_SOURCE, "sync_schedule": 5})
    assert errors == {"sync_schedule": "Must be a string or null"}


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", 3, "../etc/passwd"])
def test_bad_time_zones(tz: Any) -> None:
    errors = create_errors({"name": "n", "source": PLUGIN_SOURCE, "sync_timezone": tz})
    assert list(errors) == ["sync_timezone"]


@pytest.mark.parametrize("value", [-1, 21, True, 1.5, "3", None, BIG, -BIG])
def test_bad_page_retries(value: Any) -> None:
    errors = create_errors({"name": "n", "source": PLUGIN_SOURCE, "page_retries": value})
    assert errors == {"page_retries": "Must be an integer between 0 and 20"}


@pytest.mark.parametrize("value", [0, 20])
def test_page_retries_bounds(value: int) -> None:
    assert (
        create({"name": "n", "source": PLUGIN_SOURCE, "page_retries": value})["page_retries"]
        == value
    )


@pytest.mark.parametrize("key", ["page_retry_backoff", "throttle_seconds"])
@pytest.mark.parametrize(
    "value",
    [-0.1, 3600.001, 3601, 1e12, BIG, -BIG, float("nan"), float("inf"), True, "1", None],
)
def test_bad_seconds(key: str, value: Any) -> None:
    assert create_errors({"name": "n", "source": PLUGIN_SOURCE, key: value}) == {key: SECONDS}
    assert patch_errors({key: value}) == {key: SECONDS}


@pytest.mark.parametrize("key", ["page_retry_backoff", "throttle_seconds"])
@pytest.mark.parametrize("value", [0, 0.5, 3600, 3600.0])
def test_seconds_bounds(key: str, value: float) -> None:
    out = create({"name": "n", "source": PLUGIN_SOURCE, key: value})
    assert out[key] == value and isinstance(out[key], float)
    assert patch({key: value}) == {key: float(value)}


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        ("502", {"retry_on_status": "Must be a list of HTTP status codes"}),
        (502, {"retry_on_status": "Must be a list of HTTP status codes"}),
        ([399], {"retry_on_status.0": "Must be an integer between 400 and 599"}),
        ([503, 600], {"retry_on_status.1": "Must be an integer between 400 and 599"}),
        ([True], {"retry_on_status.0": "Must be an integer between 400 and 599"}),
        ([502.5], {"retry_on_status.0": "Must be an integer between 400 and 599"}),
        ([502, BIG], {"retry_on_status.1": "Must be an integer between 400 and 599"}),
    ],
)
def test_bad_retry_on_status(value: Any, errors: dict[str, str]) -> None:
    assert create_errors({"name": "n", "source": PLUGIN_SOURCE, "retry_on_status": value}) == errors


# --- patch --------------------------------------------------------------------------


def test_empty_patch_changes_nothing() -> None:
    assert patch({}) == {}


def test_patch_returns_only_given_fields() -> None:
    out = patch({"status": "paused", "sync_schedule": None, "throttle_seconds": 2})
    assert out == {"status": ConnectorStatus.PAUSED, "sync_schedule": None, "throttle_seconds": 2.0}
    assert isinstance(out["status"], ConnectorStatus)


def test_patch_can_replace_source_and_indexer() -> None:
    out = patch({"name": " renamed ", "source": PLUGIN_SOURCE, "indexer": {"type": "store"}})
    assert out == {"name": "renamed", "source": PLUGIN_SOURCE, "indexer": {"type": "store"}}


@pytest.mark.parametrize("status", ["active", "paused"])
def test_patch_status_values(status: str) -> None:
    assert patch({"status": status}) == {"status": ConnectorStatus(status)}


@pytest.mark.parametrize("status", ["error", "deleting", "ACTIVE", None, 1])
def test_patch_refuses_other_statuses(status: Any) -> None:
    assert patch_errors({"status": status}) == {"status": "Must be one of: active, paused"}


def test_patch_errors_are_listed_at_once() -> None:
    assert patch_errors(
        {"name": None, "source": {"type": "ftp"}, "status": "error", "id": "x", "run_id": None}
    ) == {
        "name": "Must be a string",
        "source.type": "Unknown source type 'ftp'; known: http, plugin",
        "status": "Must be one of: active, paused",
        "id": "Unknown field",
        "run_id": "Unknown field",
    }


@pytest.mark.parametrize("body", [None, [1], "x"])
def test_patch_body_must_be_an_object(body: Any) -> None:
    assert patch_errors(body) == {"body": "Must be a JSON object"}


# --- ranges of the http source's keys -------------------------------------------------


@pytest.mark.parametrize(
    ("source", "errors"),
    [
        ({"max_pages": 0}, {"source.max_pages": "Must be an integer between 1 and 1000000000"}),
        (
            {"max_pages": 1_000_000_001},
            {"source.max_pages": "Must be an integer between 1 and 1000000000"},
        ),
        (
            {"max_pages": 10**30},
            {"source.max_pages": "Must be an integer between 1 and 1000000000"},
        ),
        ({"max_pages": BIG}, {"source.max_pages": "Must be an integer between 1 and 1000000000"}),
        ({"max_pages": True}, {"source.max_pages": "Must be an integer between 1 and 1000000000"}),
        (
            {"pagination": {"type": "offset", "limit": 0}},
            {"source.pagination.limit": "Must be an integer between 1 and 1000000"},
        ),
        (
            {"pagination": {"type": "offset", "limit": 10**30}},
            {"source.pagination.limit": "Must be an integer between 1 and 1000000"},
        ),
        (
            {"pagination": {"type": "page", "start": -1}},
            {"source.pagination.start": "Must be an integer between 0 and 1000000000"},
        ),
        (
            {"pagination": {"type": "page", "start": 10**30}},
            {"source.pagination.start": "Must be an integer between 0 and 1000000000"},
        ),
        (
            {"timeout": {"read": 0, "connect": 3600.5}},
            {
                "source.timeout.read": "Must be a number of seconds > 0 and <= 3600",
                "source.timeout.connect": "Must be a number of seconds > 0 and <= 3600",
            },
        ),
        (
            {"timeout": {"read": BIG, "connect": float("nan")}},
            {
                "source.timeout.read": "Must be a number of seconds > 0 and <= 3600",
                "source.timeout.connect": "Must be a number of seconds > 0 and <= 3600",
            },
        ),
        ({"url": "http://127.0.0.1:99999/items"}, {"source.url": PORT}),
        ({"url": "http://127.0.0.1:0/items"}, {"source.url": PORT}),
        ({"url": "https://[::1]:65536/items"}, {"source.url": PORT}),
        ({"url": "http://h:" + "9" * 5000}, {"source.url": PORT}),
        ({"url": "http://h:port/"}, {"source.url": "Must be an http:// or https:// URL"}),
        ({"url": "http://" + "a" * 64 + ".example/"}, {"source.url": "Invalid host name"}),
        ({"url": "http://a..b/"}, {"source.url": "Invalid host name"}),
    ],
)
def test_http_source_ranges(source: dict[str, Any], errors: dict[str, str]) -> None:
    body = {"source": {**HTTP_SOURCE, **source}}
    assert create_errors({"name": "n", **body}) == errors
    assert patch_errors(body) == errors


def test_http_source_range_bounds_are_accepted() -> None:
    for source in (
        {"max_pages": 1, "timeout": {"read": 0.001, "connect": 3600}},
        {"max_pages": 1_000_000_000, "pagination": {"type": "offset", "limit": 1}},
        {"pagination": {"type": "offset", "limit": 1_000_000}},
        {"pagination": {"type": "page", "start": 0}},
        {"pagination": {"type": "page", "start": 1_000_000_000}},
        {"url": "http://127.0.0.1:1/items"},
        {"url": "https://[::1]:65535/items"},
        {"url": "http://ü.example/items"},
    ):
        config = {**HTTP_SOURCE, **source}
        assert create({"name": "n", "source": config})["source"] == config
        assert patch({"source": config}) == {"source": config}


# --- values no store can hold --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"name": "a\x00b"}, {"name": NUL}),
        ({"name": "a\ud800b"}, {"name": SURROGATE}),
        ({"sync_schedule": "* * * * *\x00"}, {"sync_schedule": NUL}),
        ({"sync_timezone": "UTC\x00"}, {"sync_timezone": NUL}),
        ({"source": {**HTTP_SOURCE, "url": "http://h/\x00"}}, {"source.url": NUL}),
        ({"source": {**HTTP_SOURCE, "records": "da\x00ta"}}, {"source.records": NUL}),
        ({"source": {**HTTP_SOURCE, "params": {"q": "\x00"}}}, {"source.params.q": NUL}),
        (
            {"source": {**HTTP_SOURCE, "params": {"q\x00": "v"}}},
            {"source.params": f"Key 'q\\x00': {NUL}"},
        ),
        ({"source": {**HTTP_SOURCE, "headers": {"A": "x\x00"}}}, {"source.headers.A": NUL}),
        (
            {"source": {**PLUGIN_SOURCE, "deep": [{"x": ["ok", "\x00"]}]}},
            {"source.deep.0.x.1": NUL},
        ),
        ({"source": {**PLUGIN_SOURCE, "k": "\udc80"}}, {"source.k": SURROGATE}),
        ({"indexer": {"type": "webhook", "url": "http://h/\x00"}}, {"indexer.url": NUL}),
        (
            {"indexer": {"type": "webhook", "url": "http://h/", "headers": {"K": "\x00"}}},
            {"indexer.headers.K": NUL},
        ),
        ({"colour\x00": 1}, {"colour\x00": "Unknown field", "body": f"Key 'colour\\x00': {NUL}"}),
    ],
)
def test_text_no_store_can_hold(body: dict[str, Any], errors: dict[str, str]) -> None:
    assert create_errors({"name": "n", "source": PLUGIN_SOURCE, **body}) == errors
    assert patch_errors(body) == errors


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (INT_MAX + 1, f"Must be an integer between {INT_MIN} and {INT_MAX}"),
        (INT_MIN - 1, f"Must be an integer between {INT_MIN} and {INT_MAX}"),
        (BIG, f"Must be an integer between {INT_MIN} and {INT_MAX}"),
        (float("inf"), "Must be a finite number"),
        (float("nan"), "Must be a finite number"),
    ],
)
def test_numbers_no_store_reads_back(value: Any, message: str) -> None:
    """Anywhere in a body, plugin configs and http params included."""
    plugin = {"source": {**PLUGIN_SOURCE, "n": [value]}}
    assert create_errors({"name": "n", **plugin}) == {"source.n.0": message}
    assert patch_errors(plugin) == {"source.n.0": message}
    indexer = {"type": "search", "opts": {"n": value}}
    errors = create_errors(
        {"name": "n", "source": PLUGIN_SOURCE, "indexer": indexer},
        indexer_types={"store", "search"},
    )
    assert errors == {"indexer.opts.n": message}
    params = {"source": {**HTTP_SOURCE, "params": {"n": value}}}
    assert list(patch_errors(params)) == ["source.params.n"]


def test_numbers_every_store_reads_back_are_accepted() -> None:
    source = {**PLUGIN_SOURCE, "n": [INT_MIN, INT_MAX, 1e308, -1e-308, 0.5]}
    assert create({"name": "n", "source": source})["source"] == source
    http = {**HTTP_SOURCE, "params": {"a": INT_MAX, "b": INT_MIN, "c": 1.5}}
    assert patch({"source": http}) == {"source": http}


def test_nesting_is_limited() -> None:
    deep: list[Any] = []
    inner = deep
    for _ in range(40):
        inner.append([])
        inner = inner[0]
    errors = patch_errors({"source": {**PLUGIN_SOURCE, "deep": deep}})
    # The body is level 1, ``source`` level 2, ``source.deep`` level 3: the 33rd is refused.
    assert errors == {"source.deep" + ".0" * 30: "Must not be nested more than 32 levels deep"}
    shallow: list[Any] = []
    inner = shallow
    for _ in range(29):
        inner.append([])
        inner = inner[0]
    assert patch({"source": {**PLUGIN_SOURCE, "deep": shallow}})["source"]["deep"] == shallow


def test_keys_must_be_strings_when_embedded() -> None:
    errors = patch_errors({"source": {**PLUGIN_SOURCE, ("a", "b"): 1}})
    assert errors == {"source": "Keys must be strings"}


def test_every_problem_is_reported_with_the_field_errors() -> None:
    errors = create_errors(
        {
            "name": "a\x00",
            "source": {**HTTP_SOURCE, "max_pages": 0, "params": {"n": BIG}},
            "throttle_seconds": BIG,
        }
    )
    assert errors == {
        "source.max_pages": "Must be an integer between 1 and 1000000000",
        "throttle_seconds": SECONDS,
        "name": NUL,
        "source.params.n": f"Must be an integer between {INT_MIN} and {INT_MAX}",
    }


def test_paginator_defaults_have_one_home() -> None:
    # A connector created without the four keys gets the same values as a Connector record
    # built without them.
    from datetime import UTC, datetime

    from syncd.models import DEFAULT_PAGINATOR, Connector

    out = create({"name": "n", "source": PLUGIN_SOURCE}, defaults=DEFAULT_PAGINATOR)
    now = datetime.now(UTC)
    record = Connector(id="c", name="n", source={}, indexer={}, created_at=now, updated_at=now)
    for key in ("page_retries", "page_retry_backoff", "throttle_seconds", "retry_on_status"):
        assert out[key] == getattr(record, key) == getattr(DEFAULT_PAGINATOR, key)
