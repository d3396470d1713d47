"""``GET /events``: connector and run changes as Server-Sent Events, read through the real
HTTP API (the contract is in :mod:`syncd.service.events`)."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from syncd.cli.entry import Streams, build_parser, execute
from syncd.config import Config
from syncd.daemon import Daemon
from syncd.runtime.changes import Change
from syncd.service.events import COALESCE_SECONDS
from tests.integration.conftest import embedded_config, http_source
from tests.integration.multi import shared_config
from tests.integration.sourceserver import SourceServer

TIMEOUT = 10.0
TOKEN = "events-token-0123456789"


@dataclass
class Sse:
    """One event of the stream."""

    kind: str
    id: str | None
    data: Any


@dataclass
class Stream:
    """An open ``GET /events`` stream, parsed as it arrives."""

    response: aiohttp.ClientResponse
    events: asyncio.Queue[Sse | None] = field(default_factory=asyncio.Queue)
    pings: int = 0
    ping: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    seen: list[Sse] = field(default_factory=list)

    async def read(self) -> None:
        kind, event_id, data = "message", None, []
        try:
            async for raw in self.response.content:
                line = raw.decode().rstrip("\r\n")
                if not line:
                    if data:
                        sse = Sse(kind, event_id, json.loads("\n".join(data)))
                        self.seen.append(sse)
                        self.events.put_nowait(sse)
                    kind, event_id, data = "message", None, []
                elif line.startswith(":"):
                    self.pings += 1
                    self.ping.set()
                else:
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "event":
                        kind = value
                    elif name == "id":
                        event_id = value
                    elif name == "data":
                        data.append(value)
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            pass  # closed by the test
        finally:
            self.ended.set()
            self.events.put_nowait(None)

    async def next(self, predicate: Callable[[Sse], bool] = lambda e: True) -> Sse:
        """The next event that satisfies ``predicate`` (those before it are skipped)."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                event = await self.events.get()
                assert event is not None, "the stream ended"
                if predicate(event):
                    return event


Open = Callable[..., Awaitable[Stream]]


