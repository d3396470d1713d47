"""Input validation (422), body limit (413), authentication (401), unexpected errors (500)
and secret masking of the control API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pydantic import BaseModel, ConfigDict, Field

from syncd.api import build_app, views
from syncd.config import Config
from syncd.models import (
    Connector,
    DocStatus,
    Progress,
    SyncStatus,
    Waiting,
    WaitReason,
)
from syncd.sources.base import SourceKind
from tests.integration.sourceserver import SourceServer

from .conftest import (
    CONNECTOR_KEYS,
    TOKEN,
    ZERO_DOCS,
    Api,
    Feed,
    FeedSource,
    Harness,
    HoldIndexer,
    StartDaemon,
)

if TYPE_CHECKING:
    from syncd.indexers.base import IndexerContext
    from syncd.sources.base import SourceContext

MISSING = "0000000000000000000000000"
SECONDS = "Must be a number of seconds between 0 and 3600"
PORT = "Port must be between 1 and 65535"
NUL = "Must not contain NUL characters (\\u0000)"
INT64 = "Must be an integer between -9223372036854775808 and 9223372036854775807"
HTTP = {"type": "http", "url": "http://127.0.0.1:9/items", "records": "data"}


def details(reply: Any) -> dict[tuple[Any, ...], str]:
    """``{"detail": [{"loc", "msg"}]}`` → ``{tuple(loc): msg}``."""
    assert reply.status == 422, reply.body
    return {tuple(d["loc"]): d["msg"] for d in reply.body["detail"]}


# --- bodies ---------------------------------------------------------------------------


async def test_create_lists_every_bad_field(api: Api) -> None:
    reply = await api.post(
        "/connectors",
        {
            "name": "",
            "source": {"type": "ftp"},
            "sync_schedule": "every hour",
            "page_retries": True,
            "retry_on_status": [503, 99],
            "colour": "blue",
        },
    )
    assert details(reply) == {
        ("body", "name"): "Must not be empty",
        ("body", "source", "type"): "Unknown source type 'ftp'; known: feed, http",
        ("body", "sync_schedule"): "Must be a valid 5-field cron expression",
        ("body", "page_retries"): "Must be an integer between 0 and 20",
        ("body", "retry_on_status", 1): "Must be an integer between 400 and 599",
        ("body", "colour"): "Unknown field",
    }


async def test_create_requires_name_and_source(api: Api) -> None:
    assert details(await api.post("/connectors", {})) == {
        ("body", "name"): "Field required",
        ("body", "source"): "Field required",
    }


async def test_http_source_errors_name_the_source_field(api: Api) -> None:
    reply = await api.post("/connectors", {"name": "n", "source": {"type": "http"}})
    found = details(reply)
    assert ("body", "source", "url") in found
    assert all(loc[:2] == ("body", "source") for loc in found)


@pytest.mark.parametrize(
    ("data", "message_start"),
    [
        ("{not json", "Invalid JSON: "),
        ("", "Invalid JSON: "),
        ('{"name": NaN}', "Invalid JSON: "),
        (b"\xff\xfe", "Invalid JSON: "),
        ("[1, 2]", "Must be a JSON object"),
        ('"text"', "Must be a JSON object"),
        ('{"name": ' + "[" * 200_000 + "]" * 200_000 + "}", "Invalid JSON: "),
        ('{"name": "a\\ud800b", "source": {"type": "feed"}}', "Invalid JSON: "),
    ],
)
async def test_bodies_that_are_not_a_json_object(
    api: Api, data: str | bytes, message_start: str
) -> None:
    c = await api.create()
    for method, path in (("POST", "/connectors"), ("PATCH", f"/connectors/{c['id']}")):
        reply = await api.call(method, path, data=data)
        [(loc, msg)] = details(reply).items()
        assert loc == ("body",)
        assert msg.startswith(message_start), msg


async def test_inputs_that_once_crashed_are_field_errors(api: Api) -> None:
    reply = await api.post(
        "/connectors",
        {"name": "x", "source": {"type": "http", "url": "http://[::1/", "records": "data"}},
    )
    assert details(reply) == {("body", "source", "url"): "Must be an http:// or https:// URL"}
    never = await api.post(
        "/connectors", {"name": "x", "source": {"type": "feed"}, "sync_schedule": "0 0 31 2 *"}
    )
    assert details(never) == {("body", "sync_schedule"): "Must be a valid 5-field cron expression"}


UNKNOWN_KEYS: list[tuple[dict[str, Any], tuple[Any, ...], str]] = [
    ({"source": {**HTTP, "colour": 1}}, ("source", "colour"), "Unknown field"),
    (
        {"source": {**HTTP, "timeout": {"total": 1}}},
        ("source", "timeout", "total"),
        "Unknown field",
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "offset", "start": 1}}},
        ("source", "pagination", "start"),
        "Unknown field for pagination type 'offset'",
    ),
    (
        {"indexer": {"type": "webhook", "url": "http://h/", "method": "PUT"}},
        ("indexer", "method"),
        "Unknown field",
    ),
    ({"indexer": {"type": "store", "x": 1}}, ("indexer", "x"), "Unknown field"),
]


@pytest.mark.parametrize(("fields", "loc", "message"), UNKNOWN_KEYS)
async def test_unknown_keys_of_builtin_kinds_are_named(
    api: Api, fields: dict[str, Any], loc: tuple[Any, ...], message: str
) -> None:
    c = await api.create()
    body = {"name": "n", "source": {"type": "feed"}, **fields}
    assert details(await api.post("/connectors", body)) == {("body", *loc): message}
    assert details(await api.patch(f"/connectors/{c['id']}", fields)) == {("body", *loc): message}


class CounterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int = Field(3, ge=1)


async def test_a_plugin_config_model_is_checked(harness: Harness) -> None:
    def counter(config: Mapping[str, Any], context: SourceContext) -> FeedSource:
        return FeedSource(harness.feed)

    harness.daemon.register_source(
        "counter", SourceKind("counter", counter, config_model=CounterConfig)
    )
    bad = {"name": "n", "source": {"type": "counter", "count": "many", "bogus": True}}
    assert details(await harness.api.post("/connectors", bad)) == {
        ("body", "source", "count"): (
            "Input should be a valid integer, unable to parse string as an integer"
        ),
        ("body", "source", "bogus"): "Unknown field",
    }
    created = await harness.api.post("/connectors", {"name": "n", "source": {"type": "counter"}})
    assert created.status == 201, created.body
    assert created.body["source"] == {"type": "counter"}  # no default written into it
    # A plain factory (no model) takes any object with its type.
    anything = {"type": "feed", "count": "many", "bogus": True}
    created = await harness.api.post("/connectors", {"name": "m", "source": anything})
    assert created.status == 201, created.body
    assert created.body["source"] == anything


async def test_unknown_connector_is_404_before_query_errors(api: Api) -> None:
    for path in (
        f"/connectors/{MISSING}/runs?limit=abc",
        f"/connectors/{MISSING}/documents?status=x",
    ):
        reply = await api.get(path)
        assert (reply.status, reply.body) == (404, {"detail": "Connector not found"})


async def test_patch_validation(api: Api) -> None:
    c = await api.create()
    reply = await api.patch(
        f"/connectors/{c['id']}",
        {"status": "error", "sync_timezone": "Nowhere/Land", "throttle_seconds": -1, "id": "x"},
    )
    assert details(reply) == {
        ("body", "status"): "Must be one of: active, paused",
        ("body", "sync_timezone"): "Must be an IANA time zone name (e.g. Europe/Paris) or null",
        ("body", "throttle_seconds"): SECONDS,
        ("body", "id"): "Unknown field",
    }
    # Nothing was applied.
    assert (await api.get(f"/connectors/{c['id']}")).body == c


async def test_patch_of_an_unknown_connector_is_404_before_422(api: Api) -> None:
    reply = await api.patch(f"/connectors/{MISSING}", {"status": "nope"})
    assert (reply.status, reply.body) == (404, {"detail": "Connector not found"})


# --- query strings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "limit", ["0", "1001", "-1", "ten", "", "1.5", " 5", "+5", "\u0663", "9" * 5000, "1" + "0" * 20]
)
async def test_bad_limits(api: Api, limit: str) -> None:
    c = await api.create()
    for path in ("/connectors", f"/connectors/{c['id']}/runs", f"/connectors/{c['id']}/documents"):
        reply = await api.get(path, params={"limit": limit})
        assert details(reply) == {("query", "limit"): "Must be an integer between 1 and 1000"}


@pytest.mark.parametrize("limit", ["1", "1000"])
async def test_limit_bounds_are_accepted(api: Api, limit: str) -> None:
    assert (await api.get("/connectors", params={"limit": limit})).status == 200


async def test_bad_status_filters(api: Api) -> None:
    c = await api.create()
    reply = await api.get("/connectors", params={"status": "running"})
    assert details(reply) == {
        ("query", "status"): "Must be one of: active, paused, error, deleting"
    }
    reply = await api.get(f"/connectors/{c['id']}/documents", params={"status": "active"})
    assert details(reply) == {
        ("query", "status"): "Must be one of: pending, running, indexed, failed, deleted"
    }


@pytest.mark.parametrize("cursor", ["", "\x01", "x" * 2000, "AA"])
async def test_bad_cursors(api: Api, cursor: str) -> None:
    c = await api.create()
    for path in ("/connectors", f"/connectors/{c['id']}/runs", f"/connectors/{c['id']}/documents"):
        reply = await api.get(path, params={"cursor": cursor})
        [loc] = details(reply)
        assert loc == ("query", "cursor"), path


# --- limits, routing --------------------------------------------------------------------


async def test_body_over_the_limit_is_413(start_daemon: StartDaemon) -> None:
    h = await start_daemon(max_body_bytes=1024)
    body = {"name": "n", "source": {"type": "feed", "pad": "x" * 2000}}
    reply = await h.api.post("/connectors", body)
    assert (reply.status, reply.body) == (
        413,
        {"detail": "Request body too large (limit: 1024 bytes)"},
    )
    small = await h.api.post("/connectors", {"name": "n", "source": {"type": "feed"}})
    assert small.status == 201


async def test_unknown_paths_and_methods_answer_json(api: Api) -> None:
    missing = await api.get("/nope")
    assert (missing.status, missing.body) == (404, {"detail": "Not Found"})
    wrong = await api.call("PUT", "/connectors")
    assert (wrong.status, wrong.body) == (405, {"detail": "Method Not Allowed"})
    assert set(wrong.headers["Allow"].split(",")) == {"GET", "POST"}


# --- authentication -----------------------------------------------------------------------


async def test_token_is_required_on_every_route_but_healthz(start_daemon: StartDaemon) -> None:
    h = await start_daemon(token=TOKEN)
    c = await h.api.create()
    anonymous: list[tuple[str, str]] = [
        ("GET", "/connectors"),
        ("POST", "/connectors"),
        ("GET", f"/connectors/{c['id']}"),
        ("PATCH", f"/connectors/{c['id']}"),
        ("DELETE", f"/connectors/{c['id']}"),
        ("POST", f"/connectors/{c['id']}/sync"),
        ("POST", f"/connectors/{c['id']}/sync/abort"),
        ("GET", f"/connectors/{c['id']}/runs"),
        ("GET", f"/connectors/{c['id']}/documents"),
        ("GET", f"/connectors/{c['id']}/documents/x"),
        ("POST", f"/connectors/{c['id']}/retry-failed"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("GET", "/nope"),
    ]
    wrong = [
        {},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
        {"Authorization": "Bearer"},
    ]
    for headers in wrong:
        for method, path in anonymous:
            reply = await h.api.call(method, path, headers=headers, auth=False)
            assert (reply.status, reply.body) == (401, {"detail": "Unauthorized"}), (path, headers)
            assert reply.headers["WWW-Authenticate"] == "Bearer"
    # Nothing was done by the refused requests.
    assert (await h.api.get(f"/connectors/{c['id']}")).body["sync_status"] == "idle"

    health = await h.api.get("/healthz", auth=False)
    assert (health.status, health.body) == (200, {"status": "ok"})
    for scheme in ("Bearer", "bearer"):
        ok = await h.api.get(
            f"/connectors/{c['id']}", headers={"Authorization": f"{scheme} {TOKEN}"}, auth=False
        )
        assert ok.status == 200


# --- unexpected errors ------------------------------------------------------------------


async def test_unexpected_errors_are_500_without_details(harness: Harness) -> None:
    d = harness.daemon
    app = build_app(d.service, d, d.config.api)

    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("secret internals at /srv/db password=hunter2")

    app.router.add_get("/boom", boom)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/boom")
        assert response.status == 500
        assert await response.json() == {"detail": "Internal server error"}
        # The app still serves.
        assert (await client.get("/healthz")).status == 200


# --- secrets ------------------------------------------------------------------------------


async def test_secrets_are_masked_in_every_answer(api: Api) -> None:
    canaries = ["canary-header-1", "canary-password-2", "canary-hook-3"]
    body = {
        "name": "secretive",
        "source": {
            "type": "http",
            "url": "http://user:canary-password-2@127.0.0.1:9/items",
            "headers": {"Authorization": "Bearer canary-header-1", "X-Ref": "${env:TOKEN}"},
            "records": "data",
        },
        "indexer": {
            "type": "webhook",
            "url": "http://127.0.0.1:9/hook",
            "headers": {"X-Hook-Key": "canary-hook-3"},
        },
    }
    created = await api.post("/connectors", body)
    assert created.status == 201, created.body
    c = created.body
    assert c["source"]["headers"] == {"Authorization": "***", "X-Ref": "***"}
    assert c["indexer"]["headers"] == {"X-Hook-Key": "***"}
    assert c["indexer"]["url"] == "http://127.0.0.1:9/hook"
    assert c["source"]["records"] == "data"
    patched = await api.patch(f"/connectors/{c['id']}", {"status": "paused"})
    answers = [
        created.text,
        patched.text,
        (await api.get(f"/connectors/{c['id']}")).text,
        (await api.get("/connectors")).text,
    ]
    for text in answers:
        for canary in canaries:
            assert canary not in text
        assert "resume_cursor" not in text and "source_state" not in text


# --- the built-in http source, end to end -----------------------------------------------


async def test_http_source_sync_with_a_secret_header(harness: Harness) -> None:
    async with SourceServer(12, page_size=5) as server:
        reply = await harness.api.post(
            "/connectors",
            {
                "name": "tickets",
                "source": {
                    "url": server.items_url,
                    "headers": {"Authorization": "Bearer canary-secret-42"},
                    "records": "data",
                    "pagination": {
                        "type": "cursor",
                        "cursor_param": "cursor",
                        "next_cursor": "next_cursor",
                    },
                },
            },
        )
        assert reply.status == 201, reply.body
        c = reply.body
        assert c["source"]["type"] == "http"
        assert c["source"]["headers"] == {"Authorization": "***"}
        assert c["source"]["url"] == server.items_url
        started = await harness.api.post(f"/connectors/{c['id']}/sync")
        assert started.status == 202
        await harness.daemon.wait_run(c["id"])
        assert server.cursors == [None, "page-1", "page-2"]
        assert {r.headers["Authorization"] for r in server.requests} == {"Bearer canary-secret-42"}
    shown = await harness.api.get(f"/connectors/{c['id']}")
    assert "canary-secret-42" not in shown.text
    assert shown.body["progress"] == {"pages": 3, "documents": 12}
    assert shown.body["last_error"] is None
    doc = await harness.api.get(f"/connectors/{c['id']}/documents/item-00007")
    assert doc.status == 200
    assert doc.body["payload"] == {
        "id": "item-00007",
        "title": "Item 7",
        "updated_at": "2024-01-01T00:07:00Z",
    }


# --- views ------------------------------------------------------------------------------


def test_connector_json_shows_waits_and_hides_internal_state() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    connector = Connector(
        id="c1",
        name="n",
        source={"type": "http", "url": "http://u:pw@h/x", "headers": {"A": "b"}},
        indexer={"type": "webhook", "url": "http://h/", "headers": {"K": "v"}},
        created_at=now,
        updated_at=now.astimezone(timezone(timedelta(hours=2))),
        sync_status=SyncStatus.RUNNING,
        run_id="r1",
        waiting=Waiting(WaitReason.RETRY_AFTER, now + timedelta(seconds=30)),
        progress=Progress(pages=2, documents=40),
        resume_cursor="secret-cursor",
        source_state={"high_water": "x"},
    )
    out = views.connector_json(connector, {DocStatus.PENDING: 3})
    assert set(out) == CONNECTOR_KEYS
    assert out["waiting"] == {"reason": "retry_after", "until": "2024-05-01T12:00:30Z"}
    assert out["updated_at"] == "2024-05-01T12:00:00Z"
    assert out["progress"] == {"pages": 2, "documents": 40}
    assert out["documents"] == {**ZERO_DOCS, "pending": 3}
    assert out["source"]["headers"] == {"A": "***"}
    assert "pw" not in out["source"]["url"]
    assert out["indexer"]["headers"] == {"K": "***"}
    assert "secret-cursor" not in repr(out) and "high_water" not in repr(out)


# --- ranges: refused at create and PATCH, never accepted to fail every run ---------------


RANGES: list[tuple[dict[str, Any], dict[tuple[Any, ...], str]]] = [
    ({"page_retries": 21}, {("body", "page_retries"): "Must be an integer between 0 and 20"}),
    ({"page_retries": -1}, {("body", "page_retries"): "Must be an integer between 0 and 20"}),
    ({"page_retry_backoff": 3600.5}, {("body", "page_retry_backoff"): SECONDS}),
    ({"page_retry_backoff": -0.5}, {("body", "page_retry_backoff"): SECONDS}),
    ({"throttle_seconds": 1e12}, {("body", "throttle_seconds"): SECONDS}),
    ({"throttle_seconds": 3601}, {("body", "throttle_seconds"): SECONDS}),
    (
        {"prune_confirmations": 0},
        {("body", "prune_confirmations"): "Must be an integer between 1 and 100"},
    ),
    (
        {"prune_confirmations": True},
        {("body", "prune_confirmations"): "Must be an integer between 1 and 100"},
    ),
    (
        {"prune_confirmations": "2"},
        {("body", "prune_confirmations"): "Must be an integer between 1 and 100"},
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "page", "shifts": "yes"}}},
        {("body", "source", "pagination", "shifts"): "Must be true or false"},
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "cursor", "shifts": None}}},
        {("body", "source", "pagination", "shifts"): "Must be true or false"},
    ),
    (
        {"retry_on_status": [399, 429, 600]},
        {
            ("body", "retry_on_status", 0): "Must be an integer between 400 and 599",
            ("body", "retry_on_status", 2): "Must be an integer between 400 and 599",
        },
    ),
    (
        {"source": {**HTTP, "max_pages": 10**30}},
        {("body", "source", "max_pages"): "Must be an integer between 1 and 1000000000"},
    ),
    (
        {"source": {**HTTP, "max_pages": 0}},
        {("body", "source", "max_pages"): "Must be an integer between 1 and 1000000000"},
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "offset", "limit": 10**30}}},
        {("body", "source", "pagination", "limit"): "Must be an integer between 1 and 1000000"},
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "offset", "limit": 0}}},
        {("body", "source", "pagination", "limit"): "Must be an integer between 1 and 1000000"},
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "offset", "overlap": -1}}},
        {("body", "source", "pagination", "overlap"): "Must be an integer between 0 and 999999"},
    ),
    (
        {"source": {**HTTP, "pagination": {"type": "page", "start": 10**30}}},
        {
            ("body", "source", "pagination", "start"): (
                "Must be an integer between 0 and 1000000000"
            )
        },
    ),
    (
        {"source": {**HTTP, "timeout": {"read": 3601, "connect": 0}}},
        {
            ("body", "source", "timeout", "read"): "Must be a number of seconds > 0 and <= 3600",
            ("body", "source", "timeout", "connect"): (
                "Must be a number of seconds > 0 and <= 3600"
            ),
        },
    ),
    (
        {"source": {**HTTP, "url": "http://127.0.0.1:99999/items"}},
        {("body", "source", "url"): PORT},
    ),
    ({"source": {**HTTP, "url": "http://127.0.0.1:0/items"}}, {("body", "source", "url"): PORT}),
    (
        {"indexer": {"type": "webhook", "url": "http://127.0.0.1:65536/hook"}},
        {("body", "indexer", "url"): PORT},
    ),
    (
        {"indexer": {"type": "webhook", "url": "http://a..b/hook"}},
        {("body", "indexer", "url"): "Invalid host name"},
    ),
]


@pytest.mark.parametrize(("fields", "expected"), RANGES)
async def test_out_of_range_fields(
    api: Api, fields: dict[str, Any], expected: dict[tuple[Any, ...], str]
) -> None:
    c = await api.create()
    created = await api.post("/connectors", {"name": "n", "source": {"type": "feed"}, **fields})
    assert details(created) == expected
    assert details(await api.patch(f"/connectors/{c['id']}", fields)) == expected
    assert (await api.get(f"/connectors/{c['id']}")).body == c
    assert [x["id"] for x in (await api.get("/connectors")).body["data"]] == [c["id"]]


async def test_out_of_range_fields_are_reported_at_once(api: Api) -> None:
    fields = {
        "name": "n",
        "source": {**HTTP, "url": "http://h:99999/", "max_pages": 10**30},
        "throttle_seconds": 1e12,
        "page_retry_backoff": -1,
    }
    assert details(await api.post("/connectors", fields)) == {
        ("body", "source", "url"): PORT,
        ("body", "source", "max_pages"): "Must be an integer between 1 and 1000000000",
        ("body", "page_retry_backoff"): SECONDS,
        ("body", "throttle_seconds"): SECONDS,
    }


BIG = "1" + "0" * 400  # a JSON integer literal no float holds


@pytest.mark.parametrize(
    ("fragment", "loc", "message"),
    [
        ('"page_retries": BIG', ("page_retries",), "Must be an integer between 0 and 20"),
        ('"page_retry_backoff": BIG', ("page_retry_backoff",), SECONDS),
        ('"throttle_seconds": BIG', ("throttle_seconds",), SECONDS),
        ('"throttle_seconds": -BIG', ("throttle_seconds",), SECONDS),
        ('"throttle_seconds": 1e400', ("throttle_seconds",), SECONDS),
        (
            '"retry_on_status": [503, BIG]',
            ("retry_on_status", 1),
            "Must be an integer between 400 and 599",
        ),
        (
            '"source": {"url": "http://h/", "max_pages": BIG}',
            ("source", "max_pages"),
            "Must be an integer between 1 and 1000000000",
        ),
        (
            '"source": {"url": "http://h/", "pagination": {"type": "offset", "limit": BIG}}',
            ("source", "pagination", "limit"),
            "Must be an integer between 1 and 1000000",
        ),
        (
            '"source": {"url": "http://h/", "pagination": {"type": "page", "start": BIG}}',
            ("source", "pagination", "start"),
            "Must be an integer between 0 and 1000000000",
        ),
        (
            '"source": {"url": "http://h/", "timeout": {"connect": BIG}}',
            ("source", "timeout", "connect"),
            "Must be a number of seconds > 0 and <= 3600",
        ),
        ('"source": {"url": "http://h/", "params": {"n": BIG}}', ("source", "params", "n"), INT64),
        ('"source": {"type": "feed", "n": [-BIG]}', ("source", "n", 0), INT64),
        ('"source": {"type": "feed", "n": 1e400}', ("source", "n"), "Must be a finite number"),
        ('"indexer": {"type": "hold", "n": {"m": BIG}}', ("indexer", "n", "m"), INT64),
    ],
)
async def test_huge_json_numbers_are_field_errors(
    api: Api, fragment: str, loc: tuple[Any, ...], message: str
) -> None:
    """Read as Python ints (or inf), they once crashed range checks (500) or were stored and
    then could not be read back."""
    c = await api.create()
    fields = fragment.replace("BIG", BIG)
    source = "" if '"source"' in fields else '"source": {"type": "feed"}, '
    headers = {"Content-Type": "application/json"}
    created = await api.call(
        "POST", "/connectors", data=f'{{"name": "n", {source}{fields}}}', headers=headers
    )
    assert details(created) == {("body", *loc): message}
    patched = await api.call(
        "PATCH", f"/connectors/{c['id']}", data=f"{{{fields}}}", headers=headers
    )
    assert details(patched) == {("body", *loc): message}
    assert [x["id"] for x in (await api.get("/connectors")).body["data"]] == [c["id"]]


async def test_keys_that_look_numeric_are_named_as_given(api: Api) -> None:
    """Only ASCII digits are an array index in ``loc``; ``"²"`` (a digit to ``isdigit``, not
    to ``int``) and a 5000-digit key once turned the 422 into a 500."""
    c = await api.create()
    long_key = "1" * 5000
    fields = {"²": 1, long_key: 2, "\u0663": 3, "source": {"type": "feed", "\u00b9": "\x00"}}
    expected = {
        ("body", "²"): "Unknown field",
        ("body", long_key): "Unknown field",
        ("body", "\u0663"): "Unknown field",
        ("body", "source", "\u00b9"): NUL,
    }
    assert details(await api.post("/connectors", {"name": "n", **fields})) == expected
    assert details(await api.patch(f"/connectors/{c['id']}", fields)) == expected


# --- values no store can hold: both backends ---------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store of :func:`any_harness`: a SQLite file, or this test's PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/syncd.db"
    # Requested only here, so the SQLite cases never need a server.
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


@pytest.fixture
async def any_harness(store_url: str) -> AsyncIterator[Harness]:
    """A daemon serving its API on each store (in-process queue), with the ``feed`` source
    and the ``hold`` indexer of the SQLite harness."""
    from syncd.daemon import Daemon

    config = Config.from_mapping(
        {
            "store": {"url": store_url},
            "queue": {"url": "memory://"},
            "api": {"listen": "127.0.0.1:0"},
            "scheduler": {"tick_seconds": 3600},
            "daemon": {"grace_seconds": 0.1},
        },
        environ={},
    )
    feed, release = Feed(), asyncio.Event()
    daemon = Daemon(config)

    def feed_factory(cfg: Mapping[str, Any], ctx: SourceContext) -> FeedSource:
        return FeedSource(feed)

    def hold_factory(cfg: Mapping[str, Any], ctx: IndexerContext) -> HoldIndexer:
        return HoldIndexer(release)

    daemon.register_source("feed", feed_factory)
    daemon.register_indexer("hold", hold_factory)
    async with daemon:
        assert daemon.api_address is not None
        async with aiohttp.ClientSession(base_url=daemon.api_address) as session:
            try:
                yield Harness(daemon, Api(session, None), feed, release)
            finally:
                feed.release.set()
                release.set()


UNSTORABLE: list[tuple[dict[str, Any], dict[tuple[Any, ...], str]]] = [
    ({"name": "tick\x00ets"}, {("body", "name"): NUL}),
    ({"sync_schedule": "*/5 * * * *\x00"}, {("body", "sync_schedule"): NUL}),
    ({"sync_timezone": "UTC\x00"}, {("body", "sync_timezone"): NUL}),
    ({"source": {**HTTP, "url": "http://h/\x00"}}, {("body", "source", "url"): NUL}),
    ({"source": {**HTTP, "params": {"q": "a\x00"}}}, {("body", "source", "params", "q"): NUL}),
    (
        {"source": {**HTTP, "params": {"q\x00": "a"}}},
        {("body", "source", "params"): f"Key 'q\\x00': {NUL}"},
    ),
    ({"source": {"type": "feed", "x": [{"y": "\x00"}]}}, {("body", "source", "x", 0, "y"): NUL}),
    ({"indexer": {"type": "hold", "x": "\x00"}}, {("body", "indexer", "x"): NUL}),
    (
        {"indexer": {"type": "webhook", "url": "http://h/", "headers": {"K": "v\x00"}}},
        {("body", "indexer", "headers", "K"): NUL},
    ),
]


@pytest.mark.parametrize(("fields", "expected"), UNSTORABLE)
async def test_text_no_store_can_hold_is_a_field_error(
    any_harness: Harness, fields: dict[str, Any], expected: dict[tuple[Any, ...], str]
) -> None:
    """PostgreSQL refuses NUL in text and JSONB: it was answered 503 Store unavailable."""
    api = any_harness.api
    c = await api.create()
    body = {"name": "n", "source": {"type": "feed"}, **fields}
    assert details(await api.post("/connectors", body)) == expected
    assert details(await api.patch(f"/connectors/{c['id']}", fields)) == expected
    assert (await api.get(f"/connectors/{c['id']}")).body == c
    assert [x["id"] for x in (await api.get("/connectors")).body["data"]] == [c["id"]]


async def test_lone_surrogates_are_refused(any_harness: Harness) -> None:
    api = any_harness.api
    c = await api.create()
    headers = {"Content-Type": "application/json"}
    for method, path, data in (
        ("POST", "/connectors", '{"name": "n", "source": {"type": "feed", "x": "\\udc80"}}'),
        ("PATCH", f"/connectors/{c['id']}", '{"source": {"type": "feed", "\\ud800": 1}}'),
    ):
        [(loc, msg)] = details(await api.call(method, path, data=data, headers=headers)).items()
        assert loc == ("body",) and msg.startswith("Invalid JSON: "), msg
    assert (await api.get(f"/connectors/{c['id']}")).body == c


async def test_ids_no_store_can_hold_are_not_found(any_harness: Harness) -> None:
    api = any_harness.api
    c = await api.create()
    not_found = (404, {"detail": "Connector not found"})
    for method, suffix in (
        ("GET", ""),
        ("PATCH", ""),
        ("DELETE", ""),
        ("POST", "/sync"),
        ("POST", "/sync/abort"),
        ("GET", "/runs"),
        ("GET", "/documents"),
        ("GET", "/documents/x"),
        ("POST", "/retry-failed"),
    ):
        for bad in ("%00", "a%00b"):
            reply = await api.call(method, f"/connectors/{bad}{suffix}", data="{}")
            assert (reply.status, reply.body) == not_found, (method, suffix)
    for bad in ("%00", "x%00y"):
        reply = await api.get(f"/connectors/{c['id']}/documents/{bad}")
        assert (reply.status, reply.body) == (404, {"detail": "Document not found"})
        reply = await api.get(f"/connectors/{MISSING}/documents/{bad}")
        assert (reply.status, reply.body) == not_found


@pytest.mark.parametrize("value", ["\x00", "a\x00", "01a2\x00b"])
async def test_cursors_no_store_can_compare_are_refused(any_harness: Harness, value: str) -> None:
    """A cursor is base64 text, and can be forged to carry a NUL."""
    from syncd.service.cursors import encode_cursor

    api = any_harness.api
    c = await api.create()
    cursor = encode_cursor(value)
    for path in ("/connectors", f"/connectors/{c['id']}/runs", f"/connectors/{c['id']}/documents"):
        reply = await api.get(path, params={"cursor": cursor})
        assert details(reply) == {("query", "cursor"): "Invalid cursor"}, path


async def test_values_at_the_bounds_are_stored_and_read_back_unchanged(
    any_harness: Harness,
) -> None:
    """JSON numbers keep their type and value on both stores (a 10**30 once came back from
    PostgreSQL as a float)."""
    api = any_harness.api
    source = {
        **HTTP,
        "url": "http://127.0.0.1:65535/items",
        "params": {"max": 2**63 - 1, "min": -(2**63), "f": 1e308},
        "pagination": {"type": "offset", "limit": 1_000_000},
        "timeout": {"read": 3600, "connect": 0.001},
        "max_pages": 1_000_000_000,
    }
    fields = {
        "page_retries": 20,
        "page_retry_backoff": 3600,
        "throttle_seconds": 3600,
        "retry_on_status": [400, 599],
    }
    created = await api.post("/connectors", {"name": "edge", "source": source, **fields})
    assert created.status == 201, created.body
    shown = (await api.get(f"/connectors/{created.body['id']}")).text
    for text in (created.text, shown):
        body = json.loads(text)
        assert body["source"] == source
        assert {k: body[k] for k in fields} == fields
        assert isinstance(body["source"]["max_pages"], int)
        assert isinstance(body["source"]["params"]["max"], int)
    paged = {**source, "pagination": {"type": "page", "start": 1_000_000_000}}
    patched = await api.patch(f"/connectors/{created.body['id']}", {"source": paged})
    assert patched.status == 200, patched.body
    assert (await api.get(f"/connectors/{created.body['id']}")).body["source"] == paged


async def test_a_connector_at_the_upper_bounds_syncs(any_harness: Harness) -> None:
    """The largest accepted values do not make a run fail (a throttle of 1e12 s did)."""
    api = any_harness.api
    async with SourceServer(3) as server:
        reply = await api.post(
            "/connectors",
            {
                "name": "edge",
                "source": {
                    "url": f"{server.url}/offset",
                    "records": "items",
                    "id_field": "id",
                    "params": {"big": 2**63 - 1},
                    "pagination": {"type": "offset", "limit": 1_000_000},
                    "timeout": {"read": 3600, "connect": 3600},
                    "max_pages": 1_000_000_000,
                },
                "page_retries": 20,
                "page_retry_backoff": 3600,
                "throttle_seconds": 3600,
            },
        )
        assert reply.status == 201, reply.body
        c = reply.body
        assert (await api.post(f"/connectors/{c['id']}/sync")).status == 202
        await any_harness.daemon.wait_run(c["id"])
        assert [r.query["big"] for r in server.requests] == [str(2**63 - 1)]
    shown = (await api.get(f"/connectors/{c['id']}")).body
    assert (shown["status"], shown["last_error"]) == ("active", None)
    assert shown["progress"] == {"pages": 1, "documents": 3}
