"""Deletions: an index that mirrors the source (DESIGN.md §11).

A completed full crawl deletes, through the indexer, the live documents it did not see; a
failed, aborted or interrupted crawl never does; the guard holds a mass deletion until it is
applied; incremental sources delete through tombstones and scheduled full crawls; a document
that comes back is indexed again; deletes are leased and fenced like indexing.
"""

from __future__ import annotations

import asyncio
import io
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from syncd.api import views
from syncd.cli.entry import Streams, build_parser, execute
from syncd.daemon import Daemon
from syncd.errors import Conflict
from syncd.models import Connector, DocStatus, Run, RunOutcome, Transition, utcnow
from tests.integration.conftest import DaemonFactory, embedded_config, http_source
from tests.integration.multi import (
    NotifySocket,
    SyncdProcess,
    UnixApi,
    poll_until,
    shared_config,
    shared_sections,
    toml_text,
)
from tests.integration.sourceserver import SourceServer, make_records

RUN_END_TIMEOUT = 10.0
STATE_TIMEOUT = 10.0


# --- helpers ------------------------------------------------------------------------------


class Receiver:
    """A webhook endpoint recording every body; while :attr:`hold_deletes` is set, delete
    requests are kept unanswered (their worker keeps its lease) until :meth:`release`."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.hold_deletes = False
        self.held: list[str] = []
        self._release = asyncio.Event()
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hook"

    async def stop(self) -> None:
        self.release()
        if self._runner is not None:
            await self._runner.cleanup()

    def release(self) -> None:
        self.hold_deletes = False
        self._release.set()

    def ids(self, op: str) -> list[str]:
        """External ids of the bodies with ``op`` answered 200, in order."""
        return [str(b["external_id"]) for b in self.bodies if b.get("op") == op]

    async def wait_held(self, count: int) -> None:
        async with asyncio.timeout(STATE_TIMEOUT), self._arrived:
            await self._arrived.wait_for(lambda: len(self.held) >= count)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("op") == "delete" and self.hold_deletes:
            self.held.append(str(body["external_id"]))
            async with self._arrived:
                self._arrived.notify_all()
            await self._release.wait()
            # The sender of a held request was killed: this answer reaches no one.
            return web.json_response({"ok": False}, status=503)
        self.bodies.append(body)
        return web.json_response({"ok": True})


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    """30 records in pages of 10."""
    async with SourceServer(30, page_size=10) as server:
        yield server


def ids(count: int, start: int = 0) -> list[str]:
    return [r["id"] for r in make_records(count, start=start)]


async def create(daemon: Daemon, server: SourceServer, **fields: Any) -> Connector:
    body: dict[str, Any] = {"name": "items", "source": http_source(server), "page_retries": 0}
    body.update(fields)
    return await daemon.create_connector(body)


async def last_run(daemon: Daemon, connector_id: str) -> Run:
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    return runs[0]


async def sync(daemon: Daemon, connector_id: str) -> Run:
    run_id = await daemon.trigger_sync(connector_id)
    await asyncio.wait_for(daemon.wait_run(connector_id), RUN_END_TIMEOUT)
    run = await last_run(daemon, connector_id)
    assert run.id == run_id
    return run


async def settled(daemon: Daemon, connector_id: str, **expected: int) -> dict[str, int]:
    """Wait until no document is pending or running and the counts are ``expected``."""

    def done(n: dict[DocStatus, int]) -> bool:
        named = {str(k): v for k, v in n.items()}
        return all(named[k] == v for k, v in expected.items()) and (
            n[DocStatus.PENDING] == n[DocStatus.RUNNING] == 0
        )

    try:
        counts = await daemon.wait_documents(connector_id, done, STATE_TIMEOUT)
    except TimeoutError:
        counts = await daemon.document_counts(connector_id)
        pytest.fail(f"documents did not settle to {expected}: {counts}")
    return {str(k): v for k, v in counts.items()}


async def statuses(daemon: Daemon, connector_id: str) -> dict[str, str]:
    docs, _ = await daemon.list_documents(connector_id, limit=1000)
    return {d.external_id: str(d.status) for d in docs}


def deleted_ids(found: dict[str, str]) -> list[str]:
    return sorted(e for e, s in found.items() if s == "deleted")


# --- a shrinking source -------------------------------------------------------------------


async def test_shrinking_source_deletes_what_it_no_longer_has(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source)
    first = await sync(daemon, c.id)
    assert (first.outcome, first.deleted, first.deletions_held) == (RunOutcome.SUCCEEDED, 0, 0)
    source.set_records(20)

    run = await sync(daemon, c.id)

    assert (run.outcome, run.deleted, run.deletions_held) == (RunOutcome.SUCCEEDED, 10, 0)
    found = await statuses(daemon, c.id)
    assert deleted_ids(found) == ids(10, start=20)
    assert {found[e] for e in ids(20)} == {"indexed"}
    gone = await daemon.get_document(c.id, ids(1, start=25)[0])
    assert (gone.status, gone.payload) == (DocStatus.DELETED, None)
    connector = await daemon.get_connector(c.id)
    shown = views.connector_json(connector, await daemon.document_counts(c.id))
    assert shown["documents"] == {
        "pending": 0,
        "running": 0,
        "indexed": 20,
        "failed": 0,
        "deleted": 10,
    }
    assert (shown["deletions_held"], shown["prune"], shown["prune_max_fraction"]) == (0, True, 0.5)
    assert views.run_json(run)["deleted"] == 10
    assert daemon.metrics.documents_deleted._value.get() == 10

    # Nothing more is gone: the next crawl deletes nothing, and tombstones stay deleted.
    again = await sync(daemon, c.id)
    assert (again.deleted, again.documents_enqueued) == (0, 0)
    assert deleted_ids(await statuses(daemon, c.id)) == ids(10, start=20)


async def test_webhook_gets_one_delete_per_document_gone(
    make_any_daemon: DaemonFactory, source: SourceServer, receiver: Receiver
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source, indexer={"type": "webhook", "url": receiver.url})
    await sync(daemon, c.id)
    await settled(daemon, c.id, indexed=30)
    upserts = [b for b in receiver.bodies if b["op"] == "upsert"]
    assert sorted(b["external_id"] for b in upserts) == ids(30)
    assert set(upserts[0]) == {"op", "connector_id", "external_id", "content_hash", "payload"}
    source.set_records(20)

    run = await sync(daemon, c.id)

    assert (run.outcome, run.deleted) == (RunOutcome.SUCCEEDED, 10)
    await settled(daemon, c.id, indexed=20, deleted=10)
    assert sorted(receiver.ids("delete")) == ids(10, start=20)  # each exactly once
    deletes = [b for b in receiver.bodies if b["op"] == "delete"]
    assert deletes[0] == {
        "op": "delete",
        "connector_id": c.id,
        "external_id": deletes[0]["external_id"],
    }
    assert len(receiver.ids("upsert")) == 30  # unchanged documents are not sent again


async def test_a_document_that_reappears_is_indexed_again(
    make_any_daemon: DaemonFactory, source: SourceServer, receiver: Receiver
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source, indexer={"type": "webhook", "url": receiver.url})
    await sync(daemon, c.id)
    await settled(daemon, c.id, indexed=30)
    source.set_records(20)
    await sync(daemon, c.id)
    await settled(daemon, c.id, indexed=20, deleted=10)
    source.set_records(30)  # the ten come back, unchanged

    run = await sync(daemon, c.id)

    assert (run.deleted, run.documents_enqueued) == (0, 10)
    await settled(daemon, c.id, indexed=30, deleted=0)
    back = await daemon.get_document(c.id, ids(1, start=29)[0])
    assert back.status is DocStatus.INDEXED and back.payload["id"] == ids(1, start=29)[0]
    assert sorted(receiver.ids("upsert")[30:]) == ids(10, start=20)


async def test_a_document_back_in_the_store_indexer_reads_indexed(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source)
    await sync(daemon, c.id)
    source.set_records(20)
    await sync(daemon, c.id)
    source.set_records(30)
    await sync(daemon, c.id)
    assert set((await statuses(daemon, c.id)).values()) == {"indexed"}
    doc = await daemon.get_document(c.id, ids(1, start=22)[0])
    assert doc.payload["id"] == ids(1, start=22)[0]


# --- crawls that do not complete never delete ------------------------------------------------


async def test_a_failed_crawl_deletes_nothing(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source)
    await sync(daemon, c.id)
    source.set_records(20)
    source.fail_next(500)

    run = await sync(daemon, c.id)

    assert (run.outcome, run.deleted) == (RunOutcome.FAILED, 0)
    assert deleted_ids(await statuses(daemon, c.id)) == []


async def test_an_aborted_crawl_deletes_nothing_and_its_resumption_deletes_the_unseen(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source)
    await sync(daemon, c.id)
    source.set_records(20)
    source.hang_on("page-1")
    await daemon.trigger_sync(c.id)
    await source.requested("page-1").wait()

    await daemon.abort_sync(c.id)
    await asyncio.wait_for(daemon.wait_run(c.id), RUN_END_TIMEOUT)
    source.release()

    aborted = await last_run(daemon, c.id)
    assert (aborted.outcome, aborted.deleted) == (RunOutcome.ABORTED, 0)
    assert deleted_ids(await statuses(daemon, c.id)) == []
    # The next run resumes the crawl at page 2: the documents of page 1, seen by the aborted
    # run of the same crawl, are not deleted.
    resumed = await sync(daemon, c.id)
    assert source.cursors[-1] == "page-1"
    assert (resumed.outcome, resumed.deleted) == (RunOutcome.SUCCEEDED, 10)
    assert deleted_ids(await statuses(daemon, c.id)) == ids(10, start=20)


async def test_an_interrupted_crawl_deletes_nothing(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source)
    await sync(daemon, c.id)
    source.set_records(20)
    source.hang_on("page-1")
    await daemon.trigger_sync(c.id)
    await source.requested("page-1").wait()

    await daemon.stop()  # graceful: the run is interrupted
    source.release()

    restarted = make_any_daemon()
    await restarted.start()
    interrupted = await last_run(restarted, c.id)
    assert (interrupted.outcome, interrupted.deleted) == (RunOutcome.INTERRUPTED, 0)
    assert deleted_ids(await statuses(restarted, c.id)) == []
    resumed = await sync(restarted, c.id)
    assert (resumed.outcome, resumed.deleted) == (RunOutcome.SUCCEEDED, 10)


# --- the guard --------------------------------------------------------------------------------


async def test_the_guard_holds_a_mass_deletion_until_applied(
    make_any_daemon: DaemonFactory, source: SourceServer, receiver: Receiver
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source, indexer={"type": "webhook", "url": receiver.url})
    await sync(daemon, c.id)
    await settled(daemon, c.id, indexed=30)
    source.set_records(5)

    held = await sync(daemon, c.id)

    assert (held.outcome, held.deleted, held.deletions_held) == (RunOutcome.SUCCEEDED, 0, 25)
    assert (await daemon.get_connector(c.id)).deletions_held == 25
    assert deleted_ids(await statuses(daemon, c.id)) == []
    assert daemon.metrics.deletions_held._value.get() == 25
    assert receiver.ids("delete") == []

    assert await daemon.apply_deletions(c.id) == 25

    await settled(daemon, c.id, indexed=5, deleted=25)
    assert sorted(receiver.ids("delete")) == ids(25, start=5)
    assert (await daemon.get_connector(c.id)).deletions_held == 0
    with pytest.raises(Conflict, match=r"^No deletions held$"):
        await daemon.apply_deletions(c.id)


async def test_the_next_completed_crawl_recomputes_held_deletions(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source)
    await sync(daemon, c.id)
    source.set_records(5)
    assert (await sync(daemon, c.id)).deletions_held == 25
    source.set_records(30)  # it was an outage of the source, not a deletion

    back = await sync(daemon, c.id)

    assert (back.deleted, back.deletions_held) == (0, 0)
    assert (await daemon.get_connector(c.id)).deletions_held == 0
    with pytest.raises(Conflict, match=r"^No deletions held$"):
        await daemon.apply_deletions(c.id)
    source.set_records(28)  # two gone: under the guard, deleted at once
    assert (await sync(daemon, c.id)).deleted == 2
    assert deleted_ids(await statuses(daemon, c.id)) == ids(2, start=28)


async def test_the_guard_needs_more_than_ten(
    make_any_daemon: DaemonFactory,
) -> None:
    async with SourceServer(12, page_size=10) as small:
        daemon = make_any_daemon()
        await daemon.start()
        c = await create(daemon, small)
        await sync(daemon, c.id)
        small.set_records(2)  # 10 of 12 gone: more than half, but not more than ten
        run = await sync(daemon, c.id)
        assert (run.deleted, run.deletions_held) == (10, 0)


async def test_prune_max_fraction_raises_the_bar(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source, prune_max_fraction=0.9)
    await sync(daemon, c.id)
    source.set_records(5)
    assert (await sync(daemon, c.id)).deleted == 25


async def test_prune_false_deletes_nothing(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(daemon, source, prune=False)
    await sync(daemon, c.id)
    source.set_records(20)
    run = await sync(daemon, c.id)
    assert (run.deleted, run.deletions_held) == (0, 0)
    assert deleted_ids(await statuses(daemon, c.id)) == []
    # Turned on again: the next completed crawl deletes what is gone.
    await daemon.update_connector(c.id, {"prune": True})
    assert (await sync(daemon, c.id)).deleted == 10


async def test_apply_route_and_cli_answers(tmp_path: Path, source: SourceServer) -> None:
    config = embedded_config(tmp_path)
    async with Daemon(config) as daemon:
        base = daemon.api_address
        assert base is not None
        async with aiohttp.ClientSession(base) as http:
            async with http.post("/connectors/nope/deletions/apply") as r:
                assert (r.status, await r.json()) == (404, {"detail": "Connector not found"})
            c = await create(daemon, source)
            path = f"/connectors/{c.id}/deletions/apply"
            async with http.post(path) as r:
                assert (r.status, await r.json()) == (409, {"detail": "No deletions held"})
            await sync(daemon, c.id)
            source.set_records(5)
            await sync(daemon, c.id)
            async with http.get(f"/connectors/{c.id}") as r:
                shown = await r.json()
            assert shown["deletions_held"] == 25
            async with http.get(f"/connectors/{c.id}/runs") as r:
                latest = (await r.json())["data"][0]
            assert (latest["deleted"], latest["deletions_held"]) == (0, 25)
            async with http.post(path) as r:
                assert (r.status, await r.json()) == (202, {"deleting": 25})
            async with http.get(f"/connectors/{c.id}") as r:
                shown = await r.json()
            assert shown["deletions_held"] == 0
            assert shown["documents"]["deleted"] == 25
        # The command line: `syncd deletions apply ID` (none held now: refused, exit 1).
        assert await run_cli("deletions", "apply", c.id, "--url", base) == (
            1,
            "",
            "error: 409 No deletions held\n",
        )
        await sync(daemon, c.id)
        source.set_records(30)
        await sync(daemon, c.id)
        source.set_records(5)
        assert (await sync(daemon, c.id)).deletions_held == 25
        shown_text = (await run_cli("show", c.id, "--url", base))[1]
        assert "deletions held:   25\n" in shown_text
        assert await run_cli("deletions", "apply", "items", "--url", base) == (
            0,
            "deleting 25 documents\n",
            "",
        )


async def run_cli(*argv: str) -> tuple[int, str, str]:
    """A ``syncd`` client command in this event loop: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(argv)
    code = await execute(args, streams=Streams(io.StringIO(), out, err), environ={})
    return code, out.getvalue(), err.getvalue()


