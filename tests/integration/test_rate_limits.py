"""Rate limits announced in headers, against real local servers: the transport waits until
the announced reset (on fake clocks), bounds the wait and the number of waits, and end to end
a GitHub-style 403 holds every connector of the host (in one daemon and across daemons on one
Redis) until the reset, after which the crawl succeeds; an abort ends the wait at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.errors import ClientError, RateLimitError
from syncd.http.budget import LocalHostBudgets
from syncd.http.budget_redis import RedisHostBudgets
from syncd.http.transport import Transport
from syncd.models import RunOutcome, WaitReason
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.sourceserver import SourceServer

BASE = 1_700_000_000.0  # the fake wall clock's start (Tue, 14 Nov 2023 22:13:20 GMT)

Answer = tuple[int, Mapping[str, str]]


def http_date(epoch: float) -> str:
    return format_datetime(datetime.fromtimestamp(epoch, UTC), usegmt=True)


def github_limited(reset: float, *, date: float | None = None) -> dict[str, str]:
    """The headers of GitHub's documented answer once the primary rate limit is used up
    (REST API, "Exceeding the rate limit"): 403, remaining 0, reset in Unix seconds."""
    headers = {
        "x-ratelimit-limit": "60",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-used": "60",
        "x-ratelimit-reset": str(int(reset)),
        "x-ratelimit-resource": "core",
    }
    if date is not None:
        headers["Date"] = http_date(date)
    return headers


GITHUB_BODY = {
    "message": "API rate limit exceeded for 127.0.0.1.",
    "documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting",
}


class FakeClock:
    """A clock that moves only when slept on: the transport's sleep, the budgets' clock and
    (offset by :data:`BASE`) the transport's wall clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return BASE + self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


@asynccontextmanager
async def scripted(answers: list[Answer]) -> AsyncIterator[tuple[str, list[str]]]:
    """A server answering ``answers`` in turn (status and headers, GitHub's body), then 200
    ``{"ok": true}``. Yields its URL and the methods it was sent, in order."""
    methods: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        methods.append(request.method)
        if answers:
            status, headers = answers.pop(0)
            return web.json_response(GITHUB_BODY, status=status, headers=dict(headers))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/items", handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/items", methods
    finally:
        await runner.cleanup()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def budgets(clock: FakeClock) -> LocalHostBudgets:
    return LocalHostBudgets({}, clock=clock, sleep=clock.sleep)


def fake_transport(clock: FakeClock, budgets: LocalHostBudgets, **options: Any) -> Transport:
    return Transport(
        budgets=budgets, sleep=clock.sleep, wall_clock=clock.wall, backoff_factor=1.0, **options
    )


class Waits(list[tuple[WaitReason, float]]):
    def __call__(self, reason: WaitReason, seconds: float) -> None:
        self.append((reason, seconds))


# --- the transport, on fake clocks ------------------------------------------------------------


async def test_a_github_403_is_waited_out_until_its_reset(
    clock: FakeClock, budgets: LocalHostBudgets
) -> None:
    limited = github_limited(BASE + 30, date=BASE)
    async with (
        scripted([(403, limited)]) as (url, methods),
        fake_transport(clock, budgets) as transport,
    ):
        waits = Waits()
        response = await transport.request("GET", url, on_wait=waits)
        assert response.json() == {"ok": True}
        assert methods == ["GET", "GET"]
        assert waits == [(WaitReason.HOST_COOLDOWN, 30.0)]
        assert clock.sleeps == [30.0]
        # Another request right after: the cooldown is over, nothing to wait for.
        await transport.request("GET", url)
        assert clock.sleeps == [30.0]


async def test_the_host_is_held_for_every_other_request_meanwhile(
    clock: FakeClock, budgets: LocalHostBudgets
) -> None:
    async with (
        scripted([(403, github_limited(BASE + 30, date=BASE))]) as (url, methods),
        fake_transport(clock, budgets, rate_limit_waits=0) as transport,
    ):
        with pytest.raises(RateLimitError):
            await transport.request("GET", url)
        assert await budgets.cooldown_left("127.0.0.1") == 30.0
        other = Waits()
        await transport.request("GET", url, on_wait=other)
        assert other == [(WaitReason.HOST_COOLDOWN, 30.0)]
        assert clock.now == 30.0 and methods == ["GET", "GET"]


