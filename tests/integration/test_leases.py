"""Leases of indexing workers (DESIGN.md §7) and exact cancellation by abort (§4), with the
``webhook`` indexer against a real local receiver, on both backend pairs.

A batch that takes longer than ``workers.lease_seconds`` keeps its lease and records each
result as it finishes; a hanging indexer times out once per document; cancelling indexing
touches only batches whose documents the store took away.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import DocStatus, Document, Transition, utcnow
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.sourceserver import SourceServer

#: Bound for every wait below; a pass takes a fraction of it.
TIMEOUT = 10.0


class Hook:
    """A webhook endpoint that counts POSTs per external id and answers 200 after
    :attr:`delay` seconds, unless held (:meth:`hold` until :meth:`release`).

    A request whose sender goes away before the answer (its call was cancelled) is counted
    in :attr:`gone`: the handler is cancelled when the connection drops.
    """

    def __init__(self) -> None:
        self.delay = 0.0
        self.posts: collections.Counter[str] = collections.Counter()
        self.gone = 0
        self.url = ""
        self._released = asyncio.Event()
        self._released.set()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/index", self._handle)
        self._runner = web.AppRunner(
            app, handle_signals=False, handler_cancellation=True, shutdown_timeout=0.2
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/index"

    async def stop(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def hold(self) -> None:
        """Hold requests from now on, unanswered."""
        self._released.clear()

    def release(self) -> None:
        """Answer held and later requests (after :attr:`delay`)."""
        self._released.set()

    async def wait(self, predicate: Callable[[Hook], bool], timeout: float = TIMEOUT) -> None:
        """Wait until ``predicate(self)`` holds (checked at each request and each drop)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.posts[str(body["external_id"])] += 1
        await self._notify()
        try:
            await self._released.wait()
            await asyncio.sleep(self.delay)  # the indexer's own speed
        except asyncio.CancelledError:
            self.gone += 1
            await asyncio.shield(self._notify())
            raise
        return web.json_response({"ok": True})


@pytest.fixture
async def hook() -> AsyncIterator[Hook]:
    h = Hook()
    await h.start()
    yield h
    await h.stop()


async def start_daemon(make_any_daemon: DaemonFactory, **workers: Any) -> Daemon:
    daemon = make_any_daemon(workers=workers)
    await daemon.start()
    return daemon


async def webhook_connector(daemon: Daemon, source: SourceServer, hook: Hook) -> str:
    c = await daemon.create_connector(
        {
            "name": "items",
            "source": http_source(source),
            "indexer": {"type": "webhook", "url": hook.url},
        }
    )
    return c.id


async def all_documents(daemon: Daemon, connector_id: str) -> list[Document]:
    docs, more = await daemon.list_documents(connector_id, limit=1000)
    assert more is None
    return docs


def settled(status: DocStatus, count: int) -> Callable[[dict[DocStatus, int]], bool]:
    """Counts with ``count`` documents in ``status`` and none pending or running."""
    return lambda n: n[status] == count and n[DocStatus.PENDING] == n[DocStatus.RUNNING] == 0


async def test_batch_slower_than_the_lease_is_indexed_once(
    make_any_daemon: DaemonFactory, hook: Hook
) -> None:
    # Two batches of 8 at 0.25 s a document: 2 s each, twice the lease.
    hook.delay = 0.25
    daemon = await start_daemon(
        make_any_daemon, concurrency=2, batch_size=8, lease_seconds=1, index_timeout_seconds=5
    )
    async with SourceServer(16, page_size=8) as source:
        cid = await webhook_connector(daemon, source, hook)
        await daemon.trigger_sync(cid)
        await daemon.wait_run(cid)
        await daemon.wait_documents(cid, settled(DocStatus.INDEXED, 16), TIMEOUT)
    docs = await all_documents(daemon, cid)
    assert hook.posts == {d.external_id: 1 for d in docs}
    assert {d.attempts for d in docs} == {1}
    assert hook.gone == 0


async def test_hanging_indexer_fails_each_document_once_with_index_timeout(
    make_any_daemon: DaemonFactory, hook: Hook
) -> None:
    hook.hold()  # never answers
    # One batch of 5 at 0.3 s a document: 1.5 s, longer than the lease.
    daemon = await start_daemon(
        make_any_daemon,
        concurrency=1,
        batch_size=5,
        lease_seconds=1,
        index_timeout_seconds=0.3,
        max_attempts=1,  # one try: a timeout is transient, retried later by default
    )
    async with SourceServer(5, page_size=5) as source:
        cid = await webhook_connector(daemon, source, hook)
        await daemon.trigger_sync(cid)
        await daemon.wait_run(cid)
        await daemon.wait_documents(cid, settled(DocStatus.FAILED, 5), TIMEOUT)
    docs = await all_documents(daemon, cid)
    assert {d.error for d in docs} == {"Index timeout"}
    assert {d.attempts for d in docs} == {1}
    assert hook.posts == {d.external_id: 1 for d in docs}


