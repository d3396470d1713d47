"""Batch delivery (DESIGN.md §7): the ``webhook`` indexer with ``batch_size`` against a real
local sink, and a plugin with ``index_batch``, on both backend pairs.

One POST carries up to ``batch_size`` documents; a 2xx answer may name the documents that
failed; a non-2xx answer fails the documents of its POST; ``batch_size`` 1 keeps the
one-document body; deletions travel in batches too; an abort cancels a batch POST in flight;
a batch call that outlives the index timeout fails its documents once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.indexers.base import BatchFailures
from syncd.models import DocStatus, Document
from syncd.observability.logs import register_secret
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.sourceserver import SourceServer

#: Bound for every wait below; a pass takes a fraction of it.
TIMEOUT = 10.0

Answer = Callable[[dict[str, Any]], web.Response]


class Sink:
    """A webhook endpoint recording every body and its Content-Type. It answers 200 with an
    empty body unless :attr:`answer` says otherwise; while held (:meth:`hold`) it answers
    nothing. A request whose sender hung up is counted in :attr:`gone`."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.content_types: list[str] = []
        self.answer: Answer | None = None
        self.gone = 0
        self.url = ""
        self._released = asyncio.Event()
        self._released.set()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(
            app, handle_signals=False, handler_cancellation=True, shutdown_timeout=0.2
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hook"

    async def stop(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def hold(self) -> None:
        self._released.clear()

    def posted(self, op: str) -> list[str]:
        """External ids of the documents POSTed in batch bodies of ``op``."""
        return [
            d["external_id"] for b in self.bodies if b["op"] == op for d in b.get("documents", ())
        ]

    async def wait(self, predicate: Callable[[Sink], bool]) -> None:
        async with asyncio.timeout(TIMEOUT), self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        self.content_types.append(request.headers.get("Content-Type", ""))
        await self._notify()
        try:
            await self._released.wait()
        except asyncio.CancelledError:
            self.gone += 1
            await asyncio.shield(self._notify())
            raise
        return self.answer(body) if self.answer is not None else web.Response(status=200)


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    s = Sink()
    await s.start()
    yield s
    await s.stop()


async def started(make_any_daemon: DaemonFactory, **workers: Any) -> Daemon:
    daemon = make_any_daemon(workers=workers)
    await daemon.start()
    return daemon


async def connector(daemon: Daemon, source: SourceServer, sink: Sink, **indexer: Any) -> str:
    c = await daemon.create_connector(
        {
            "name": "items",
            "source": http_source(source),
            "indexer": {"type": "webhook", "url": sink.url, **indexer},
        }
    )
    return c.id


async def sync(daemon: Daemon, cid: str) -> None:
    await daemon.trigger_sync(cid)
    await daemon.wait_run(cid)


def settled(total: int) -> Callable[[dict[DocStatus, int]], bool]:
    """Counts with nothing pending or running and ``total`` documents in all."""
    return lambda n: n[DocStatus.PENDING] == n[DocStatus.RUNNING] == 0 and sum(n.values()) == total


async def statuses(daemon: Daemon, cid: str) -> dict[str, tuple[DocStatus, str | None]]:
    docs, more = await daemon.list_documents(cid, limit=1000)
    assert more is None
    return {d.external_id: (d.status, d.error) for d in docs}


async def test_one_post_carries_up_to_batch_size_documents(
    make_any_daemon: DaemonFactory, sink: Sink
) -> None:
    daemon = await started(make_any_daemon, concurrency=2, batch_size=20)
    async with SourceServer(25, page_size=25) as source:
        cid = await connector(daemon, source, sink, batch_size=10)
        await sync(daemon, cid)
        await daemon.wait_documents(cid, settled(25), TIMEOUT)
        records = {r["id"]: r for r in source.records}
    found = await statuses(daemon, cid)
    assert set(found.values()) == {(DocStatus.INDEXED, None)}
    # Each worker batch (at most 20) goes out in POSTs of at most 10.
    assert all(len(b["documents"]) <= 10 for b in sink.bodies)
    assert len(sink.bodies) <= 5
    assert sorted(sink.posted("upsert")) == sorted(records)
    assert set(sink.content_types) == {"application/json"}
    for body in sink.bodies:
        assert set(body) == {"op", "connector_id", "documents"}
        assert (body["op"], body["connector_id"]) == ("upsert", cid)
        for doc in body["documents"]:
            stored = await daemon.get_document(cid, doc["external_id"])
            assert doc == {
                "connector_id": cid,
                "external_id": stored.external_id,
                "content_hash": stored.content_hash,
                "payload": records[doc["external_id"]],
            }


async def test_per_document_results_fail_exactly_the_named_documents(
    make_any_daemon: DaemonFactory, sink: Sink
) -> None:
    bad = {"item-00003": "mapping rejected", "item-00017": ""}

    def answer(body: dict[str, Any]) -> web.Response:
        results = [
            {"external_id": d["external_id"], "status": "failed", "error": bad[d["external_id"]]}
            if d["external_id"] in bad
            else {"external_id": d["external_id"], "status": "indexed"}
            for d in body["documents"]
        ]
        # Documents not listed count as indexed: leave one out.
        return web.json_response({"results": results[1:] if results else results})

    sink.answer = answer
    daemon = await started(make_any_daemon)
    async with SourceServer(25, page_size=10) as source:
        cid = await connector(daemon, source, sink, batch_size=50)
        await sync(daemon, cid)
        await daemon.wait_documents(cid, settled(25), TIMEOUT)
    found = await statuses(daemon, cid)
    failed = {e: err for e, (s, err) in found.items() if s is DocStatus.FAILED}
    listed_first = {b["documents"][0]["external_id"] for b in sink.bodies}
    expected = {
        e: err or "Failed by the webhook" for e, err in bad.items() if e not in listed_first
    }
    assert failed == expected
    assert expected  # the sources' first documents of a POST are not the bad ones
    assert {s for e, (s, _) in found.items() if e not in failed} == {DocStatus.INDEXED}


async def test_non_2xx_fails_every_document_of_its_post(
    make_any_daemon: DaemonFactory, sink: Sink
) -> None:
    def answer(body: dict[str, Any]) -> web.Response:
        ids = {d["external_id"] for d in body["documents"]}
        if "item-00012" in ids:
            return web.json_response({"error": "index is read-only"}, status=503)
        return web.Response(status=204)

    sink.answer = answer
    # One try: a 5xx is transient, retried later by default (test_document_retries.py).
    daemon = await started(make_any_daemon, concurrency=1, batch_size=20, max_attempts=1)
    async with SourceServer(25, page_size=25) as source:
        cid = await connector(daemon, source, sink, batch_size=5)
        await sync(daemon, cid)
        await daemon.wait_documents(cid, settled(25), TIMEOUT)
    [rejected] = [
        b for b in sink.bodies if "item-00012" in {d["external_id"] for d in b["documents"]}
    ]
    rejected_ids = {d["external_id"] for d in rejected["documents"]}
    assert len(rejected_ids) == 5
    found = await statuses(daemon, cid)
    assert {e for e, (s, _) in found.items() if s is DocStatus.FAILED} == rejected_ids
    assert {found[e][1] for e in rejected_ids} == {"HTTP 503"}
    assert len(sink.bodies) == 5  # no retry of a POST


async def test_batch_size_1_keeps_the_one_document_body(
    make_any_daemon: DaemonFactory, sink: Sink
) -> None:
    daemon = await started(make_any_daemon)
    async with SourceServer(5, page_size=5) as source:
        cid = await connector(daemon, source, sink, batch_size=1)
        await sync(daemon, cid)
        await daemon.wait_documents(cid, settled(5), TIMEOUT)
        records = {r["id"]: r for r in source.records}
    assert len(sink.bodies) == 5
    for body in sink.bodies:
        stored = await daemon.get_document(cid, body["external_id"])
        assert body == {
            "op": "upsert",
            "connector_id": cid,
            "external_id": stored.external_id,
            "content_hash": stored.content_hash,
            "payload": records[stored.external_id],
        }
    assert set(sink.content_types) == {"application/json"}


async def test_deletions_go_in_batches(make_any_daemon: DaemonFactory, sink: Sink) -> None:
    daemon = await started(make_any_daemon, batch_size=50)
    async with SourceServer(30, page_size=10) as source:
        cid = await connector(daemon, source, sink, batch_size=100)
        await sync(daemon, cid)
        await daemon.wait_documents(cid, settled(30), TIMEOUT)
        source.set_records(20)
        await sync(daemon, cid)
        await daemon.wait_documents(cid, lambda n: n[DocStatus.DELETED] == 10, TIMEOUT)
    deletes = [b for b in sink.bodies if b["op"] == "delete"]
    assert sorted(sink.posted("delete")) == [f"item-{i:05d}" for i in range(20, 30)]
    for body in deletes:
        assert body["connector_id"] == cid
        assert all(
            d == {"connector_id": cid, "external_id": d["external_id"]} for d in body["documents"]
        )
    assert len(deletes) < 10
    found = await statuses(daemon, cid)
    assert [e for e, (s, _) in sorted(found.items()) if s is DocStatus.DELETED] == sorted(
        sink.posted("delete")
    )


async def test_abort_cancels_a_batch_post_in_flight(
    make_any_daemon: DaemonFactory, sink: Sink
) -> None:
    sink.hold()  # until the end of the test
    daemon = await started(make_any_daemon, index_timeout_seconds=TIMEOUT * 3)
    async with SourceServer(25, page_size=10) as source:
        cid = await connector(daemon, source, sink, batch_size=100)
        source.hang_on("page-1")  # the run stays running after its first page
        await daemon.trigger_sync(cid)
        await sink.wait(lambda s: len(s.bodies) == 1)
        await daemon.abort_sync(cid)
        # The sender hung up: the call was cancelled, not left to its index timeout.
        await sink.wait(lambda s: s.gone == 1)
        source.release()
        await daemon.wait_run(cid)
    found = await statuses(daemon, cid)
    assert len(found) == 10
    assert set(found.values()) == {(DocStatus.FAILED, "Aborted")}
    assert len(sink.bodies) == 1
    assert len(sink.bodies[0]["documents"]) == 10
    assert daemon.workers.busy == 0


async def test_batch_call_past_the_index_timeout_fails_its_documents_once(
    make_any_daemon: DaemonFactory, sink: Sink
) -> None:
    sink.hold()
    daemon = await started(
        make_any_daemon, concurrency=1, batch_size=10, index_timeout_seconds=0.3, max_attempts=1
    )
    async with SourceServer(10, page_size=10) as source:
        cid = await connector(daemon, source, sink, batch_size=10)
        await sync(daemon, cid)
        await daemon.wait_documents(cid, settled(10), TIMEOUT)
    found = await statuses(daemon, cid)
    assert set(found.values()) == {(DocStatus.FAILED, "Index timeout")}
    assert len(sink.bodies) == 1
    await sink.wait(lambda s: s.gone == 1)


class BatchPlugin:
    """A plugin indexer taking batches: fails the ids in ``bad`` with an error that holds a
    secret, and raises for a batch holding ``boom``."""

    batch_size = 4
    bad: dict[str, str] = {}
    boom = ""
    calls: list[list[str]] = []

    def __init__(self, config: object, context: object) -> None:
        pass

    async def index(self, document: Document) -> None:
        raise AssertionError("a batch indexer is called with batches")

    async def index_batch(self, documents: Sequence[Document]) -> BatchFailures:
        ids = [d.external_id for d in documents]
        self.calls.append(ids)
        if self.boom in ids:
            raise RuntimeError("search cluster down, key plugin-secret-1234")
        return {**{e: self.bad[e] for e in ids if e in self.bad}, "not-in-batch": "ignored"}


async def test_a_plugin_batch_indexer_reports_per_document_failures(
    make_any_daemon: DaemonFactory,
) -> None:
    register_secret("plugin-secret-1234")
    BatchPlugin.bad = {"item-00001": "bad mapping, key plugin-secret-1234"}
    BatchPlugin.boom = "item-00009"
    BatchPlugin.calls = []
    daemon = make_any_daemon(workers={"concurrency": 1, "batch_size": 20})
    daemon.register_indexer("batched", BatchPlugin)
    await daemon.start()
    async with SourceServer(10, page_size=10) as source:
        c = await daemon.create_connector(
            {"name": "items", "source": http_source(source), "indexer": {"type": "batched"}}
        )
        await sync(daemon, c.id)
        await daemon.wait_documents(c.id, settled(10), TIMEOUT)
    assert sorted(len(ids) for ids in BatchPlugin.calls) == [2, 4, 4]
    [boomed] = [ids for ids in BatchPlugin.calls if "item-00009" in ids]
    found = await statuses(daemon, c.id)
    failed = {e: err for e, (s, err) in found.items() if s is DocStatus.FAILED}
    assert failed == {
        "item-00001": "bad mapping, key ***",
        **dict.fromkeys(boomed, "search cluster down, key ***"),
    }
    assert "not-in-batch" not in found
    # One latency observation per document.
    counts = {
        s.labels["outcome"]: s.value
        for s in daemon.metrics.index_latency.collect()[0].samples
        if s.name.endswith("_count")
    }
    assert counts == {"indexed": 10 - len(failed), "failed": len(failed)}