async def test_a_reset_beyond_the_maximum_fails_at_once_naming_it(
    clock: FakeClock, budgets: LocalHostBudgets
) -> None:
    limited = github_limited(BASE + 3000, date=BASE)
    async with (
        scripted([(403, limited), (403, limited)]) as (url, methods),
        fake_transport(clock, budgets) as transport,
    ):
        with pytest.raises(RateLimitError) as info:
            await transport.request("GET", url)
        error = info.value
        assert isinstance(error, ClientError) and error.status == 403
        assert error.until == datetime.fromtimestamp(BASE + 3000, UTC)
        assert str(error) == (
            f"HTTP 403 Forbidden from GET {url}: rate limited until 2023-11-14T23:03:20Z "
            "(in 3000 s, from x-ratelimit-reset): beyond http.max_rate_limit_wait_seconds "
            "(900 s), not waited for"
        )
        assert clock.sleeps == [] and methods == ["GET"]
        # Nobody is held for hours either.
        assert await budgets.cooldown_left("127.0.0.1") == 0.0
        # Returned as it came when the caller reads statuses itself.
        response = await transport.request("GET", url, raise_for_status=False)
        assert response.status == 403 and clock.sleeps == []


async def test_the_maximum_is_configurable(clock: FakeClock, budgets: LocalHostBudgets) -> None:
    async with (
        scripted([(403, github_limited(BASE + 3000, date=BASE))]) as (url, _),
        fake_transport(clock, budgets, max_rate_limit_wait=3600) as transport,
    ):
        await transport.request("GET", url)
        assert clock.sleeps == [3000.0]


async def test_a_403_with_quota_left_is_a_plain_client_error(
    clock: FakeClock, budgets: LocalHostBudgets
) -> None:
    headers = {**github_limited(BASE + 30, date=BASE), "x-ratelimit-remaining": "12"}
    async with (
        scripted([(403, headers)]) as (url, methods),
        fake_transport(clock, budgets) as transport,
    ):
        with pytest.raises(ClientError) as info:
            await transport.request("GET", url)
        assert type(info.value) is ClientError and info.value.status == 403
        assert clock.sleeps == [] and methods == ["GET"]
        assert await budgets.cooldown_left("127.0.0.1") == 0.0


async def test_rate_limit_waits_are_not_taken_from_the_retries(
    clock: FakeClock, budgets: LocalHostBudgets
) -> None:
    answers: list[Answer] = [
        (403, github_limited(BASE + 30, date=BASE)),
        (503, {}),
        (429, {"RateLimit": '"default";r=0;t=20'}),
    ]
    async with (
        scripted(answers) as (url, methods),
        fake_transport(clock, budgets, retries=1) as transport,
    ):
        waits = Waits()
        await transport.request("GET", url, on_wait=waits)
        # 403 → wait 30 s; 503 → the one retry (urllib3's first: no wait); 429 → wait 20 s.
        assert len(methods) == 4
        assert clock.sleeps == [30.0, 0.0, 20.0]
        assert waits == [(WaitReason.HOST_COOLDOWN, 30.0), (WaitReason.HOST_COOLDOWN, 20.0)]
    answers = [(403, github_limited(BASE + 60, date=BASE + 30))]
    async with (
        scripted(answers) as (url, _),
        fake_transport(clock, budgets, retries=0) as transport,
    ):
        await transport.request("GET", url)
        assert clock.sleeps[-1] == 30.0


async def test_a_request_makes_a_bounded_number_of_rate_limit_waits(
    clock: FakeClock, budgets: LocalHostBudgets
) -> None:
    limited: Answer = (429, {"RateLimit-Remaining": "0", "RateLimit-Reset": "10"})
    async with (
        scripted([limited] * 3) as (url, methods),
        fake_transport(clock, budgets, rate_limit_waits=2) as transport,
    ):
        with pytest.raises(RateLimitError, match="still refused after 2 rate-limit waits"):
            await transport.request("GET", url)
        assert clock.sleeps == [10.0, 10.0] and len(methods) == 3


