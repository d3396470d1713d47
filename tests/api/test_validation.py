"""Input validation (422), body limit (413), authentication (401), unexpected errors (500)
and secret masking of the control API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from syncd.api import build_app, views
from syncd.models import (
    Connector,
    DocStatus,
    Progress,
    SyncStatus,
    Waiting,
    WaitReason,
)
from tests.integration.sourceserver import SourceServer

from .conftest import CONNECTOR_KEYS, TOKEN, ZERO_DOCS, Api, Harness, StartDaemon

MISSING = "0000000000000000000000000"


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
        ("body", "throttle_seconds"): "Must be a finite number >= 0",
        ("body", "id"): "Unknown field",
    }
    # Nothing was applied.
    assert (await api.get(f"/connectors/{c['id']}")).body == c


async def test_patch_of_an_unknown_connector_is_404_before_422(api: Api) -> None:
    reply = await api.patch(f"/connectors/{MISSING}", {"status": "nope"})
    assert (reply.status, reply.body) == (404, {"detail": "Connector not found"})


# --- query strings ------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "ten", "", "1.5", " 5", "+5"])
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
        ("query", "status"): "Must be one of: pending, running, indexed, failed"
    }


@pytest.mark.parametrize("cursor", ["", "\x01", "x" * 2000, "_w"])
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
    app = build_app(harness.daemon)

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