@pytest.fixture
async def open_stream() -> AsyncIterator[Open]:
    """``await open_stream(daemon, connector_id=..., headers=...)``: a parsed stream."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
    readers: list[asyncio.Task[None]] = []
    responses: list[aiohttp.ClientResponse] = []

    async def start(
        daemon: Daemon, params: Any = None, headers: dict[str, str] | None = None
    ) -> Stream:
        response = await session.get(
            f"{daemon.api_address}/events", params=params, headers=headers or {}
        )
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/event-stream")
        responses.append(response)
        stream = Stream(response)
        readers.append(asyncio.create_task(stream.read()))
        return stream

    yield start
    for response in responses:
        response.close()
    for task in readers:
        task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    await session.close()


Start = Callable[..., Awaitable[Daemon]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """Start daemons serving their API (on this test's SQLite file unless ``config``)."""
    started: list[Daemon] = []

    async def run(config: Config | None = None, **sections: dict[str, Any]) -> Daemon:
        sections.setdefault("api", {}).setdefault("events_heartbeat_seconds", 5)
        daemon = Daemon(config or embedded_config(tmp_path, **sections))
        await daemon.start()
        started.append(daemon)
        return daemon

    yield run
    for daemon in reversed(started):
        await daemon.stop()


async def _connector(daemon: Daemon, server: SourceServer, name: str = "c") -> str:
    c = await daemon.create_connector({"name": name, "source": http_source(server)})
    return c.id


def _number(event_id: str | None) -> int:
    assert event_id is not None
    return int(event_id.rpartition(":")[2])


def _is(
    kind: str, cid: str, check: Callable[[Any], bool] = lambda d: True
) -> Callable[[Sse], bool]:
    def match(e: Sse) -> bool:
        mine = e.data.get("connector_id", e.data.get("id")) == cid
        return e.kind == kind and mine and check(e.data)

    return match


# --- one instance ---------------------------------------------------------------------------


async def test_a_sync_streams_advancing_progress_and_the_run_start_and_end(
    start: Start, open_stream: Open
) -> None:
    daemon = await start()
    async with SourceServer(200, page_size=10) as server:
        cid = await _connector(daemon, server)
        stream = await open_stream(daemon, {"connector_id": cid})
        snapshot = await stream.next()
        assert (snapshot.kind, snapshot.data["id"], snapshot.data["sync_status"]) == (
            "connector",
            cid,
            "idle",
        )
        # The connector JSON is exactly what GET /connectors/{id} answers.
        url = f"{daemon.api_address}/connectors/{cid}"
        async with aiohttp.ClientSession() as http, http.get(url) as reply:
            assert snapshot.data == await reply.json()
        server.hang_on(server.cursor_for(10))
        run_id = await daemon.trigger_sync(cid)

        started = await stream.next(_is("run", cid))
        assert (started.data["id"], started.data["outcome"]) == (run_id, "running")
        await stream.next(_is("connector", cid, lambda d: d["progress"]["pages"] == 10))
        server.release()
        ended = await stream.next(_is("run", cid))
        assert (ended.data["id"], ended.data["outcome"], ended.data["pages"]) == (
            run_id,
            "succeeded",
            20,
        )
        # The run as the runs list shows it: how its crawl ended included.
        assert (started.data["end_reason"], started.data["warnings"]) == (None, [])
        assert (ended.data["end_reason"], ended.data["warnings"]) == (
            "no next cursor at 'next_cursor'",
            [],
        )
        last = await stream.next(_is("connector", cid, lambda d: d["sync_status"] == "idle"))
        assert last.data["progress"] == {"pages": 20, "documents": 200}
        assert last.data["documents"]["indexed"] == 200

    pages = [e.data["progress"]["pages"] for e in stream.seen if e.kind == "connector"]
    assert pages == sorted(pages) and len(set(pages)) >= 3
    runs = [(e.data["id"], e.data["outcome"]) for e in stream.seen if e.kind == "run"]
    assert runs == [(run_id, "running"), (run_id, "succeeded")]
    ids = [int(e.id.rpartition(":")[2]) for e in stream.seen if e.id]
    assert ids == sorted(ids) and all(e.id and e.id.startswith(daemon.owner) for e in stream.seen)


async def test_the_filter_keeps_the_named_connectors_only(start: Start, open_stream: Open) -> None:
    daemon = await start()
    async with SourceServer(30, page_size=10) as server:
        a, b, c = [await _connector(daemon, server, name) for name in "abc"]
        only_a = await open_stream(daemon, {"connector_id": a})
        a_and_b = await open_stream(daemon, [("connector_id", f"{a}, {b}")])
        repeated = await open_stream(daemon, [("connector_id", b), ("connector_id", c)])
        for cid in (c, b, a):
            await daemon.trigger_sync(cid)
            await daemon.wait_run(cid)
        for stream, wanted in ((only_a, {a}), (a_and_b, {a, b}), (repeated, {b, c})):
            done: set[str] = set()
            while done != wanted:
                e = await stream.next(lambda e: e.kind == "run" and e.data["outcome"] != "running")
                done.add(e.data["connector_id"])
            named = {e.data.get("connector_id", e.data.get("id")) for e in stream.seen}
            assert named == wanted

        async with aiohttp.ClientSession() as http:
            too_many = ",".join(f"id{i}" for i in range(101))
            for params in ({"connector_id": too_many}, {"connector_id": ","}):
                async with http.get(f"{daemon.api_address}/events", params=params) as reply:
                    assert reply.status == 422
                    body = await reply.json()
                    assert body["detail"][0]["loc"] == ["query", "connector_id"]


async def test_last_event_id_replays_what_was_missed(start: Start, open_stream: Open) -> None:
    daemon = await start()
    async with SourceServer(0) as server:
        a = await _connector(daemon, server, "a")
        b = await _connector(daemon, server, "b")
        first = await open_stream(daemon)
        snapshot = [await first.next(), await first.next()]
        assert {e.data["id"] for e in snapshot} == {a, b}
        last_id = snapshot[-1].id
        assert last_id is not None
        first.response.close()
        await first.ended.wait()

        # Changes while disconnected; an observer tells when they were sent.
        observer = await open_stream(daemon, {"connector_id": a})
        await observer.next()  # its snapshot
        await daemon.update_connector(a, {"status": "paused"})
        paused = await observer.next(_is("connector", a, lambda d: d["status"] == "paused"))

        for how in ({"Last-Event-ID": last_id}, None):
            params = None if how else {"last_event_id": last_id}
            again = await open_stream(daemon, params, headers=how)
            replayed = await again.next(lambda e: e.id == paused.id)
            assert replayed.data == paused.data
            # Not a reset, not a snapshot (whose events share one id): what came after
            # last_id, each event under its own id.
            before = again.seen[:-1]
            assert all(e.kind == "connector" for e in before)
            numbers = [_number(e.id) for e in again.seen]
            assert numbers == sorted(set(numbers)) and numbers[0] > _number(last_id)
            await daemon.update_connector(b, {"name": "b2"})
            live = await again.next()
            assert (live.kind, live.data["id"], live.data["name"]) == ("connector", b, "b2")
            await daemon.update_connector(b, {"name": "b"})
            await again.next()
            again.response.close()


async def test_an_unknown_id_gets_reset_then_the_snapshot(start: Start, open_stream: Open) -> None:
    daemon = await start()
    async with SourceServer(0) as server:
        ids = {await _connector(daemon, server, name) for name in ("a", "b", "c")}
        for unknown in (f"{daemon.owner}:999999", "other-instance/abc:1", "garbage"):
            stream = await open_stream(daemon, headers={"Last-Event-ID": unknown})
            reset = await stream.next()
            assert reset.kind == "reset" and "reason" in reset.data
            snapshot = [await stream.next() for _ in ids]
            assert {(e.kind, e.data["id"]) for e in snapshot} == {("connector", i) for i in ids}
            stream.response.close()


async def test_heartbeats_arrive_on_an_idle_stream(start: Start, open_stream: Open) -> None:
    daemon = await start(api={"events_heartbeat_seconds": 0.05})
    stream = await open_stream(daemon)
    async with asyncio.timeout(TIMEOUT):
        while stream.pings < 3:
            stream.ping.clear()
            await stream.ping.wait()
    assert stream.seen == []  # no connector: an empty snapshot, nothing but pings


async def test_coalescing_bounds_the_events_of_a_20_page_sync(
    start: Start, open_stream: Open
) -> None:
    daemon = await start()
    async with SourceServer(200, page_size=10) as server:
        cid = await _connector(daemon, server)
        changes: list[Change] = []
        daemon.changes.listen(lambda change: changes.append(change))
        stream = await open_stream(daemon, {"connector_id": cid})
        await stream.next()
        began = time.monotonic()
        await daemon.trigger_sync(cid)
        await stream.next(_is("connector", cid, lambda d: d["sync_status"] == "idle"))
        elapsed = time.monotonic() - began
    events = [e for e in stream.seen[1:] if e.kind == "connector"]
    recorded = [ch for ch in changes if ch.connector_id == cid]
    # Every page commit and heartbeat was recorded, but sent at most once per window.
    assert len(recorded) >= 20
    assert len(events) <= elapsed / COALESCE_SECONDS + 2, (len(events), elapsed)
    assert len(events) < len(recorded)


async def test_a_deleted_connector_ends_with_a_deleted_event(
    start: Start, open_stream: Open
) -> None:
    daemon = await start()
    async with SourceServer(0) as server:
        cid = await _connector(daemon, server)
        other = await _connector(daemon, server, "other")
        stream = await open_stream(daemon)
        await stream.next()
        await stream.next()
        await daemon.delete_connector(cid)
        deleted = await stream.next(lambda e: e.kind != "connector")
        assert (deleted.kind, deleted.data) == ("deleted", {"id": cid})
        # Nothing of it follows (its `deleting` state may precede, or be coalesced away).
        await daemon.update_connector(other, {"name": "still-here"})
        await stream.next(_is("connector", other, lambda d: d["name"] == "still-here"))
        later = stream.seen[stream.seen.index(deleted) + 1 :]
        assert later and all(e.data["id"] == other for e in later)


async def test_the_stream_needs_the_token(start: Start, open_stream: Open) -> None:
    daemon = await start(api={"token": TOKEN})
    async with aiohttp.ClientSession() as http, http.get(f"{daemon.api_address}/events") as r:
        assert r.status == 401
    # Answered at once, though there is nothing to send before the first ping (5 s).
    async with asyncio.timeout(2):
        stream = await open_stream(daemon, headers={"Authorization": f"Bearer {TOKEN}"})
    assert not stream.ended.is_set()


async def test_stop_ends_open_streams_at_once(start: Start, open_stream: Open) -> None:
    daemon = await start(daemon={"grace_seconds": 30})
    streams = [await open_stream(daemon) for _ in range(3)]
    began = time.monotonic()
    await daemon.stop()
    assert time.monotonic() - began < 2.0
    for stream in streams:
        async with asyncio.timeout(TIMEOUT):
            await stream.ended.wait()


# --- several instances ----------------------------------------------------------------------


async def test_a_change_made_on_b_reaches_a_subscriber_of_a(
    start: Start, open_stream: Open, postgres_dsn: str, redis_url: str, redis_prefix: str
) -> None:
    def config(name: str) -> Config:
        return shared_config(
            postgres_dsn,
            redis_url,
            redis_prefix,
            f"instance-{name}",
            api={"listen": "127.0.0.1:0", "events_heartbeat_seconds": 5},
        )

    a = await start(config("a"))
    b = await start(config("b"))
    stream = await open_stream(a)
    async with SourceServer(50, page_size=10) as server:
        cid = await _connector(b, server)
        created = await stream.next(_is("connector", cid))
        assert created.id is not None and created.id.startswith(a.owner)
        run_id = await b.trigger_sync(cid)
        ended = await stream.next(_is("run", cid, lambda d: d["outcome"] != "running"))
        assert (ended.data["id"], ended.data["outcome"], ended.data["owner"]) == (
            run_id,
            "succeeded",
            b.owner,
        )
        idle = await stream.next(_is("connector", cid, lambda d: d["sync_status"] == "idle"))
        assert idle.data["progress"] == {"pages": 5, "documents": 50}
        await b.delete_connector(cid)
        deleted = await stream.next(lambda e: e.kind == "deleted")
        assert deleted.data == {"id": cid}


# --- syncd sync --follow --------------------------------------------------------------------


class _Output(io.StringIO):
    """stdout of the CLI: sets ``seen`` once ``text`` was written."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.seen = asyncio.Event()

    def write(self, s: str) -> int:
        written = super().write(s)
        if self.text in self.getvalue():
            self.seen.set()
        return written


def _requests(daemon: Daemon, route: str, method: str = "GET") -> float:
    body, _ = daemon.metrics.render()
    return sum(
        s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name == "syncd_api_request_seconds_count"
        and (s.labels["route"], s.labels["method"]) == (route, method)
    )


async def test_sync_follow_reads_the_stream_instead_of_polling(start: Start) -> None:
    daemon = await start()
    async with SourceServer(200, page_size=10) as server:
        cid = await _connector(daemon, server)
        server.hang_on(server.cursor_for(10))
        out = _Output("pages 10  documents 100")
        streams = Streams(io.StringIO(), out, io.StringIO())
        argv = ["sync", cid, "--follow", "--interval", "0.01", "--url", str(daemon.api_address)]
        follow = asyncio.create_task(execute(build_parser().parse_args(argv), streams=streams))
        async with asyncio.timeout(TIMEOUT):
            await out.seen.wait()
            server.release()
            assert await follow == 0
    lines = out.getvalue().splitlines()
    assert lines[-1] == "succeeded" and "pages 10  documents 100" in lines
    # The id was resolved once; every update came from the stream, none from polls.
    assert _requests(daemon, "/connectors/{id}") == 1