async def test_a_request_that_is_not_repeatable_is_not_sent_again(
    clock: FakeClock, budgets: LocalHostBudgets
) -> None:
    async with (
        scripted([(429, {"Retry-After": "5"}), (429, {"Retry-After": "5"})]) as (url, methods),
        fake_transport(clock, budgets) as transport,
    ):
        with pytest.raises(RateLimitError, match="rate limited until") as info:
            await transport.request("POST", url, json={"query": "{ viewer { login } }"})
        assert info.value.retry_after == 5.0
        assert clock.sleeps == [] and methods == ["POST"]
        # The host is held for the others all the same; a POST marked idempotent waits.
        assert await budgets.cooldown_left("127.0.0.1") == 5.0
        await transport.request("POST", url, json={}, idempotent=True)
        assert methods == ["POST", "POST", "POST"]


async def test_without_budgets_the_transport_sleeps_the_wait_itself(clock: FakeClock) -> None:
    async with (
        scripted([(403, github_limited(BASE + 45, date=BASE))]) as (url, methods),
        Transport(sleep=clock.sleep, wall_clock=clock.wall) as transport,
    ):
        waits = Waits()
        await transport.request("GET", url, on_wait=waits)
        assert len(methods) == 2 and clock.sleeps == [45.0]
        assert waits == [(WaitReason.HOST_COOLDOWN, 45.0)]


async def test_without_a_valid_date_the_wall_clock_dates_the_reset(clock: FakeClock) -> None:
    clock.now = 15.0
    headers = {**github_limited(BASE + 45), "Date": "not a date"}
    async with (
        scripted([(403, headers)]) as (url, _),
        Transport(sleep=clock.sleep, wall_clock=clock.wall) as transport,
    ):
        await transport.request("GET", url)
        assert clock.sleeps == [30.0]


async def test_the_cooldown_goes_through_the_redis_budgets(
    redis_url: str, redis_prefix: str
) -> None:
    """One instance's refusal is every instance's cooldown: it is in Redis."""
    mine = RedisHostBudgets(redis_url, {}, prefix=redis_prefix)
    theirs = RedisHostBudgets(redis_url, {}, prefix=redis_prefix)
    await mine.open()
    await theirs.open()
    try:
        answers: list[Answer] = [(429, {"RateLimit": '"default";r=0;t=120'})]
        async with (
            scripted(answers) as (url, _),
            Transport(budgets=mine, rate_limit_waits=0) as transport,
        ):
            with pytest.raises(RateLimitError):
                await transport.request("GET", url)
        assert 119 < await theirs.cooldown_left("127.0.0.1") <= 120
    finally:
        await mine.close()
        await theirs.close()


# --- end to end: a GitHub-style source, real time ----------------------------------------


class GitHubServer(SourceServer):
    """The source server behind GitHub's primary rate limit: until :meth:`limit_until`'s
    reset (Unix seconds, real time) every request is refused with GitHub's documented 403;
    from then on served as usual. Requests are counted per connector (``who``)."""

    def __init__(self, records: int, *, page_size: int) -> None:
        super().__init__(records, page_size=page_size)
        self.reset = 0
        self.refused: list[str | None] = []
        self.served: list[tuple[float, str | None]] = []

    def limit_until(self, reset: int) -> None:
        self.reset = reset

    def times(self, who: str) -> Iterator[float]:
        return (at for at, w in self.served if w == who)

    def _scripted_failure(self) -> web.Response | None:
        request_who = self.requests[-1].query.get("who")
        if time.time() < self.reset:
            self.refused.append(request_who)
            return web.json_response(GITHUB_BODY, status=403, headers=github_limited(self.reset))
        self.served.append((time.time(), request_who))
        return super()._scripted_failure()


@pytest.fixture
async def github() -> AsyncIterator[GitHubServer]:
    """6 records in pages of 2: three requests per crawl."""
    server = GitHubServer(6, page_size=2)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def connector(server: GitHubServer, who: str) -> dict[str, Any]:
    return {"name": who, "source": http_source(server, params={"who": who})}


