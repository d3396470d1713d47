"""Fixtures of the API tests: a real daemon (SQLite file + in-process queue) serving its
control API on 127.0.0.1, port 0, and a small HTTP client for it.

Syncs are driven by two real plugins registered on the daemon, so that a test decides
exactly when a run is in progress and which documents exist:

- the ``feed`` source serves ``Feed.pages`` and can hang before a chosen page until
  released (the run stays ``running``; an abort interrupts the hung request);
- the ``hold`` indexer blocks until released, so documents stay ``pending``/``running``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from syncd.config import Config
from syncd.models import Document, Page

if TYPE_CHECKING:
    from syncd.daemon import Daemon
    from syncd.indexers.base import IndexerContext
    from syncd.sources.base import SourceContext

TOKEN = "test-token-0123456789"

# The fields of a connector as the API returns it (DESIGN.md §3, plus sync_timezone).
CONNECTOR_KEYS = {
    "id",
    "name",
    "status",
    "sync_status",
    "last_error",
    "run_id",
    "sync_started_at",
    "sync_queued_at",
    "last_synced_at",
    "sync_schedule",
    "sync_timezone",
    "next_run_at",
    "created_at",
    "updated_at",
    "source",
    "indexer",
    "page_retries",
    "page_retry_backoff",
    "throttle_seconds",
    "retry_on_status",
    "progress",
    "waiting",
    "sync_owner",
    "sync_heartbeat_at",
    "documents",
    "prune",
    "prune_max_fraction",
    "full_crawl_schedule",
    "deletions_held",
    "prune_confirmations",
    "documents_awaiting_confirmation",
    "hash_fields",
    "document",
    "retry_attempts",
    "retry_backoff",
    "failures",
    "retry_at",
}
ZERO_DOCS = {"pending": 0, "running": 0, "indexed": 0, "failed": 0, "deleted": 0}


@dataclass
class Feed:
    """What the ``feed`` source serves; ``hang_at`` is the index of a page that does not
    answer until ``release`` is set (``reached`` is set when it is requested)."""

    pages: list[list[dict[str, Any]]] = field(default_factory=lambda: [[]])
    hang_at: int | None = None
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def records(self, count: int, *, per_page: int = 10, prefix: str = "doc") -> None:
        """Serve ``count`` records ``{"id": f"{prefix}-{i}", "n": i}``, ``per_page`` a page."""
        items = [{"id": f"{prefix}-{i:03d}", "n": i} for i in range(count)]
        self.pages = [items[i : i + per_page] for i in range(0, count, per_page)] or [[]]


class FeedSource:
    """A source plugin over a :class:`Feed`; the cursor is the page index."""

    def __init__(self, feed: Feed) -> None:
        self._feed = feed

    async def fetch_page(self, cursor: str | None) -> Page:
        index = int(cursor or 0)
        if index == self._feed.hang_at:
            self._feed.reached.set()
            await self._feed.release.wait()
        nxt = str(index + 1) if index + 1 < len(self._feed.pages) else None
        return Page(list(self._feed.pages[index]), nxt)


class HoldIndexer:
    """An indexer plugin that does not return until ``release`` is set."""

    def __init__(self, release: asyncio.Event) -> None:
        self._release = release

    async def index(self, document: Document) -> None:
        await self._release.wait()


@dataclass(frozen=True)
class Reply:
    """An API answer: status, parsed body (JSON, else text) and headers."""

    status: int
    body: Any
    headers: Mapping[str, str]
    text: str


class Api:
    """A client of one daemon's control API."""

    def __init__(self, session: aiohttp.ClientSession, token: str | None) -> None:
        self.session = session
        self.token = token

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | str | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
    ) -> Reply:
        """Send one request; with ``auth`` the configured token is sent as a bearer token."""
        sent = dict(headers or {})
        if auth and self.token:
            sent.setdefault("Authorization", f"Bearer {self.token}")
        if json_body is not None:
            data = json.dumps(json_body)
            sent.setdefault("Content-Type", "application/json")
        async with self.session.request(
            method, path, data=data, params=params, headers=sent
        ) as response:
            text = await response.text()
            body: Any = text
            if response.content_type == "application/json":
                body = json.loads(text)
            return Reply(response.status, body, response.headers, text)

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.call("POST", path, json_body=body, **kw)

    async def patch(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.call("PATCH", path, json_body=body, **kw)

    async def delete(self, path: str, **kw: Any) -> Reply:
        return await self.call("DELETE", path, **kw)

    async def create(self, name: str = "feed", **fields: Any) -> dict[str, Any]:
        """Create a connector (``feed`` source and ``hold`` indexer unless given)."""
        body = {"name": name, "source": {"type": "feed"}, "indexer": {"type": "hold"}, **fields}
        reply = await self.post("/connectors", body)
        assert reply.status == 201, reply.body
        result: dict[str, Any] = reply.body
        return result


@dataclass
class Harness:
    """A started daemon, its API client and the plugins' controls."""

    daemon: Daemon
    api: Api
    feed: Feed
    indexer_release: asyncio.Event


StartDaemon = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def start_daemon(tmp_path: Path) -> AsyncIterator[StartDaemon]:
    """Start daemons (``await start_daemon(token=..., max_body_bytes=...)``); each is stopped
    and its database removed after the test."""
    async with contextlib.AsyncExitStack() as stack:
        count = 0

        async def start(**api: Any) -> Harness:
            nonlocal count
            count += 1
            config = Config.from_mapping(
                {
                    "store": {"url": f"sqlite:///{tmp_path}/syncd-{count}.db"},
                    "queue": {"url": "memory://"},
                    "api": {"listen": "127.0.0.1:0", **api},
                    "scheduler": {"tick_seconds": 3600},
                    "daemon": {"grace_seconds": 0.1},
                },
                environ={},
            )
            # Imported here so that the tests of this directory that need no daemon (the
            # server's) run on their own.
            from syncd.daemon import Daemon

            feed = Feed()
            release = asyncio.Event()
            daemon = Daemon(config)

            def feed_factory(cfg: Mapping[str, Any], ctx: SourceContext) -> FeedSource:
                return FeedSource(feed)

            def hold_factory(cfg: Mapping[str, Any], ctx: IndexerContext) -> HoldIndexer:
                return HoldIndexer(release)

            daemon.register_source("feed", feed_factory)
            daemon.register_indexer("hold", hold_factory)
            await stack.enter_async_context(daemon)

            def unblock() -> None:
                # Let hung requests and indexing end so the daemon stops without waiting.
                feed.release.set()
                release.set()

            stack.callback(unblock)
            address = daemon.api_address
            assert address is not None and address.startswith("http://127.0.0.1:")
            session = await stack.enter_async_context(aiohttp.ClientSession(base_url=address))
            token = api.get("token")
            return Harness(daemon, Api(session, token), feed, release)

        yield start


@pytest.fixture
async def harness(start_daemon: StartDaemon) -> Harness:
    """A daemon without an API token."""
    return await start_daemon()


@pytest.fixture
def api(harness: Harness) -> Api:
    """The API client of :func:`harness`."""
    return harness.api
