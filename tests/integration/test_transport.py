"""The transport against real local servers: retries, Retry-After, error translation."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from syncd.errors import (
    ClientConnectionError,
    ClientError,
    ClientTimeoutError,
    RateLimitError,
    ServerError,
    SourceError,
)
from syncd.http.guard import BlockedAddressError, GuardedResolver, blocked_address_kind
from syncd.http.paginator import AsyncCursorPaginator
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Transport
from syncd.sources.base import SourceContext
from syncd.sources.http import HttpSource
from tests.integration.sourceserver import SourceServer


class Sleeps:
    """An injected sleep that records durations and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def transport(sleeps: Sleeps) -> AsyncIterator[Transport]:
    async with Transport(sleep=sleeps, timeouts=Timeouts(read=5.0, connect=2.0)) as t:
        yield t


@pytest.fixture
async def server() -> AsyncIterator[SourceServer]:
    async with SourceServer(3) as s:
        yield s


RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: RawHandler) -> AsyncIterator[tuple[str, list[int]]]:
    """A bare TCP server speaking whatever broken HTTP ``handler`` writes. Yields its URL
    and a list that grows by one per connection."""
    connections: list[int] = []
    writers: list[asyncio.StreamWriter] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writers.append(writer)
        try:
            await reader.readuntil(b"\r\n\r\n")
            await handler(reader, writer)
        finally:
            writer.close()

    srv = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/items", connections
    finally:
        for writer in writers:
            writer.close()
        srv.close()
        await srv.wait_closed()


# --- success and status handling ------------------------------------------------------


async def test_get_returns_the_full_response(transport: Transport, server: SourceServer) -> None:
    response = await transport.request(
        "GET", server.items_url, params={"limit": 2}, headers={"X-Test": "yes"}
    )
    assert response.status == 200
    assert response.ok
    assert response.headers["content-type"].startswith("application/json")
    assert response.url == f"{server.items_url}?limit=2"
    body = response.json()
    assert [r["id"] for r in body["data"]] == ["item-00000", "item-00001"]
    assert server.requests[0].headers["X-Test"] == "yes"


async def test_503_with_retry_after_120_waits_60(
    transport: Transport, server: SourceServer, sleeps: Sleeps
) -> None:
    server.fail_next(503, retry_after=120)
    response = await transport.request("GET", server.items_url)
    assert response.status == 200
    assert sleeps.calls == [60.0]
    assert len(server.requests) == 2


async def test_retry_after_http_date_is_honoured(
    transport: Transport, server: SourceServer, sleeps: Sleeps
) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    server.fail_next(503, retry_after=format_datetime(when, usegmt=True))
    await transport.request("GET", server.items_url)
    assert len(sleeps.calls) == 1
    # One-second resolution of HTTP-dates, plus the time the request took.
    assert 27.0 < sleeps.calls[0] <= 30.0


async def test_always_503_exhausts_with_urllib3_backoff(
    server: SourceServer, sleeps: Sleeps
) -> None:
    retries: list[tuple[BaseException, int]] = []
    server.fail_next(503, times=10)
    async with Transport(sleep=sleeps, on_retry=lambda e, n: retries.append((e, n))) as t:
        with pytest.raises(ServerError) as info:
            await t.request("GET", server.items_url + "?token=secret")
    assert info.value.status == 503
    assert isinstance(info.value.__cause__, aiohttp.ClientResponseError)
    assert info.value.__cause__.status == 503
    assert "secret" not in str(info.value)
    assert str(info.value) == f"HTTP 503 Service Unavailable from GET {server.items_url}"
    assert sleeps.calls == [0.0, 4.0, 8.0]
    assert [n for _, n in retries] == [1, 2, 3]
    assert all(isinstance(e, ServerError) and e.status == 503 for e, _ in retries)
    assert len(server.requests) == 4


async def test_retry_after_never_shortens_the_backoff(server: SourceServer, sleeps: Sleeps) -> None:
    server.fail_next(502, times=3, retry_after=1)
    async with Transport(sleep=sleeps) as t:
        response = await t.request("GET", server.items_url)
    assert response.status == 200
    assert sleeps.calls == [1.0, 4.0, 8.0]


async def test_exhausted_error_carries_the_last_status(
    transport: Transport, server: SourceServer, sleeps: Sleeps
) -> None:
    server.fail_next(503, times=2)
    server.fail_next(502, times=1)
    server.fail_next(504, times=1)
    with pytest.raises(ServerError) as info:
        await transport.request("GET", server.items_url)
    assert info.value.status == 504


async def test_500_is_not_retried(
    transport: Transport, server: SourceServer, sleeps: Sleeps
) -> None:
    server.fail_next(500)
    with pytest.raises(ServerError) as info:
        await transport.request("GET", server.items_url)
    assert info.value.status == 500
    assert sleeps.calls == []
    assert len(server.requests) == 1


