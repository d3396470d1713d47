"""Several instances on one PostgreSQL database and one Redis prefix (DESIGN.md §1): a sync
runs in exactly one process, a scheduled tick fires once, an abort sent to any instance stops
the run wherever it runs, and a killed instance's documents are indexed by another."""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from syncd import rules
from syncd.daemon import Daemon
from syncd.errors import Conflict
from syncd.models import (
    Connector,
    DocStatus,
    RunOutcome,
    RunTrigger,
    SyncStatus,
    Transition,
    utcnow,
)
from syncd.store.postgres import migrations as schema
from tests.integration.conftest import http_source
from tests.integration.multi import (
    HoldingReceiver,
    NotifySocket,
    SyncdProcess,
    UnixApi,
    document_ids,
    poll_until,
    shared_config,
    shared_sections,
    toml_text,
    wait_indexed,
)
from tests.integration.sourceserver import SourceServer

Instances = Callable[..., Awaitable[Daemon]]


@pytest.fixture
async def instance(
    postgres_dsn: str, redis_url: str, redis_prefix: str
) -> AsyncIterator[Instances]:
    """Start daemons on this test's database and Redis prefix: ``await instance("a",
    sync={...})``. Every one started is stopped at the end."""
    started: list[Daemon] = []

    async def start(name: str, **sections: dict[str, Any]) -> Daemon:
        config = shared_config(
            postgres_dsn, redis_url, redis_prefix, f"instance-{name}", **sections
        )
        daemon = Daemon(config, serve_api=False)
        await daemon.start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in reversed(started):
        await daemon.stop()


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    """25 records in pages of 10."""
    async with SourceServer(25, page_size=10) as server:
        yield server


async def test_instances_start_at_once_and_migrate_once(
    instance: Instances, postgres_dsn: str
) -> None:
    a, b = await asyncio.gather(instance("a"), instance("b"))
    assert (a.instance_id, b.instance_id) == ("instance-a", "instance-b")
    assert await a.readiness() == await b.readiness() == {"store": "ok", "queue": "ok"}
    conn = await asyncpg.connect(postgres_dsn)
    try:
        rows = await conn.fetch(f"SELECT version FROM {schema.SCHEMA_VERSION_TABLE} ORDER BY 1")
    finally:
        await conn.close()
    assert [r["version"] for r in rows] == [v for v, _ in schema.MIGRATIONS]


async def test_fifty_triggers_over_two_instances_start_one_run(
    instance: Instances, source: SourceServer
) -> None:
    a, b = await asyncio.gather(instance("a"), instance("b"))
    c = await a.create_connector({"name": "items", "source": http_source(source)})
    source.hang_on(None)
    results = await asyncio.gather(
        *((a if i % 2 else b).trigger_sync(c.id) for i in range(50)), return_exceptions=True
    )
    started = [r for r in results if isinstance(r, str)]
    conflicts = [r for r in results if isinstance(r, Conflict)]
    assert len(started) == 1 and len(conflicts) == 49, results
    assert {e.message for e in conflicts} == {"Sync already in progress"}
    assert {e.extra["run_id"] for e in conflicts} == set(started)
    running = await b.get_connector(c.id)
    assert running.sync_status is SyncStatus.RUNNING and running.run_id == started[0]
    owner = a if running.sync_owner == a.owner else b
    assert running.sync_owner in (a.owner, b.owner)
    assert owner.running_syncs == {c.id: started[0]}
    assert (a if owner is b else b).running_syncs == {}
    source.release()
    await asyncio.gather(a.wait_run(c.id), b.wait_run(c.id))
    runs, _ = await a.list_runs(c.id)
    assert [(r.id, r.outcome, r.owner) for r in runs] == [
        (started[0], RunOutcome.SUCCEEDED, owner.owner)
    ]
    assert source.cursors == [None, "page-1", "page-2"]
    await wait_indexed(a, c.id, 25, others=[b])


async def test_schedule_due_on_both_instances_fires_once(
    instance: Instances, source: SourceServer
) -> None:
    a, b = await asyncio.gather(instance("a"), instance("b"))
    c = await a.create_connector(
        {"name": "items", "source": http_source(source), "sync_schedule": "*/5 * * * *"}
    )
    past = utcnow() - timedelta(hours=1)

    def due(x: Connector) -> Transition:
        return Transition(replace(x, next_run_at=past))

    await a.store.mutate_connector(c.id, due)
    from_a, from_b = await asyncio.gather(a.tick(), b.tick())
    assert len(from_a) + len(from_b) == 1, (from_a, from_b)
    await asyncio.gather(a.wait_run(c.id), b.wait_run(c.id))
    runs, _ = await b.list_runs(c.id)
    assert [(r.id, r.trigger, r.outcome) for r in runs] == [
        ((from_a + from_b)[0], RunTrigger.SCHEDULE, RunOutcome.SUCCEEDED)
    ]
    after = await b.get_connector(c.id)
    assert after.next_run_at is not None and after.next_run_at > utcnow()
    # Both tick again: nothing is due any more.
    again = await asyncio.gather(a.tick(), b.tick())
    assert list(again) == [[], []]
    assert source.cursors == [None, "page-1", "page-2"]


async def _run_hung_on_b(b: Daemon, a: Daemon, source: SourceServer) -> tuple[str, str]:
    """Create a connector, trigger it on B and wait until B's run waits for page 1."""
    c = await a.create_connector({"name": "items", "source": http_source(source)})
    source.hang_on("page-1")
    run_id = await b.trigger_sync(c.id)
    await source.requested("page-1").wait()
    assert b.running_syncs == {c.id: run_id} and a.running_syncs == {}
    return c.id, run_id


