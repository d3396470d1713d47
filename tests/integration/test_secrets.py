"""Canary secrets against the leaks that bypass the log processor: error texts the API
returns, driver debug logging, redirects to another origin, and secrets known only once
fetched."""

from __future__ import annotations

import base64
import io
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web

from syncd.config.secrets import connector_secrets, register_connector_secrets
from syncd.daemon import Daemon
from syncd.errors import SourceError
from syncd.http.paginator import AsyncCursorPaginator
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Transport
from syncd.models import ConnectorStatus
from syncd.observability import logs
from syncd.observability.logs import MASK, configure_logging, redact
from syncd.sources.base import SourceContext
from syncd.sources.http import HttpSource
from tests.integration.conftest import DaemonFactory

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


pytestmark = pytest.mark.usefixtures("logging_state")


def canary(kind: str) -> str:
    return f"canary-{kind}-{uuid.uuid4().hex}"


class Origin:
    """A real local server on a port of its own (so an origin of its own) that records the
    headers of every request and answers through the handlers set in ``routes``."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path, dict(request.headers)))
        handler = self.routes.get(request.path)
        if handler is None:
            return web.json_response({"detail": "not found"}, status=404)
        return await handler(request)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def headers_at(self, path: str) -> list[dict[str, str]]:
        return [headers for p, headers in self.seen if p == path]


@pytest.fixture
async def origin_a() -> AsyncIterator[Origin]:
    origin = Origin()
    await origin.start()
    yield origin
    await origin.stop()


@pytest.fixture
async def origin_b() -> AsyncIterator[Origin]:
    origin = Origin()
    await origin.start()
    yield origin
    await origin.stop()


@pytest.fixture
async def transport() -> AsyncIterator[Transport]:
    async with Transport(timeouts=Timeouts(read=5.0, connect=2.0), retries=0) as t:
        yield t


def redirect_to(location: str, status: int = 302) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, headers={"Location": location})

    return handler


def records(data: list[dict[str, Any]], **extra: Any) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"data": data, **extra})

    return handler


# --- 1. error texts -----------------------------------------------------------------


def echo_loop(style: str) -> Handler:
    """Pages that loop (1 → 2 → 1 …) and echo the ``api_key`` parameter, as APIs that put
    every parameter into their next links do: in the next URL, or inside an opaque cursor."""

    async def handler(request: web.Request) -> web.StreamResponse:
        key = request.query["api_key"]
        if style == "next_url":
            page = int(request.query.get("page", "0"))
            return web.json_response(
                {"data": [], "next": f"/loop?api_key={key}&page={page % 2 + 1}"}
            )
        cursor = request.query.get("cursor")
        following = {None: "a", "a": "b", "b": "a"}[cursor.rsplit(".", 1)[1] if cursor else None]
        return web.json_response({"data": [], "next_cursor": f"{key}.{following}"})

    return handler


@pytest.mark.parametrize(
    "pagination",
    [{"type": "next_url", "next_url": "next"}, {"type": "cursor"}],
    ids=["next_url", "cursor"],
)
async def test_pagination_loop_error_carries_no_secret(
    daemon: Daemon, origin_a: Origin, monkeypatch: pytest.MonkeyPatch, pagination: dict[str, Any]
) -> None:
    secret = canary("loop")
    monkeypatch.setenv("SYNCD_TEST_LOOP_KEY", secret)
    origin_a.routes["/loop"] = echo_loop(pagination["type"])
    c = await daemon.create_connector(
        {
            "name": "looping",
            "source": {
                "type": "http",
                "url": f"{origin_a.url}/loop",
                "params": {"api_key": "${env:SYNCD_TEST_LOOP_KEY}"},
                "records": "data",
                "pagination": pagination,
            },
            "page_retries": 0,
        }
    )
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    connector = await daemon.wait_connector(c.id, lambda x: x.status is ConnectorStatus.ERROR)
    runs, _ = await daemon.list_runs(c.id)
    # The source did receive the secret, and the loop was detected.
    assert len(origin_a.seen) == 3
    assert connector.last_error is not None and "again after" in connector.last_error
    for text in (connector.last_error, runs[0].error or ""):
        assert secret not in text
    if pagination["type"] == "next_url":
        assert f"{origin_a.url}/loop?api_key=***&page=***" in connector.last_error
    else:
        assert f"'{MASK}.a'" in connector.last_error


# --- 2. driver debug logging --------------------------------------------------------


async def test_debug_logging_with_sqlite_prints_no_header_value(
    make_daemon: DaemonFactory, origin_a: Origin
) -> None:
    header = canary("header")
    origin_a.routes["/items"] = records([{"id": "1"}, {"id": "2"}])
    out = io.StringIO()
    configure_logging("debug", "json", stream=out)
    daemon = make_daemon()
    await daemon.start()
    c = await daemon.create_connector(
        {
            "name": "debugged",
            "source": {
                "type": "http",
                "url": f"{origin_a.url}/items",
                "records": "data",
                "headers": {"X-Api-Key": header},
            },
        }
    )
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    await daemon.stop()
    structlog.get_logger("syncd.test").debug("probe")  # debug is on for everything else
    assert origin_a.headers_at("/items")[0]["X-Api-Key"] == header  # it was used
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[-1]["event"] == "probe"
    assert not [line for line in lines if line.get("logger") == "aiosqlite"]
    assert header not in out.getvalue()
    # The driver loggers stay capped after a reload to debug.
    logs.set_level("debug")
    assert not logging.getLogger("aiosqlite").isEnabledFor(logging.DEBUG)
    assert logging.getLogger("asyncpg").isEnabledFor(logging.INFO)


# --- 3. redirects -------------------------------------------------------------------

CREDENTIALS = {"X-Api-Key": "redirect-key-1234", "Authorization": "Bearer redirect-token-1234"}


async def test_same_origin_redirect_keeps_the_headers(
    transport: Transport, origin_a: Origin
) -> None:
    origin_a.routes["/start"] = redirect_to("/items")
    origin_a.routes["/items"] = records([])
    response = await transport.request("GET", f"{origin_a.url}/start", headers=CREDENTIALS)
    assert response.status == 200
    assert response.url == f"{origin_a.url}/items"
    for path in ("/start", "/items"):
        [headers] = origin_a.headers_at(path)
        assert headers["X-Api-Key"] == CREDENTIALS["X-Api-Key"]
        assert headers["Authorization"] == CREDENTIALS["Authorization"]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_cross_origin_redirect_drops_every_source_header(
    transport: Transport, origin_a: Origin, origin_b: Origin, status: int
) -> None:
    origin_a.routes["/start"] = redirect_to(f"{origin_b.url}/items", status)
    origin_b.routes["/items"] = records([{"id": "1"}])
    headers = {**CREDENTIALS, "X-Custom": "custom-value"}
    response = await transport.request("GET", f"{origin_a.url}/start", headers=headers)
    assert response.json() == {"data": [{"id": "1"}]}
    assert response.url == f"{origin_b.url}/items"
    [sent] = origin_a.headers_at("/start")
    assert sent["X-Api-Key"] == CREDENTIALS["X-Api-Key"]
    [received] = origin_b.headers_at("/items")
    assert not {"X-Api-Key", "Authorization", "X-Custom"} & set(received)


async def test_credentials_stay_dropped_when_a_redirect_comes_back(
    transport: Transport, origin_a: Origin, origin_b: Origin
) -> None:
    origin_a.routes["/start"] = redirect_to(f"{origin_b.url}/bounce")
    origin_b.routes["/bounce"] = redirect_to(f"{origin_a.url}/items")
    origin_a.routes["/items"] = records([])
    await transport.request("GET", f"{origin_a.url}/start", headers=CREDENTIALS)
    [back] = origin_a.headers_at("/items")
    assert "X-Api-Key" not in back and "Authorization" not in back


async def test_url_credentials_follow_same_origin_redirects_only(
    transport: Transport, origin_a: Origin, origin_b: Origin
) -> None:
    password = canary("url")
    basic = "Basic " + base64.b64encode(f"reader:{password}".encode()).decode()
    authority = origin_a.url.removeprefix("http://")
    origin_a.routes["/start"] = redirect_to("/moved")
    origin_a.routes["/moved"] = redirect_to(f"{origin_b.url}/items")
    origin_b.routes["/items"] = records([])
    await transport.request("GET", f"http://reader:{password}@{authority}/start")
    assert [h.get("Authorization") for h in origin_a.headers_at("/start")] == [basic]
    assert [h.get("Authorization") for h in origin_a.headers_at("/moved")] == [basic]
    assert [h.get("Authorization") for h in origin_b.headers_at("/items")] == [None]


async def test_post_redirected_by_303_becomes_a_get(transport: Transport, origin_a: Origin) -> None:
    origin_a.routes["/hook"] = redirect_to("/done", 303)

    async def done(request: web.Request) -> web.StreamResponse:
        return web.json_response({"method": request.method, "body": await request.text()})

    origin_a.routes["/done"] = done
    response = await transport.request("POST", f"{origin_a.url}/hook", json={"a": 1})
    assert response.json() == {"method": "GET", "body": ""}


async def test_redirect_loop_is_a_bounded_source_error(origin_a: Origin) -> None:
    origin_a.routes["/spin"] = redirect_to("/spin?again=1")
    async with Transport(retries=0, max_redirects=3) as t:
        with pytest.raises(SourceError, match=r"too many redirects \(over 3\)") as info:
            await t.request("GET", f"{origin_a.url}/spin?token=abc")
    assert "abc" not in str(info.value)
    assert len(origin_a.seen) == 4


async def test_next_page_after_a_cross_origin_redirect_is_refused(
    transport: Transport, origin_a: Origin, origin_b: Origin
) -> None:
    # The redirect moved the response elsewhere, not the origin the source's headers
    # belong to: the next link (on the new origin) must not receive them.
    origin_a.routes["/items"] = redirect_to(f"{origin_b.url}/items")
    origin_b.routes["/items"] = records([{"id": "1"}], links={"next": "/items?page=2"})
    source = HttpSource(
        {
            "url": f"{origin_a.url}/items",
            "records": "data",
            "headers": CREDENTIALS,
            "pagination": {"type": "next_url", "next_url": "links.next"},
        },
        SourceContext("c1", transport),
    )
    with pytest.raises(SourceError, match="another origin"):
        [page async for page in AsyncCursorPaginator(source.fetch_page)]
    assert len(origin_b.seen) == 1
    assert "X-Api-Key" not in origin_b.seen[0][1]


# --- 4. secrets registered before any request ---------------------------------------


def test_register_connector_secrets_before_any_fetch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    literal, from_env, from_file, url_password = (
        canary(k) for k in ("literal", "env", "file", "urlpw")
    )
    hook_header, hook_password, named = canary("hook"), canary("hookpw"), canary("named")
    monkeypatch.setenv("SYNCD_TEST_PARAM", from_env)
    monkeypatch.delenv("SYNCD_TEST_UNSET", raising=False)
    key_file = tmp_path / "key"
    key_file.write_text(f"{from_file}\n")
    source = {
        "type": "http",
        "url": f"https://reader:{url_password}@api.example.com/items",
        "params": {"api_key": "${env:SYNCD_TEST_PARAM}", "limit": "100", "q": "plain text"},
        "headers": {
            "X-Api-Key": literal,
            "Authorization": f"Bearer ${{file:{key_file}}}",
            "X-Later": "${env:SYNCD_TEST_UNSET}",  # not resolvable yet: skipped
        },
        "records": "data",
        "pagination": {"type": "cursor", "cursor_param": "token_cursor"},
    }
    indexer = {
        "type": "webhook",
        "url": f"https://hook:{hook_password}@hooks.example.com/index",
        "headers": {"X-Hook": hook_header},
        "plugin_token": named,
    }
    before = [redact(v) for v in (literal, from_env, from_file)]
    assert before == [literal, from_env, from_file]  # nothing registered yet

    register_connector_secrets(source, indexer)

    for value in (literal, from_env, from_file, url_password, hook_header, hook_password, named):
        assert redact(f"x {value} y") == f"x {MASK} y", value
    assert from_file not in redact(f"Authorization: Bearer {from_file}")
    # Names, paths and plain parameters are not secrets.
    found = connector_secrets(source, indexer)
    assert not {"100", "plain text", "token_cursor", "data", "webhook"} & found
    assert f"Bearer {from_file}" in found
    assert not any("SYNCD_TEST_UNSET" in value for value in found)


async def test_http_source_registers_its_secrets_when_built(
    transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    literal, from_env = canary("built-literal"), canary("built-env")
    monkeypatch.setenv("SYNCD_TEST_BUILT", from_env)
    HttpSource(
        {
            "url": "http://127.0.0.1:9/items",
            "headers": {"X-Api-Key": literal},
            "params": {"key": "${env:SYNCD_TEST_BUILT}"},
        },
        SourceContext("c1", transport),
    )
    assert redact(f"{literal} {from_env}") == f"{MASK} {MASK}"
