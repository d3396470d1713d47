"""Steering a crawl through the API (DESIGN.md §12), on both backend pairs: the optional body
of ``POST /connectors/{id}/sync`` and ``GET``/``PUT``/``DELETE /connectors/{id}/state`` —
every 422 names its field and comes after the 404 and before the state's 409s; then §3's
codes, unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from syncd.config import Config
from syncd.models import Page

from .conftest import Api, Feed, FeedSource, Harness, HoldIndexer
from .test_routes import MISSING, UTC_TIMESTAMP, set_deleting, start_hanging_sync

if TYPE_CHECKING:
    from syncd.indexers.base import IndexerContext
    from syncd.sources.base import SourceContext

# An incremental source of the `feed` plugin (a kind without a model: any config), and an
# http source of each mark format (created, never crawled here).
FEED = {"type": "feed", "incremental": {"field": "n", "param": "since"}}
HTTP = {"type": "http", "url": "http://127.0.0.1:9/items", "records": "data"}
STATE_KEYS = {
    "connector_id",
    "incremental",
    "mark",
    "mark_set_at",
    "mark_set_by",
    "mark_crawl_id",
    "mark_run_id",
    "crawl",
    "next_crawl",
    "last_full_crawl_at",
    "documents_awaiting_confirmation",
}


def http(fmt: str | None = None) -> dict[str, Any]:
    incremental: dict[str, Any] = {"field": "updated_at", "param": "since"}
    if fmt is not None:
        incremental["format"] = fmt
    return {**HTTP, "incremental": incremental}


class MarkedFeed(FeedSource):
    """The feed, keeping the largest ``n`` seen as its mark (the http source's key)."""

    def __init__(self, feed: Feed, context: SourceContext) -> None:
        super().__init__(feed)
        self.high_water = context.state.get("high_water")

    async def fetch_page(self, cursor: str | None) -> Page:
        page = await super().fetch_page(cursor)
        for record in page.records:
            if self.high_water is None or record["n"] > self.high_water:
                self.high_water = record["n"]
        return page

    def checkpoint(self) -> dict[str, Any]:
        return {"high_water": self.high_water}


@pytest.fixture(params=["sqlite+memory", "postgres+redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The store and queue sections of each backend pair (a database and a key prefix of
    this test's own)."""
    if request.param == "sqlite+memory":
        return {"store": {"url": f"sqlite:///{tmp_path}/syncd.db"}, "queue": {"url": "memory://"}}
    # Requested only here, so the embedded cases never need a server.
    return {
        "store": {"url": request.getfixturevalue("postgres_dsn")},
        "queue": {
            "url": request.getfixturevalue("redis_url"),
            "prefix": request.getfixturevalue("redis_prefix"),
        },
    }


@pytest.fixture
async def any_harness(backend: dict[str, Any]) -> AsyncIterator[Harness]:
    """A daemon serving its API on each backend pair, with the ``feed`` source (keeping a
    mark) and the ``hold`` indexer of the SQLite harness."""
    from syncd.daemon import Daemon

    sections = backend
    config = Config.from_mapping(
        {
            **sections,
            "api": {"listen": "127.0.0.1:0"},
            "scheduler": {"tick_seconds": 3600},
            "daemon": {"grace_seconds": 0.1},
        },
        environ={},
    )
    feed, release = Feed(), asyncio.Event()
    daemon = Daemon(config)

    def feed_factory(cfg: Mapping[str, Any], ctx: SourceContext) -> MarkedFeed:
        return MarkedFeed(feed, ctx)

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


def details(reply: Any) -> dict[tuple[Any, ...], str]:
    """``{"detail": [{"loc", "msg"}]}`` → ``{tuple(loc): msg}``."""
    assert reply.status == 422, (reply.status, reply.body)
    return {tuple(d["loc"]): d["msg"] for d in reply.body["detail"]}


async def run_to_the_end(h: Harness, cid: str, body: Any = None) -> dict[str, Any]:
    reply = await h.api.post(f"/connectors/{cid}/sync", body)
    assert reply.status == 202, reply.body
    await h.daemon.wait_run(cid)
    runs = (await h.api.get(f"/connectors/{cid}/runs?limit=1")).body["data"]
    run: dict[str, Any] = runs[0]
    assert run["outcome"] == "succeeded", run
    return run


# --- POST /connectors/{id}/sync: the body -------------------------------------------------

ONLY_BACKFILL = "Only with mode backfill"
BAD_BODIES: list[tuple[dict[str, Any], Any, dict[tuple[Any, ...], str]]] = [
    (FEED, {"mode": "sideways"}, {("body", "mode"): "Must be 'incremental', 'full' or 'backfill'"}),
    (FEED, {"mode": "full", "since": 3}, {("body", "since"): ONLY_BACKFILL}),
    (FEED, {"until": 3}, {("body", "until"): ONLY_BACKFILL}),
    (
        FEED,
        {"mode": "incremental", "since": 1, "until": 2},
        {("body", "since"): ONLY_BACKFILL, ("body", "until"): ONLY_BACKFILL},
    ),
    (FEED, {"mode": "backfill"}, {("body", "since"): "Required with mode backfill"}),
    (FEED, {"mode": "backfill", "since": None}, {("body", "since"): "Required with mode backfill"}),
    (FEED, {"mode": "full", "then": 1}, {("body", "then"): "Unknown field"}),
    (
        FEED,
        {"mode": "backfill", "since": True},
        {("body", "since"): "Must be a string or a number"},
    ),
    (
        FEED,
        {"mode": "backfill", "since": 2**64},
        {("body", "since"): f"Must be a number between {-(2**63)} and {2**63 - 1}"},
    ),
    (
        FEED,
        {"mode": "backfill", "since": 9, "until": 3},
        {("body", "since"): "Must be before until"},
    ),
    (
        FEED,
        {"mode": "backfill", "since": 3, "until": 3},
        {("body", "since"): "Must be before until"},
    ),
    (
        FEED,
        {"mode": "backfill", "since": 3, "until": "x"},
        {
            (
                "body",
                "until",
            ): "Must be a value of the same kind as since (both times, numbers or text)"
        },
    ),
    (
        http("iso8601"),
        {"mode": "backfill", "since": "2024-02-01T00:00:00Z", "until": "2024-01-01T00:00:00Z"},
        {("body", "since"): "Must be before until"},
    ),
    (
        http("unix"),
        {"mode": "backfill", "since": "yesterday", "until": 1700000000},
        {
            ("body", "since"): "Must be a time (ISO 8601 text, or Unix seconds or milliseconds): "
            "the incremental format 'unix' cannot read 'yesterday'"
        },
    ),
    (
        {"type": "feed"},
        {"mode": "incremental"},
        {("body", "mode"): "Must be full: the connector's source has no `incremental`"},
    ),
    (
        HTTP,
        {"mode": "backfill", "since": 1},
        {("body", "mode"): "Must be full: the connector's source has no `incremental`"},
    ),
]


@pytest.mark.parametrize(("source", "body", "expected"), BAD_BODIES)
async def test_a_bad_sync_body_is_a_422_naming_the_field(
    any_harness: Harness, source: dict[str, Any], body: Any, expected: dict[tuple[Any, ...], str]
) -> None:
    api = any_harness.api
    c = await api.create(source=source)
    assert details(await api.post(f"/connectors/{c['id']}/sync", body)) == expected
    assert (await api.get(f"/connectors/{c['id']}")).body["sync_status"] == "idle"
    assert (await api.get(f"/connectors/{c['id']}/runs")).body["data"] == []


async def test_a_sync_body_that_is_not_an_object_is_a_422(any_harness: Harness) -> None:
    api = any_harness.api
    c = await api.create(source=FEED)
    path = f"/connectors/{c['id']}/sync"
    json = {"Content-Type": "application/json"}
    for text in ("null", "[]", '"full"', "{", "NaN"):
        reply = await api.call("POST", path, data=text, headers=json)
        assert list(details(reply)) == [("body",)], text
    # 404 first, for an unknown connector.
    reply = await api.call("POST", f"/connectors/{MISSING}/sync", data="[", headers=json)
    assert (reply.status, reply.body) == (404, {"detail": "Connector not found"})
    reply = await api.post(f"/connectors/{MISSING}/sync", {"mode": "sideways"})
    assert (reply.status, reply.body) == (404, {"detail": "Connector not found"})
    # Blank is no body: the trigger of before.
    reply = await api.call("POST", path, data="  \n", headers=json)
    assert (reply.status, reply.body["sync_status"]) == (202, "running")


async def test_body_errors_come_before_the_state_and_then_the_codes_of_before(
    any_harness: Harness,
) -> None:
    h = any_harness
    api = h.api
    paused = await api.create("paused", source=FEED)
    assert (await api.patch(f"/connectors/{paused['id']}", {"status": "paused"})).status == 200
    bad = {"mode": "backfill", "since": 5, "until": 1}
    assert list(details(await api.post(f"/connectors/{paused['id']}/sync", bad))) == [
        ("body", "since")
    ]
    reply = await api.post(f"/connectors/{paused['id']}/sync", {"mode": "full"})
    assert (reply.status, reply.body) == (409, {"detail": "Connector is paused"})

    deleting = await api.create("deleting", source=FEED)
    await set_deleting(h, deleting["id"])
    assert list(details(await api.post(f"/connectors/{deleting['id']}/sync", bad))) == [
        ("body", "since")
    ]
    reply = await api.post(f"/connectors/{deleting['id']}/sync", {"mode": "full"})
    assert (reply.status, reply.body) == (409, {"detail": "Connector is being deleted"})

    running = await api.create("running", source=FEED)
    run_id = await start_hanging_sync(h, running["id"])
    assert list(details(await api.post(f"/connectors/{running['id']}/sync", bad))) == [
        ("body", "since")
    ]
    for body in ({"mode": "full"}, {"mode": "backfill", "since": 1, "until": 5}, None):
        reply = await api.post(f"/connectors/{running['id']}/sync", body)
        assert (reply.status, reply.body) == (
            409,
            {"detail": "Sync already in progress", "run_id": run_id},
        )


@pytest.mark.parametrize(
    "body",
    [{"mode": "full"}, {"mode": "incremental"}, {"mode": "backfill", "since": 2, "until": 7}, {}],
)
async def test_a_steered_sync_starts_a_run(any_harness: Harness, body: dict[str, Any]) -> None:
    h = any_harness
    h.feed.records(25)
    c = await h.api.create(source=FEED, indexer={"type": "store"})
    reply = await h.api.post(f"/connectors/{c['id']}/sync", body)
    assert reply.status == 202
    assert reply.body == {
        "connector_id": c["id"],
        "run_id": reply.body["run_id"],
        "sync_status": "running",
    }
    await h.daemon.wait_run(c["id"])
    [run] = (await h.api.get(f"/connectors/{c['id']}/runs")).body["data"]
    assert (run["id"], run["outcome"], run["documents_filtered"]) == (
        reply.body["run_id"],
        "succeeded",
        0,
    )


async def test_concurrent_steered_triggers_start_exactly_one_run(any_harness: Harness) -> None:
    h = any_harness
    c = await h.api.create(source=FEED)
    h.feed.hang_at = 0
    replies = await asyncio.gather(
        *(h.api.post(f"/connectors/{c['id']}/sync", {"mode": "full"}) for _ in range(20))
    )
    assert sorted(r.status for r in replies) == [202] + [409] * 19
    await h.feed.reached.wait()


async def test_a_steered_trigger_without_a_free_slot_is_queued(any_harness: Harness) -> None:
    h = any_harness
    h.daemon.admission.max_runs = 1
    busy, waiting = await h.api.create("busy"), await h.api.create("waiting", source=FEED)
    await start_hanging_sync(h, busy["id"])
    reply = await h.api.post(f"/connectors/{waiting['id']}/sync", {"mode": "full"})
    assert (reply.status, reply.body) == (
        202,
        {"connector_id": waiting["id"], "run_id": None, "sync_status": "queued"},
    )
    state = (await h.api.get(f"/connectors/{waiting['id']}/state")).body
    assert state["next_crawl"] == {"mode": "full", "since": None, "until": None, "resumes": False}


# --- GET / PUT / DELETE /connectors/{id}/state ---------------------------------------------


async def test_the_state_of_a_connector_without_a_crawl(any_harness: Harness) -> None:
    api = any_harness.api
    c = await api.create(source=FEED)
    reply = await api.get(f"/connectors/{c['id']}/state")
    assert reply.status == 200
    assert reply.body == {
        "connector_id": c["id"],
        "incremental": True,
        "mark": None,
        "mark_set_at": None,
        "mark_set_by": None,
        "mark_crawl_id": None,
        "mark_run_id": None,
        "crawl": None,
        "next_crawl": {"mode": "incremental", "since": None, "until": None, "resumes": False},
        "last_full_crawl_at": None,
        "documents_awaiting_confirmation": 0,
    }
    plain = await api.create("plain")
    body = (await api.get(f"/connectors/{plain['id']}/state")).body
    assert (body["incremental"], body["mark"], body["next_crawl"]["mode"]) == (False, None, "full")


async def test_the_state_follows_the_crawls(any_harness: Harness) -> None:
    h = any_harness
    api = h.api
    h.feed.records(25)
    c = await api.create(source=FEED, indexer={"type": "store"})
    path = f"/connectors/{c['id']}/state"
    run = await run_to_the_end(h, c["id"])
    state = (await api.get(path)).body
    assert set(state) == STATE_KEYS
    assert (state["mark"], state["mark_set_by"], state["mark_run_id"]) == (24, "crawl", run["id"])
    assert state["mark_crawl_id"] is not None and UTC_TIMESTAMP.match(state["mark_set_at"])
    assert state["crawl"] is None and state["last_full_crawl_at"] is None

    # A full crawl that hangs on its second page: the crawl in progress, its mode and start.
    h.feed.hang_at = 1
    reply = await api.post(f"/connectors/{c['id']}/sync", {"mode": "full"})
    await h.feed.reached.wait()
    await h.daemon.wait_connector(c["id"], lambda x: x.progress.pages == 1)
    crawl = (await api.get(path)).body["crawl"]
    assert crawl["id"] != state["mark_crawl_id"] and UTC_TIMESTAMP.match(crawl["started_at"])
    assert (crawl["mode"], crawl["since"], crawl["until"], crawl["resume_cursor_held"]) == (
        "full",
        None,
        None,
        True,
    )
    assert (await api.post(f"/connectors/{c['id']}/sync/abort")).status == 202
    aborted = (await api.get(path)).body
    assert aborted["crawl"] == crawl and aborted["mark"] == 24
    assert aborted["next_crawl"] == {"mode": "full", "since": None, "until": None, "resumes": True}
    h.feed.hang_at = None
    await h.daemon.wait_run(c["id"])
    run = await run_to_the_end(h, c["id"])
    done = (await api.get(path)).body
    assert done["crawl"] is None and UTC_TIMESTAMP.match(done["last_full_crawl_at"])
    assert (done["mark_set_by"], done["mark_run_id"], done["mark_crawl_id"]) == (
        "crawl",
        run["id"],
        crawl["id"],
    )
    assert reply.status == 202


@pytest.mark.parametrize("mark", ["2024-05-01T00:00:00Z", 1700000000, 12.5, "opaque-token-7"])
async def test_put_sets_the_mark_and_get_shows_it_back(any_harness: Harness, mark: Any) -> None:
    api = any_harness.api
    c = await api.create(source=FEED)
    path = f"/connectors/{c['id']}/state"
    reply = await api.call("PUT", path, json_body={"mark": mark})
    assert reply.status == 200, reply.body
    assert (reply.body["mark"], reply.body["mark_set_by"]) == (mark, "user")
    assert reply.body["mark_crawl_id"] is None and UTC_TIMESTAMP.match(reply.body["mark_set_at"])
    assert (await api.get(path)).body == reply.body
    assert type((await api.get(path)).body["mark"]) is type(mark)


async def test_the_mark_set_is_where_the_next_crawl_starts(any_harness: Harness) -> None:
    h = any_harness
    seen: list[Any] = []
    original = MarkedFeed.__init__

    def spy(self: MarkedFeed, feed: Feed, context: SourceContext) -> None:
        seen.append(context.state.get("high_water"))
        original(self, feed, context)

    h.feed.records(5)
    c = await h.api.create(source=FEED, indexer={"type": "store"})
    await run_to_the_end(h, c["id"])
    assert (
        await h.api.call("PUT", f"/connectors/{c['id']}/state", json_body={"mark": 2})
    ).status == 200
    MarkedFeed.__init__ = spy  # type: ignore[method-assign]
    try:
        await run_to_the_end(h, c["id"])
        assert (await h.api.delete(f"/connectors/{c['id']}/state")).status == 200
        run = await run_to_the_end(h, c["id"])
    finally:
        MarkedFeed.__init__ = original  # type: ignore[method-assign]
    assert seen == [2, None]
    assert run["note"] == "mark reset"


BAD_MARKS: list[tuple[dict[str, Any], Any, dict[tuple[Any, ...], str]]] = [
    (FEED, {}, {("body", "mark"): "Field required"}),
    (FEED, {"mark": None}, {("body", "mark"): "Must be a string or a number"}),
    (FEED, {"mark": False}, {("body", "mark"): "Must be a string or a number"}),
    (FEED, {"mark": {"at": 1}}, {("body", "mark"): "Must be a string or a number"}),
    (
        FEED,
        {"mark": ""},
        {("body", "mark"): "Must be a string of 1 to 1000 characters, without NUL"},
    ),
    (FEED, {"mark": 1, "lag": 5}, {("body", "lag"): "Unknown field"}),
    (FEED, [1], {("body",): "Must be a JSON object"}),
    (
        http("unix_ms"),
        {"mark": "soon"},
        {
            ("body", "mark"): "Must be a time (ISO 8601 text, or Unix seconds or milliseconds): "
            "the incremental format 'unix_ms' cannot read 'soon'"
        },
    ),
    (
        {"type": "feed"},
        {"mark": 1},
        {("body", "mark"): "The connector's source has no `incremental`, so no mark"},
    ),
]


@pytest.mark.parametrize(("source", "body", "expected"), BAD_MARKS)
async def test_a_bad_mark_is_a_422_naming_the_field(
    any_harness: Harness, source: dict[str, Any], body: Any, expected: dict[tuple[Any, ...], str]
) -> None:
    api = any_harness.api
    c = await api.create(source=source)
    path = f"/connectors/{c['id']}/state"
    before = (await api.get(path)).body
    assert details(await api.call("PUT", path, json_body=body)) == expected
    assert (await api.get(path)).body == before
    # 404 before 422.
    reply = await api.call("PUT", f"/connectors/{MISSING}/state", json_body=body)
    assert (reply.status, reply.body) == (404, {"detail": "Connector not found"})


async def test_an_iso_mark_is_read_by_a_time_format(any_harness: Harness) -> None:
    api = any_harness.api
    for fmt in ("unix", "iso8601", "%Y/%m/%d"):
        c = await api.create(f"c-{fmt.strip('%/')}", source=http(fmt))
        reply = await api.call(
            "PUT", f"/connectors/{c['id']}/state", json_body={"mark": "2024-05-01T10:00:00Z"}
        )
        assert (reply.status, reply.body["mark"]) == (200, "2024-05-01T10:00:00Z")


async def test_delete_resets_the_mark_and_the_next_crawl_is_full(any_harness: Harness) -> None:
    h = any_harness
    h.feed.records(5)
    c = await h.api.create(source=FEED, indexer={"type": "store"})
    await run_to_the_end(h, c["id"])
    reply = await h.api.delete(f"/connectors/{c['id']}/state")
    assert reply.status == 200
    assert (reply.body["mark"], reply.body["mark_set_by"], reply.body["crawl"]) == (
        None,
        None,
        None,
    )
    assert reply.body["next_crawl"] == {
        "mode": "full",
        "since": None,
        "until": None,
        "resumes": False,
    }
    assert (await h.api.get(f"/connectors/{c['id']}/state")).body == reply.body
    plain = await h.api.create("plain")
    assert details(await h.api.delete(f"/connectors/{plain['id']}/state")) == {
        ("path", "id"): "The connector's source has no `incremental`, so no mark"
    }


async def test_state_changes_conflict_while_running_or_deleting_and_not_while_paused(
    any_harness: Harness,
) -> None:
    h = any_harness
    api = h.api
    running = await api.create("running", source=FEED)
    run_id = await start_hanging_sync(h, running["id"])
    conflict = {"detail": "Sync already in progress", "run_id": run_id}
    path = f"/connectors/{running['id']}/state"
    reply = await api.call("PUT", path, json_body={"mark": 3})
    assert (reply.status, reply.body) == (409, conflict)
    reply = await api.delete(path)
    assert (reply.status, reply.body) == (409, conflict)
    # A body error still answers 422 first.
    assert list(details(await api.call("PUT", path, json_body={"mark": None}))) == [
        ("body", "mark")
    ]

    deleting = await api.create("deleting", source=FEED)
    await set_deleting(h, deleting["id"])
    path = f"/connectors/{deleting['id']}/state"
    for reply in (await api.call("PUT", path, json_body={"mark": 3}), await api.delete(path)):
        assert (reply.status, reply.body) == (409, {"detail": "Connector is being deleted"})
    assert (await api.get(path)).status == 200

    paused = await api.create("paused", source=FEED)
    assert (await api.patch(f"/connectors/{paused['id']}", {"status": "paused"})).status == 200
    path = f"/connectors/{paused['id']}/state"
    assert (await api.call("PUT", path, json_body={"mark": 3})).body["mark"] == 3
    assert (await api.delete(path)).body["mark"] is None


async def test_unknown_connectors_are_404_on_every_state_route(any_harness: Harness) -> None:
    api = any_harness.api
    for method in ("GET", "PUT", "DELETE"):
        reply = await api.call(method, f"/connectors/{MISSING}/state", json_body=None)
        assert (reply.status, reply.body) == (404, {"detail": "Connector not found"}), method