async def _assert_aborted(
    a: Daemon, cid: str, run_id: str, source: SourceServer, b_owner: str
) -> None:
    source.release()
    # B's run has ended: it cannot ask for another page whatever the server answers now.
    assert source.cursors == [None, "page-1"]
    after = await a.get_connector(cid)
    assert after.sync_status is SyncStatus.IDLE and after.run_id is None
    assert after.last_synced_at is None
    runs, _ = await a.list_runs(cid)
    assert [(r.id, r.outcome, r.owner) for r in runs] == [(run_id, RunOutcome.ABORTED, b_owner)]


async def test_abort_sent_to_a_stops_the_run_on_b(
    instance: Instances, source: SourceServer
) -> None:
    a = await instance("a")
    # B's heartbeat would notice the abort only after 5 s: stopping within 1 s is the
    # broadcast's doing.
    b = await instance("b", sync={"heartbeat_seconds": 5.0})
    cid, run_id = await _run_hung_on_b(b, a, source)
    started = time.perf_counter()
    assert await a.abort_sync(cid) == run_id
    await asyncio.wait_for(b.wait_run(cid), 1.0)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"the run on B stopped after {elapsed:.3f}s"
    assert b.running_syncs == {}
    await _assert_aborted(a, cid, run_id, source, b.owner)


async def test_abort_without_broadcast_stops_the_run_on_b_by_its_poll(
    instance: Instances, source: SourceServer
) -> None:
    a = await instance("a")
    b = await instance("b", sync={"heartbeat_seconds": 0.2})
    cid, run_id = await _run_hung_on_b(b, a, source)
    started = time.perf_counter()
    # The state change of an abort alone, as if its broadcast had been lost.
    await a.store.mutate_connector(cid, lambda c: rules.abort(c, now=utcnow()))
    await asyncio.wait_for(b.wait_run(cid), 1.0)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"the run on B stopped after {elapsed:.3f}s"
    assert b.running_syncs == {}
    await _assert_aborted(a, cid, run_id, source, b.owner)


# --- an instance killed while indexing ---------------------------------------------------


@pytest.fixture
async def receiver() -> AsyncIterator[HoldingReceiver]:
    r = HoldingReceiver()
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (a unix socket path is limited to about 100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="syncd-") as root:
        yield Path(root)


async def test_killed_instance_documents_are_indexed_by_another(
    instance: Instances,
    postgres_dsn: str,
    redis_url: str,
    redis_prefix: str,
    receiver: HoldingReceiver,
    short_dir: Path,
) -> None:
    records, concurrency, batch = 30, 2, 5
    # B: a real process; its workers each hold a batch of 5 under a 3 s lease while the
    # webhook keeps them waiting.
    sections = shared_sections(postgres_dsn, redis_url, redis_prefix, "instance-b")
    sections["api"] = {"listen": f"unix:{short_dir / 'b.sock'}"}
    sections["workers"] = {"concurrency": concurrency, "batch_size": batch, "lease_seconds": 3}
    sections["log"] = {"format": "json"}
    config_path = short_dir / "b.toml"
    config_path.write_text(toml_text(sections), encoding="utf-8")
    notify = NotifySocket(short_dir / "notify.sock")
    b = SyncdProcess(config_path, {"NOTIFY_SOCKET": str(notify.path)})
    api = UnixApi(short_dir / "b.sock")
    try:
        async with SourceServer(records, page_size=10) as source:
            await b.start()
            try:
                await notify.wait_for("READY=1")
            except TimeoutError:
                pytest.fail("instance B did not get ready:\n" + "".join(b.output))
            c = await api.ok(
                "POST",
                "/connectors",
                {
                    "name": "items",
                    "source": http_source(source),
                    "indexer": {"type": "webhook", "url": receiver.url},
                },
            )
            cid = c["id"]
            await api.ok("POST", f"/connectors/{cid}/sync")
            await receiver.wait_held(concurrency)

            async def crawl_done() -> bool:
                connector = await api.ok("GET", f"/connectors/{cid}")
                return bool(connector["sync_status"] == "idle")

            await poll_until(crawl_done, "the crawl on instance B to end")
            runs = (await api.ok("GET", f"/connectors/{cid}/runs"))["data"]
            assert [r["outcome"] for r in runs] == ["succeeded"]
            held = await api.ok("GET", f"/connectors/{cid}/documents?status=running")
            b_held = sorted(d["external_id"] for d in held["data"])
            assert len(b_held) == concurrency * batch
            assert (await api.ok("GET", f"/connectors/{cid}"))["documents"] == {
                "pending": records - concurrency * batch,
                "running": concurrency * batch,
                "indexed": 0,
                "failed": 0,
                "deleted": 0,
            }

            assert await b.kill() == -signal.SIGKILL
            receiver.hold = False
            a = await instance("a", workers={"lease_seconds": 1, "batch_size": 10})
            await wait_indexed(a, cid, records, timeout=15.0)

            assert sorted(receiver.answered) == document_ids(source.records)
            docs, _ = await a.list_documents(cid, limit=100)
            attempts = {d.external_id: d.attempts for d in docs}
            # Claimed by B, expired with B's lease, claimed again by A: two attempts; the
            # others only ever by A.
            assert {e for e, n in attempts.items() if n == 2} == set(b_held)
            assert {e for e, n in attempts.items() if n == 1} == (
                set(document_ids(source.records)) - set(b_held)
            )
            assert (await a.document_counts(cid))[DocStatus.FAILED] == 0
    finally:
        await api.close()
        await b.kill()
        notify.close()
