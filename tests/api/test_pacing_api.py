"""The API's requests count as in flight for the pacer exactly while they are served: every
answer (success, error, refused) ends them, and an event stream ends once it has started."""

from __future__ import annotations

import asyncio

import pytest

from syncd.runtime import pacing
from tests.api.conftest import Harness, StartDaemon


async def test_every_answer_ends_its_request(harness: Harness) -> None:
    api, pacer = harness.api, harness.daemon.pacer
    created = await api.create()
    answers = [
        await api.get(f"/connectors/{created['id']}"),
        await api.get("/connectors"),
        await api.get("/connectors/nope"),  # 404
        await api.get("/connectors?limit=0"),  # 422
        await api.post("/connectors", {"name": ""}),  # 422
        await api.call("PUT", "/connectors"),  # 405
        await api.get("/no/such/path"),  # 404, no route
    ]
    assert [a.status for a in answers] == [200, 200, 404, 422, 422, 405, 404]
    assert pacer.in_flight == 0


async def test_a_refused_request_ends_too(start_daemon: StartDaemon) -> None:
    harness = await start_daemon(token="s3cret-token-for-tests")
    reply = await harness.api.get("/connectors", auth=False)
    assert reply.status == 401
    assert harness.daemon.pacer.in_flight == 0


async def test_a_request_is_in_flight_while_its_handler_runs(harness: Harness) -> None:
    daemon, api = harness.daemon, harness.api
    created = await api.create()
    seen: list[int] = []
    read = daemon.service.get_connector_with_counts

    async def spy(connector_id: str) -> object:
        seen.append(daemon.pacer.in_flight)
        return await read(connector_id)

    daemon.service.get_connector_with_counts = spy  # type: ignore[method-assign,assignment]
    reply = await api.get(f"/connectors/{created['id']}")
    assert reply.status == 200
    assert seen == [1]
    assert daemon.pacer.in_flight == 0


async def test_an_open_event_stream_holds_no_background_step(harness: Harness) -> None:
    daemon, api = harness.daemon, harness.api
    async with api.session.get("/events") as response:
        assert response.status == 200
        # The stream is open (its headers arrived): it no longer counts as in flight, so a
        # background step gets its turn at once.
        assert daemon.pacer.in_flight == 0
        await asyncio.wait_for(daemon.pacer.turn(), timeout=5)
    assert daemon.pacer.in_flight == 0


async def test_a_crawl_waits_while_a_request_is_in_flight(harness: Harness) -> None:
    daemon, api, feed = harness.daemon, harness.api, harness.feed
    pacer = daemon.pacer
    pacer.starve_seconds = 3600  # no starvation guard: only the request's end lets it on
    feed.records(30, per_page=10)
    created = await api.create(indexer={"type": "store"})
    pacer.begin()  # a request being served
    await daemon.trigger_sync(created["id"])
    for _ in range(100_000):
        if pacer.waiting:
            break
        await asyncio.sleep(0)
    assert pacer.waiting >= 1
    connector = await daemon.store.get_connector(created["id"])
    assert connector is not None and connector.progress.pages == 0
    pacer.end()
    await asyncio.wait_for(daemon.wait_run(created["id"]), timeout=30)
    connector = await daemon.store.get_connector(created["id"])
    assert connector is not None and connector.progress.pages == 3
    assert pacer.waiting == 0


async def test_a_slow_request_gives_its_priority_up(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A preview of a source that does not answer: the request goes on, the crawls do not
    # wait for it beyond REQUEST_PRIORITY_SECONDS.
    monkeypatch.setattr(pacing, "REQUEST_PRIORITY_SECONDS", 0.05)
    daemon, api, feed = harness.daemon, harness.api, harness.feed
    feed.hang_at = 0
    ended = asyncio.Event()
    end = daemon.pacer.end

    def end_and_tell() -> None:
        end()
        ended.set()

    monkeypatch.setattr(daemon.pacer, "end", end_and_tell)
    body = {"connector": {"name": "slow", "source": {"type": "feed"}}, "pages": 1}
    preview = asyncio.create_task(api.post("/connectors/preview", body))
    await asyncio.wait_for(feed.reached.wait(), timeout=30)
    assert daemon.pacer.in_flight == 1
    await asyncio.wait_for(ended.wait(), timeout=30)  # the priority's timer ended it
    assert daemon.pacer.in_flight == 0
    assert not preview.done()
    feed.release.set()
    reply = await preview
    assert reply.status == 200, reply.body
    assert daemon.pacer.in_flight == 0
