"""Per-host budgets end to end: several connectors (and several daemons on one Redis) share
one host's rate, a host's Retry-After holds every connector, and an abort ends a host wait
at once. Requests are counted where they arrive: at the source server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.http.budget import Lease, LocalHostBudgets, OnWait
from syncd.http.transport import Transport
from syncd.models import RunOutcome
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.sourceserver import RecordedRequest, SourceServer


class TimedServer(SourceServer):
    """The source server, also noting when each request arrived and which connector sent
    it (the ``who`` query parameter)."""

    def __init__(self, records: int, *, page_size: int) -> None:
        super().__init__(records, page_size=page_size)
        self.arrivals: list[tuple[float, str | None]] = []

    def _record(self, request: web.Request) -> RecordedRequest:
        self.arrivals.append((time.monotonic(), request.query.get("who")))
        return super()._record(request)

    def times(self, who: str | None = None) -> list[float]:
        """Arrival times, of one connector's requests or of all."""
        return [t for t, w in self.arrivals if who is None or w == who]


def assert_within_budget(times: list[float], *, rate: float, burst: int) -> None:
    """By the time of each request, at most ``burst + rate·t`` requests had arrived (t from
    the first request; 50 ms of tolerance for scheduling jitter)."""
    times = sorted(times)
    for count, at in enumerate(times, start=1):
        elapsed = at - times[0]
        assert count <= burst + rate * (elapsed + 0.05), (
            f"{count} requests within {elapsed:.3f}s: over {rate}/s with burst {burst}"
        )


@pytest.fixture
async def server() -> AsyncIterator[TimedServer]:
    """8 records in pages of 2: four requests per crawl."""
    s = TimedServer(8, page_size=2)
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


def source_of(server: TimedServer, who: str, **extra: Any) -> dict[str, Any]:
    return http_source(server, params={"who": who}, **extra)


async def sync_both(first: Daemon, second: Daemon, server: TimedServer) -> None:
    a = await first.create_connector({"name": "a", "source": source_of(server, "a")})
    b = await first.create_connector({"name": "b", "source": source_of(server, "b")})
    await first.trigger_sync(a.id)
    await second.trigger_sync(b.id)
    await first.wait_run(a.id)
    await second.wait_run(b.id)
    for daemon, c in ((first, a), (second, b)):
        runs, _ = await daemon.list_runs(c.id)
        assert runs[0].outcome is RunOutcome.SUCCEEDED, runs[0]


async def test_connectors_share_one_host_rate(
    make_daemon: DaemonFactory, server: TimedServer
) -> None:
    daemon = make_daemon(http={"hosts": {"127.0.0.1": {"rate": 5, "burst": 1}}})
    await daemon.start()
    await sync_both(daemon, daemon, server)
    assert len(server.times("a")) == len(server.times("b")) == 4
    assert_within_budget(server.times(), rate=5, burst=1)


async def test_a_host_port_budget_leaves_other_ports_alone(
    make_daemon: DaemonFactory, server: TimedServer
) -> None:
    other = TimedServer(8, page_size=2)
    await other.start()
    try:
        port = server.url.rsplit(":", 1)[1]
        daemon = make_daemon(http={"hosts": {f"127.0.0.1:{port}": {"rate": 5, "burst": 1}}})
        await daemon.start()
        a = await daemon.create_connector({"name": "a", "source": source_of(other, "a")})
        await daemon.trigger_sync(a.id)
        await daemon.wait_run(a.id)
    finally:
        await other.stop()
    # Four requests to another port, unthrottled: well under the 0.6 s the budget needs.
    times = other.times()
    assert len(times) == 4 and times[-1] - times[0] < 0.4


@pytest.mark.parametrize("backend_sections", ["postgres+redis"], indirect=True)
async def test_daemons_on_one_redis_share_one_host_rate(
    make_any_daemon: DaemonFactory, server: TimedServer
) -> None:
    hosts = {"hosts": {"127.0.0.1": {"rate": 5, "burst": 1}}}
    first, second = make_any_daemon(http=hosts), make_any_daemon(http=hosts)
    await first.start()
    await second.start()
    await sync_both(first, second, server)
    assert len(server.times("a")) == len(server.times("b")) == 4
    assert_within_budget(server.times(), rate=5, burst=1)