# --- incremental sources -----------------------------------------------------------------------

INCREMENTAL = {"field": "updated_at", "param": "updated_since"}


async def test_tombstones_delete_through_an_incremental_source(
    make_any_daemon: DaemonFactory, source: SourceServer, receiver: Receiver
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    inc = {**INCREMENTAL, "deleted_field": "deleted_at"}
    c = await create(
        daemon,
        source,
        source=http_source(source, incremental=inc),
        indexer={"type": "webhook", "url": receiver.url},
    )
    await sync(daemon, c.id)
    await settled(daemon, c.id, indexed=30)
    later = "2024-02-01T00:00:00Z"
    tombstones = [
        {"id": ids(1, start=3)[0], "updated_at": later, "deleted_at": later},
        {"id": ids(1, start=4)[0], "updated_at": later, "deleted_at": True},
        {"id": ids(1, start=5)[0], "updated_at": later, "deleted_at": None, "title": "kept"},
        {"id": ids(1, start=6)[0], "updated_at": later, "deleted_at": False, "title": "kept"},
        {"id": "never-seen", "updated_at": later, "deleted_at": later},
    ]
    source.set_records([*source.records, *tombstones])

    run = await sync(daemon, c.id)

    assert source.requests[-1].query["updated_since"] == make_records(30)[-1]["updated_at"]
    assert (run.outcome, run.deleted, run.documents_seen) == (RunOutcome.SUCCEEDED, 2, 3)
    await settled(daemon, c.id, deleted=2)
    assert deleted_ids(await statuses(daemon, c.id)) == ids(2, start=3)
    assert sorted(receiver.ids("delete")) == ids(2, start=3)
    # Incremental crawls never prune: the 25 documents this crawl did not see are kept.
    assert (await daemon.document_counts(c.id))[DocStatus.INDEXED] == 28


async def test_a_scheduled_full_crawl_of_an_incremental_source_prunes(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    c = await create(
        daemon,
        source,
        source=http_source(source, incremental=INCREMENTAL),
        full_crawl_schedule="0 3 * * 0",
    )
    created = await daemon.get_connector(c.id)
    assert created.next_full_crawl_at is not None and created.next_run_at is not None
    await sync(daemon, c.id)
    source.set_records(make_records(28))  # two gone; an incremental crawl cannot see it
    assert (await sync(daemon, c.id)).deleted == 0
    assert "updated_since" in source.requests[-1].query

    # The full-crawl schedule fires (its time injected): the next fresh crawl is full.
    def due(current: Connector) -> Transition:
        return Transition(replace(current, next_full_crawl_at=utcnow() - timedelta(seconds=1)))

    await daemon.store.mutate_connector(c.id, due)
    run = await sync(daemon, c.id)

    assert all("updated_since" not in r.query for r in source.requests[-3:])
    assert (run.outcome, run.deleted) == (RunOutcome.SUCCEEDED, 2)
    assert deleted_ids(await statuses(daemon, c.id)) == ids(2, start=28)
    after = await daemon.get_connector(c.id)
    assert after.next_full_crawl_at is not None and after.next_full_crawl_at > utcnow()
    # Back to incremental crawls, from the full crawl's mark.
    await sync(daemon, c.id)
    assert source.requests[-1].query["updated_since"] == make_records(28)[-1]["updated_at"]


# --- tombstone retention --------------------------------------------------------------------


async def test_tombstones_are_purged_after_their_retention(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon(workers={"lease_seconds": 0.4})
    await daemon.start()
    c = await create(daemon, source)
    await sync(daemon, c.id)
    source.set_records(20)
    await sync(daemon, c.id)
    assert (await daemon.document_counts(c.id))[DocStatus.DELETED] == 10

    # Seven days (the default) are not over yet; they are a day later.
    assert await daemon.sweeper.purge_tombstones(utcnow() + timedelta(days=6)) == 0
    assert await daemon.sweeper.purge_tombstones(utcnow() + timedelta(days=7, hours=1)) == 10
    counts = await daemon.document_counts(c.id)
    assert (counts[DocStatus.DELETED], counts[DocStatus.INDEXED]) == (0, 20)


async def test_the_sweeper_purges_tombstones(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_any_daemon(
        workers={"lease_seconds": 0.4}, documents={"deleted_retention_days": 0}
    )
    await daemon.start()
    c = await create(daemon, source)
    await sync(daemon, c.id)
    source.set_records(20)
    assert (await sync(daemon, c.id)).deleted == 10
    # No retention: the sweeper's next pass (every lease_seconds / 4) removes them. The
    # purge is a background pass that records no change: its outcome is polled, bounded.

    async def purged() -> bool:
        return (await daemon.document_counts(c.id))[DocStatus.DELETED] == 0

    await poll_until(purged, "the sweeper to purge the tombstones", STATE_TIMEOUT)
    assert (await daemon.document_counts(c.id))[DocStatus.INDEXED] == 20


# --- deletes are leased and fenced like indexing (two instances) -------------------------------


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (a unix socket path is limited to about 100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="syncd-") as root:
        yield Path(root)


async def test_deletes_of_a_killed_instance_are_done_once_by_another(
    postgres_dsn: str,
    redis_url: str,
    redis_prefix: str,
    receiver: Receiver,
    source: SourceServer,
    short_dir: Path,
) -> None:
    concurrency, batch = 2, 3
    sections = shared_sections(postgres_dsn, redis_url, redis_prefix, "instance-b")
    sections["api"] = {"listen": f"unix:{short_dir / 'b.sock'}"}
    sections["workers"] = {"concurrency": concurrency, "batch_size": batch, "lease_seconds": 3}
    sections["log"] = {"format": "json"}
    config_path = short_dir / "b.toml"
    config_path.write_text(toml_text(sections), encoding="utf-8")
    notify = NotifySocket(short_dir / "notify.sock")
    b = SyncdProcess(config_path, {"NOTIFY_SOCKET": str(notify.path)})
    api = UnixApi(short_dir / "b.sock")
    a: Daemon | None = None
    try:
        await b.start()
        try:
            await notify.wait_for("READY=1")
        except TimeoutError:
            pytest.fail("instance B did not get ready:\n" + "".join(b.output))
        body = {
            "name": "items",
            "source": http_source(source),
            "indexer": {"type": "webhook", "url": receiver.url},
        }
        cid = (await api.ok("POST", "/connectors", body))["id"]

        async def counts() -> dict[str, int]:
            return dict((await api.ok("GET", f"/connectors/{cid}"))["documents"])

        async def indexed() -> bool:
            return (await counts())["indexed"] == 30

        await api.ok("POST", f"/connectors/{cid}/sync")
        await poll_until(indexed, "the first crawl indexed on instance B")
        source.set_records(20)
        receiver.hold_deletes = True
        await api.ok("POST", f"/connectors/{cid}/sync")
        await receiver.wait_held(concurrency)
        found = await counts()
        assert (found["running"], found["pending"]) == (
            concurrency * batch,
            10 - concurrency * batch,
        )
        held = await api.ok("GET", f"/connectors/{cid}/documents?status=running")
        b_claimed = sorted(d["external_id"] for d in held["data"])

        assert await b.kill() == -signal.SIGKILL
        receiver.release()
        a = Daemon(
            shared_config(
                postgres_dsn,
                redis_url,
                redis_prefix,
                "instance-a",
                workers={"lease_seconds": 1, "batch_size": 10},
            ),
            serve_api=False,
        )
        await a.start()
        await settled(a, cid, indexed=20, deleted=10)

        # Every gone document deleted, each exactly once by a live worker; B's claims were
        # redone after their lease expired (two attempts), none lost.
        assert sorted(receiver.ids("delete")) == ids(10, start=20)
        docs, _ = await a.list_documents(cid, status=DocStatus.DELETED, limit=100)
        attempts = {d.external_id: d.attempts for d in docs}
        assert {e for e, n in attempts.items() if n == 2} == set(b_claimed)
        assert {e for e, n in attempts.items() if n == 1} == set(ids(10, start=20)) - set(b_claimed)
    finally:
        if a is not None:
            await a.stop()
        await api.close()
        await b.kill()
        notify.close()