async def test_4xx_is_a_client_error_and_429_carries_retry_after(
    transport: Transport, server: SourceServer, sleeps: Sleeps
) -> None:
    server.fail_next(404)
    with pytest.raises(ClientError) as not_found:
        await transport.request("GET", server.items_url)
    assert not_found.value.status == 404
    assert not_found.value.retry_after is None
    assert sleeps.calls == []
    # A 429 with Retry-After is waited out (5 times at most), not taken from the retries.
    server.fail_next(429, retry_after=7, times=6)
    with pytest.raises(RateLimitError) as limited:
        await transport.request("GET", server.items_url)
    assert limited.value.status == 429
    assert limited.value.retry_after == 7.0
    assert "still refused after 5 rate-limit waits" in str(limited.value)
    assert isinstance(limited.value.__cause__, aiohttp.ClientResponseError)
    assert sleeps.calls == [7.0] * 5
    assert len(server.requests) == 1 + 6


async def test_post_is_never_retried(transport: Transport, sleeps: Sleeps) -> None:
    seen: list[Any] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response({"detail": "busy"}, status=503)

    app = web.Application()
    app.router.add_post("/hook", handler)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        with pytest.raises(ServerError) as info:
            await transport.request("POST", url, json={"a": 1})
        assert info.value.status == 503
        response = await transport.request("POST", url, json={"b": 2}, raise_for_status=False)
        assert response.status == 503
        assert response.json() == {"detail": "busy"}
    finally:
        await runner.cleanup()
    assert seen == [{"a": 1}, {"b": 2}]
    assert sleeps.calls == []


async def test_raise_for_status_false_returns_errors_after_retrying_5xx(
    transport: Transport, server: SourceServer, sleeps: Sleeps
) -> None:
    server.fail_next(404)
    response = await transport.request("GET", server.items_url, raise_for_status=False)
    assert response.status == 404
    assert not response.ok
    assert sleeps.calls == []
    server.fail_next(503, times=10)
    response = await transport.request("GET", server.items_url, raise_for_status=False)
    assert response.status == 503
    assert sleeps.calls == [0.0, 4.0, 8.0]
    assert len(server.requests) == 5


# --- broken connections ---------------------------------------------------------------


async def test_connection_closed_mid_body_is_503_and_retried(
    transport: Transport, sleeps: Sleeps
) -> None:
    async def truncated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"data": ['
        )
        await writer.drain()

    async with raw_server(truncated) as (url, connections):
        with pytest.raises(ServerError) as info:
            await transport.request("GET", url)
    assert info.value.status == 503
    assert isinstance(info.value.__cause__, aiohttp.ClientPayloadError)
    assert len(connections) == 4
    assert sleeps.calls == [0.0, 4.0, 8.0]


async def test_server_disconnect_without_answer_is_503(
    transport: Transport, sleeps: Sleeps
) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return None

    async with raw_server(hang_up) as (url, connections):
        with pytest.raises(ServerError) as info:
            await transport.request("GET", url)
    assert info.value.status == 503
    assert isinstance(info.value.__cause__, aiohttp.ServerDisconnectedError)
    assert sleeps.calls == [0.0, 4.0, 8.0]
    # aiohttp itself reconnects once when an idempotent request meets a closed connection
    # (RFC 9112 §9.3.1, meant for stale keep-alive connections): 1 or 2 per attempt.
    assert len(connections) in (4, 8)


async def test_server_that_never_answers_is_a_read_timeout(sleeps: Sleeps) -> None:
    release = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()

    async with raw_server(silent) as (url, connections):
        async with Transport(sleep=sleeps, timeouts=Timeouts(read=0.2, connect=2.0)) as t:
            started = time.monotonic()
            with pytest.raises(ClientTimeoutError, match="read timeout") as info:
                await t.request("GET", url)
            elapsed = time.monotonic() - started
        release.set()
    assert 0.15 < elapsed < 2.0
    assert isinstance(info.value.__cause__, TimeoutError)
    # Read timeouts are left to the paginator's budget: no transport retry.
    assert len(connections) == 1
    assert sleeps.calls == []


async def test_per_request_timeout_overrides_the_default(
    transport: Transport, server: SourceServer
) -> None:
    server.hang_on(None)
    started = time.monotonic()
    with pytest.raises(ClientTimeoutError):
        await transport.request("GET", server.items_url, timeout=Timeouts(read=0.2, connect=1.0))
    assert time.monotonic() - started < 2.0
    server.release()


async def test_closed_port_is_a_connection_error_after_retries(
    transport: Transport, sleeps: Sleeps
) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    with pytest.raises(ClientConnectionError, match="cannot connect") as info:
        await transport.request("GET", f"http://127.0.0.1:{port}/items")
    assert isinstance(info.value.__cause__, aiohttp.ClientConnectorError)
    assert sleeps.calls == [0.0, 4.0, 8.0]