async def test_retry_after_from_a_host_holds_every_connector(
    make_daemon: DaemonFactory, server: TimedServer
) -> None:
    daemon = make_daemon()  # no budget configured: cooldowns hold every host
    await daemon.start()
    a = await daemon.create_connector(
        {
            "name": "a",
            "source": source_of(server, "a"),
            "retry_on_status": [429],
            "page_retry_backoff": 0,
        }
    )
    b = await daemon.create_connector({"name": "b", "source": source_of(server, "b")})
    server.fail_next(429, retry_after=1)
    await daemon.trigger_sync(a.id)
    # A has its 429 (the cooldown is recorded before its paginator starts waiting).
    await daemon.wait_connector(a.id, lambda c: c.waiting is not None)
    await daemon.trigger_sync(b.id)
    shown = await daemon.wait_connector(b.id, lambda c: c.waiting is not None)
    assert shown.waiting is not None and shown.waiting.reason == "host_cooldown"
    assert server.times("b") == []
    await daemon.wait_run(a.id)
    await daemon.wait_run(b.id)
    refused_at = server.times("a")[0]
    assert min(server.times("b")) - refused_at >= 0.95
    assert server.times("a")[1] - refused_at >= 0.95
    for c in (a, b):
        runs, _ = await daemon.list_runs(c.id)
        assert runs[0].outcome is RunOutcome.SUCCEEDED


@pytest.mark.parametrize("reason", ["host_cooldown", "throttle"])
async def test_abort_during_a_host_wait_returns_at_once(
    make_daemon: DaemonFactory, server: TimedServer, reason: str
) -> None:
    daemon = make_daemon(http={"hosts": {"127.0.0.1": {"rate": 0.2, "burst": 1}}})
    await daemon.start()
    b = await daemon.create_connector({"name": "b", "source": source_of(server, "b")})
    if reason == "host_cooldown":
        a = await daemon.create_connector({"name": "a", "source": source_of(server, "a")})
        server.fail_next(429, retry_after=30)
        await daemon.trigger_sync(a.id)
        # A waits out its 429 in the transport; the host cools down for 30 s for everyone.
        refused = await daemon.wait_connector(a.id, lambda c: c.waiting is not None)
        assert refused.waiting is not None and refused.waiting.reason == "host_cooldown"
    await daemon.trigger_sync(b.id)
    # With a cooldown, B waits before its first request; else before its second (5 s).
    shown = await daemon.wait_connector(b.id, lambda c: c.waiting is not None)
    assert shown.waiting is not None and shown.waiting.reason == reason
    requests_before = len(server.times("b"))
    started = time.perf_counter()
    await daemon.abort_sync(b.id)
    await daemon.wait_run(b.id)
    assert time.perf_counter() - started < 0.2
    assert len(server.times("b")) == requests_before
    runs, _ = await daemon.list_runs(b.id)
    assert runs[0].outcome is RunOutcome.ABORTED
    if reason == "host_cooldown":
        # The connector whose request was refused is interrupted at once too.
        started = time.perf_counter()
        await daemon.abort_sync(a.id)
        await daemon.wait_run(a.id)
        assert time.perf_counter() - started < 0.2
        assert len(server.times("a")) == 1
        runs, _ = await daemon.list_runs(a.id)
        assert runs[0].outcome is RunOutcome.ABORTED


# --- the transport: every attempt draws from its host's budget ---------------------------


class RecordingBudgets(LocalHostBudgets):
    """In-process budgets that also note which budget each attempt drew from."""

    def __init__(self) -> None:
        super().__init__({})
        self.acquired: list[str] = []

    async def acquire(self, key: str, *, on_wait: OnWait | None = None) -> Lease:
        self.acquired.append(key)
        return await super().acquire(key, on_wait=on_wait)


async def no_sleep(seconds: float) -> None:
    pass


async def test_each_retry_and_each_redirect_hop_draws_from_its_host(server: TimedServer) -> None:
    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound(server.items_url.replace("127.0.0.1", "localhost"))

    app = web.Application()
    app.router.add_get("/hop", hop)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    budgets = RecordingBudgets()
    try:
        async with Transport(budgets=budgets, sleep=no_sleep) as transport:
            server.fail_next(503, times=2)
            await transport.request("GET", server.items_url)
            assert budgets.acquired == ["127.0.0.1"] * 3
            budgets.acquired.clear()
            await transport.request("GET", f"http://127.0.0.1:{port}/hop")
            assert budgets.acquired == ["127.0.0.1", "localhost"]
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_puts_the_host_in_cooldown(server: TimedServer, status: int) -> None:
    budgets = LocalHostBudgets({})
    # No retries and no rate-limit waits: the refusal comes back as it was answered.
    async with Transport(budgets=budgets, retries=0, rate_limit_waits=0) as transport:
        server.fail_next(status, retry_after=2)
        response = await transport.request("GET", server.items_url, raise_for_status=False)
        assert response.status == status
        assert 1.5 < await budgets.cooldown_left("127.0.0.1") <= 2
        # Another status, or no Retry-After: no cooldown.
        server.fail_next(500, retry_after=5)
        other = LocalHostBudgets({})
        transport.budgets = other
        await transport.request("GET", server.items_url, raise_for_status=False)
        server.fail_next(429)
        await transport.request("GET", server.items_url, raise_for_status=False)
        assert await other.cooldown_left("127.0.0.1") == 0