async def assert_held_until_the_reset(first: Daemon, second: Daemon, github: GitHubServer) -> None:
    """A's first request is refused; while A waits, B (on ``second``) waits for the host
    too, sending nothing; after the reset both crawls succeed, A after exactly one wait."""
    a = await first.create_connector(connector(github, "a"))
    b = await second.create_connector(connector(github, "b"))
    # Two seconds ahead (whole seconds, as GitHub's): A's first request is surely refused.
    github.limit_until(int(time.time()) + 2)
    await first.trigger_sync(a.id)
    refused = await first.wait_connector(a.id, lambda c: c.waiting is not None)
    assert refused.waiting is not None and refused.waiting.reason == "host_cooldown"
    assert github.refused == ["a"]
    await second.trigger_sync(b.id)
    held = await second.wait_connector(b.id, lambda c: c.waiting is not None)
    assert held.waiting is not None and held.waiting.reason == "host_cooldown"
    await first.wait_run(a.id)
    await second.wait_run(b.id)
    for daemon, c in ((first, a), (second, b)):
        runs, _ = await daemon.list_runs(c.id)
        assert runs[0].outcome is RunOutcome.SUCCEEDED, runs[0]
    # One refusal, one wait: A's retry and all of B's requests came after the reset.
    assert github.refused == ["a"]
    assert len(list(github.times("a"))) == len(list(github.times("b"))) == 3
    assert min(*github.times("a"), *github.times("b")) >= github.reset


async def test_a_github_rate_limit_holds_every_connector_until_the_reset(
    make_daemon: DaemonFactory, github: GitHubServer
) -> None:
    daemon = make_daemon()
    await daemon.start()
    await assert_held_until_the_reset(daemon, daemon, github)


@pytest.mark.parametrize("backend_sections", ["postgres+redis"], indirect=True)
async def test_a_github_rate_limit_holds_other_instances_through_redis(
    make_any_daemon: DaemonFactory, github: GitHubServer
) -> None:
    first, second = make_any_daemon(), make_any_daemon()
    await first.start()
    await second.start()
    await assert_held_until_the_reset(first, second, github)


async def test_abort_during_a_rate_limit_wait_returns_at_once(
    make_daemon: DaemonFactory, github: GitHubServer
) -> None:
    daemon = make_daemon()
    await daemon.start()
    a = await daemon.create_connector(connector(github, "a"))
    b = await daemon.create_connector(connector(github, "b"))
    github.limit_until(int(time.time()) + 600)  # within the 900 s maximum: waited for
    await daemon.trigger_sync(a.id)
    await daemon.wait_connector(a.id, lambda c: c.waiting is not None)
    await daemon.trigger_sync(b.id)
    await daemon.wait_connector(b.id, lambda c: c.waiting is not None)
    for c in (a, b):
        started = time.perf_counter()
        await daemon.abort_sync(c.id)
        await daemon.wait_run(c.id)
        assert time.perf_counter() - started < 0.2
        runs, _ = await daemon.list_runs(c.id)
        assert runs[0].outcome is RunOutcome.ABORTED
    assert github.refused == ["a"]


async def test_a_reset_beyond_the_configured_maximum_fails_the_run_naming_it(
    make_daemon: DaemonFactory, github: GitHubServer
) -> None:
    daemon = make_daemon(http={"max_rate_limit_wait_seconds": 60})
    await daemon.start()
    a = await daemon.create_connector(connector(github, "a"))
    reset = int(time.time()) + 600
    github.limit_until(reset)
    started = time.perf_counter()
    await daemon.trigger_sync(a.id)
    await daemon.wait_run(a.id)
    assert time.perf_counter() - started < 5
    runs, _ = await daemon.list_runs(a.id)
    assert runs[0].outcome is RunOutcome.FAILED
    until = datetime.fromtimestamp(reset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"rate limited until {until}" in (runs[0].error or "")
    assert "http.max_rate_limit_wait_seconds (60 s)" in (runs[0].error or "")