async def test_unresolvable_host_is_a_connection_error(sleeps: Sleeps) -> None:
    async with Transport(sleep=sleeps, retries=0) as t:
        with pytest.raises(ClientConnectionError):
            await t.request("GET", "http://syncd-test.invalid/items")


async def test_connect_timeout(sleeps: Sleeps) -> None:
    # A listening socket whose accept queue is full drops new SYNs: connect() hangs.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        async with Transport(sleep=sleeps, timeouts=Timeouts(read=5.0, connect=0.2)) as t:
            started = time.monotonic()
            with pytest.raises(ClientTimeoutError, match="connect timeout"):
                await t.request("GET", f"http://127.0.0.1:{port}/items")
            elapsed = time.monotonic() - started
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
    # Four attempts of 0.2 s each (connect timeouts are connection errors: retried).
    assert 0.7 < elapsed < 3.0
    assert sleeps.calls == [0.0, 4.0, 8.0]


async def test_invalid_url_is_a_source_error(transport: Transport) -> None:
    with pytest.raises(SourceError, match="invalid URL"):
        await transport.request("GET", "http://")


async def test_request_before_open_is_refused() -> None:
    transport = Transport()
    assert not transport.is_open
    with pytest.raises(RuntimeError, match="not open"):
        await transport.request("GET", "http://127.0.0.1:1/")
    await transport.open()
    assert transport.is_open
    await transport.close()
    await transport.close()
    assert not transport.is_open


async def test_unbuildable_request_is_a_source_error_without_the_value(
    transport: Transport, server: SourceServer
) -> None:
    with pytest.raises(SourceError, match="invalid request") as info:
        await transport.request("GET", server.items_url, headers={"X-Key": "s3cret\r\nX: y"})
    assert "s3cret" not in str(info.value)
    assert server.requests == []


# --- the SSRF guard (http.block_private_addresses) ------------------------------------


@pytest.mark.parametrize(
    ("host", "shown"),
    [
        ("127.0.0.1", r"refused: 127\.0\.0\.1 is a loopback address;"),
        ("localhost", r"refused: localhost resolves to a loopback address \((127\.0\.0\.1|::1)\);"),
        ("[::1]", r"refused: ::1 is a loopback address;"),
    ],
)
async def test_guard_refuses_loopback_before_any_request(
    server: SourceServer, sleeps: Sleeps, host: str, shown: str
) -> None:
    port = server.url.rsplit(":", 1)[1]
    retries: list[int] = []
    async with Transport(
        sleep=sleeps, block_private_addresses=True, on_retry=lambda e, n: retries.append(n)
    ) as t:
        with pytest.raises(BlockedAddressError, match=shown) as info:
            await t.request("GET", f"http://{host}:{port}/items?token=abc")
    assert str(info.value).endswith("; http.block_private_addresses is set")
    assert isinstance(info.value, ClientConnectionError)
    assert "abc" not in str(info.value)
    assert server.requests == []  # nothing reached the server
    assert retries == [] and sleeps.calls == []  # a refusal is not retried


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_without_the_guard_loopback_works(server: SourceServer, host: str) -> None:
    port = server.url.rsplit(":", 1)[1]
    async with Transport() as t:
        response = await t.request("GET", f"http://{host}:{port}/items")
    assert response.status == 200
    assert len(server.requests) == 1


async def test_paginator_does_not_retry_a_refusal(server: SourceServer, sleeps: Sleeps) -> None:
    async with Transport(sleep=sleeps, block_private_addresses=True) as t:
        source = HttpSource({"url": server.items_url, "records": "data"}, SourceContext("c", t))
        pages = AsyncCursorPaginator(source.fetch_page, max_retries=3, sleep=sleeps)
        with pytest.raises(BlockedAddressError):
            await anext(pages)
    assert sleeps.calls == []
    assert server.requests == []


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("10.0.0.5", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fc00::1", "unique-local"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "non-public"),
        ("not-an-address", "unrecognised"),
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_blocked_address_kinds(address: str, kind: str | None) -> None:
    assert blocked_address_kind(address) == kind


class FixedResolver(AbstractResolver):
    """Answers every name with fixed addresses (the guard's input, no DNS needed)."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(hostname=host, host=a, port=port, family=family, proto=0, flags=0)
            for a in self.addresses
        ]

    async def close(self) -> None:
        return None


async def test_guarded_resolver_refuses_a_name_with_any_private_address() -> None:
    public = GuardedResolver(FixedResolver("93.184.216.34"))
    assert [r["host"] for r in await public.resolve("api.example.com", 443)] == ["93.184.216.34"]
    mixed = GuardedResolver(FixedResolver("93.184.216.34", "10.0.0.5"))
    with pytest.raises(BlockedAddressError) as info:
        await mixed.resolve("api.example.com", 443)
    assert str(info.value) == (
        "refused: api.example.com resolves to a private address (10.0.0.5); "
        "http.block_private_addresses is set"
    )