async def test_late_cancel_spares_documents_claimed_after_the_abort(
    make_any_daemon: DaemonFactory, hook: Hook
) -> None:
    daemon = await start_daemon(make_any_daemon, lease_seconds=1)
    async with SourceServer(25, page_size=10) as source:
        cid = await webhook_connector(daemon, source, hook)
        # A run aborted while its first page hangs ...
        source.hang_on(None)
        await daemon.trigger_sync(cid)
        await source.requested(None).wait()
        await daemon.abort_sync(cid)
        source.release()
        await daemon.wait_run(cid)
        # ... then a new run, whose documents are being indexed when the abort's
        # cancellation arrives late.
        hook.hold()
        await daemon.trigger_sync(cid)
        await hook.wait(lambda h: sum(h.posts.values()) >= 2)  # both workers in a call
        assert await daemon.workers.cancel_connector(cid) == 0
        assert daemon.workers.busy == 2
        hook.release()
        await daemon.wait_run(cid)
        await daemon.wait_documents(cid, settled(DocStatus.INDEXED, 25), TIMEOUT)
    docs = await all_documents(daemon, cid)
    assert hook.posts == {d.external_id: 1 for d in docs}
    assert {d.attempts for d in docs} == {1}
    assert hook.gone == 0


async def test_abort_cancels_the_webhook_call_in_flight(
    make_any_daemon: DaemonFactory, hook: Hook
) -> None:
    hook.hold()  # until the end of the test
    daemon = await start_daemon(make_any_daemon, index_timeout_seconds=TIMEOUT * 3)
    async with SourceServer(25, page_size=10) as source:
        cid = await webhook_connector(daemon, source, hook)
        source.hang_on("page-1")  # the run stays running after its first page
        await daemon.trigger_sync(cid)
        await hook.wait(lambda h: sum(h.posts.values()) == 1)
        await daemon.abort_sync(cid)
        # The sender hung up: the call was cancelled, not left to its index timeout.
        await hook.wait(lambda h: h.gone == 1)
        source.release()
        await daemon.wait_run(cid)
    docs = await all_documents(daemon, cid)
    assert len(docs) == 10
    assert {(d.status, d.error) for d in docs} == {(DocStatus.FAILED, "Aborted")}
    assert sum(hook.posts.values()) == 1  # the rest of the batch was never sent
    assert daemon.workers.busy == 0


async def test_renewal_cancels_indexing_of_documents_taken_away_elsewhere(
    make_any_daemon: DaemonFactory, hook: Hook
) -> None:
    hook.hold()
    daemon = await start_daemon(
        make_any_daemon, lease_seconds=0.6, index_timeout_seconds=TIMEOUT * 3
    )
    async with SourceServer(10, page_size=10) as source:
        cid = await webhook_connector(daemon, source, hook)
        await daemon.trigger_sync(cid)
        await daemon.wait_run(cid)
        await hook.wait(lambda h: sum(h.posts.values()) == 1)
        # An abort decided by another instance whose broadcast never arrived: only the
        # store knows. This instance's next lease renewal finds nothing held and stops.
        await daemon.store.mutate_connector(
            cid, lambda c: Transition(replace(c, updated_at=utcnow())), fail_documents="Aborted"
        )
        await hook.wait(lambda h: h.gone == 1)
    counts = await daemon.document_counts(cid)
    assert counts[DocStatus.FAILED] == 10
    assert sum(hook.posts.values()) == 1


async def test_stop_keeps_recorded_results_and_gives_back_the_rest(
    make_any_daemon: DaemonFactory, hook: Hook
) -> None:
    hook.delay = 0.1
    daemon = await start_daemon(make_any_daemon, concurrency=1, batch_size=10, lease_seconds=5)
    async with SourceServer(10, page_size=10) as source:
        cid = await webhook_connector(daemon, source, hook)
        await daemon.trigger_sync(cid)
        await daemon.wait_run(cid)
        # Recorded while the batch is still being indexed.
        await daemon.wait_documents(cid, lambda n: n[DocStatus.INDEXED] >= 3, TIMEOUT)
        before, _ = await daemon.list_documents(cid, status=DocStatus.INDEXED)
        assert len(before) < 10
        await daemon.stop(grace=0)
        # A new instance redoes what was given back, at once (no lease to wait for).
        hook.delay = 0.0
        again = await start_daemon(make_any_daemon, concurrency=1, batch_size=10, lease_seconds=5)
        await again.wait_documents(cid, settled(DocStatus.INDEXED, 10), TIMEOUT)
    for doc in before:
        assert hook.posts[doc.external_id] == 1, doc.external_id
    assert set(hook.posts) == {d.external_id for d in await all_documents(again, cid)}
