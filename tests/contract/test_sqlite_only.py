"""Behaviour of the SQLite store that the shared contract suite cannot show: reads on
connections of their own, which never queue behind the writer."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from syncd.errors import StoreError, StoreUnavailable
from syncd.models import DocStatus
from syncd.store.sqlite import SQLiteStore

from .factories import T0, make_connector

# A deadlock guard only: a read that waited for the writer would never return.
_GUARD = 30.0


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "syncd.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_reads_do_not_wait_for_a_write_transaction(sqlite_store: SQLiteStore) -> None:
    store = sqlite_store
    connector = await store.create_connector(make_connector("before"))
    in_transaction, release = asyncio.Event(), asyncio.Event()

    async def hold_a_write() -> None:
        # The writer connection and its lock stay taken until `release`.
        async with store._db.transaction() as tx:
            await tx.execute("UPDATE connectors SET name = 'after' WHERE id = ?", connector.id)
            in_transaction.set()
            await release.wait()

    writer = asyncio.create_task(hold_a_write())
    try:
        await in_transaction.wait()
        async with asyncio.timeout(_GUARD):
            got = await store.get_connector(connector.id)
            listed = await store.list_connectors()
            counts = await store.document_counts(connector.id)
            totals = await store.connector_totals()
            runs = await store.list_runs(connector.id)
        # The uncommitted write is invisible; everything committed before it is there.
        assert got is not None and got.name == "before"
        assert [c.name for c in listed] == ["before"]
        assert counts == dict.fromkeys(DocStatus, 0)
        assert sum(totals.values()) == 1
        assert runs == []
        assert not writer.done()
    finally:
        release.set()
        await writer
    # Committed before the read started: seen.
    after = await store.get_connector(connector.id)
    assert after is not None and after.name == "after"


async def test_concurrent_reads_share_the_read_connections(sqlite_store: SQLiteStore) -> None:
    store = sqlite_store
    created = [await store.create_connector(make_connector(f"c{i}")) for i in range(5)]
    got = await asyncio.gather(*(store.get_connector(c.id) for c in created * 4))
    assert [g.id if g else None for g in got] == [c.id for c in created * 4]


async def test_a_read_connection_refuses_writes(sqlite_store: SQLiteStore) -> None:
    with pytest.raises(StoreError, match="readonly database"):
        async with sqlite_store._db.read() as s:
            await s.execute("DELETE FROM connectors")


async def test_memory_database_reads_on_its_one_connection() -> None:
    store = SQLiteStore(":memory:")
    await store.open()
    try:
        connector = await store.create_connector(make_connector("memory", created_at=T0))
        got = await store.get_connector(connector.id)
        assert got is not None and got.name == "memory"
        assert await store.document_counts(connector.id) == dict.fromkeys(DocStatus, 0)
    finally:
        await store.close()


async def test_closed_store_reads_fail_cleanly(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "syncd.db")
    await store.open()
    await store.close()
    with pytest.raises(StoreError, match="not open"):
        await store.get_connector("nope")
    await store.open()  # reopening opens the read connections again
    try:
        assert await store.list_connectors() == []
    finally:
        await store.close()


async def test_quick_reads_see_only_committed_rows(sqlite_store: SQLiteStore) -> None:
    # The counted reads (the API's) run on the loop's own read connection.
    store = sqlite_store
    connector = await store.create_connector(make_connector("before"))
    in_transaction, release = asyncio.Event(), asyncio.Event()

    async def hold_a_write() -> None:
        async with store._db.transaction() as tx:
            await tx.execute("UPDATE connectors SET name = 'after' WHERE id = ?", connector.id)
            in_transaction.set()
            await release.wait()

    writer = asyncio.create_task(hold_a_write())
    try:
        await in_transaction.wait()
        found = await store.get_connector_with_counts(connector.id)
        listed = await store.list_connectors_with_counts()
        assert found is not None and found[0].name == "before"
        assert [c.name for c, _ in listed] == ["before"]
    finally:
        release.set()
        await writer
    found = await store.get_connector_with_counts(connector.id)
    assert found is not None and found[0].name == "after"


class _BusyOnce:
    """The loop's read connection, refusing its next statement as SQLite does when the
    database is busy for a reader (a checkpoint resetting the WAL, a process in exclusive
    locking mode): a fault injected into the real connection, not a stand-in for it."""

    def __init__(self, db: sqlite3.Connection, code: int) -> None:
        self.db, self.code, self.refused = db, code, 0

    def execute(self, query: str, params: Any = ()) -> sqlite3.Cursor:
        if not self.refused:
            self.refused += 1
            busy = sqlite3.OperationalError("database is locked")
            busy.sqlite_errorcode = self.code
            raise busy
        return self.db.execute(query, params)


# SQLITE_BUSY, SQLITE_LOCKED and extended codes of them (SQLITE_BUSY_RECOVERY: a WAL being
# recovered; SQLITE_BUSY_SNAPSHOT).
@pytest.mark.parametrize("code", [5, 6, 261, 517])
async def test_a_busy_database_sends_quick_reads_to_the_read_threads(
    sqlite_store: SQLiteStore, code: int
) -> None:
    store = sqlite_store
    connector = await store.create_connector(make_connector("busy"))
    real = store._db.quick.attach(None)
    assert real is not None
    busy = _BusyOnce(real, code)
    store._db.quick.attach(busy)  # type: ignore[arg-type]
    try:
        found = await store.get_connector_with_counts(connector.id)
    finally:
        store._db.quick.attach(real)
    assert busy.refused == 1
    assert found is not None and found[0].name == "busy"


async def test_other_errors_of_quick_reads_are_store_errors(sqlite_store: SQLiteStore) -> None:
    with pytest.raises(StoreError, match="no such table"):
        await sqlite_store._db.quick.fetch_all("SELECT * FROM nowhere")


async def test_quick_reads_refuse_writes(sqlite_store: SQLiteStore) -> None:
    with pytest.raises(StoreError, match="readonly database"):
        await sqlite_store._db.quick.fetch_all("DELETE FROM connectors")


async def test_a_file_locked_beyond_the_busy_timeout_is_unavailable(tmp_path: Path) -> None:
    """Another process holding the write lock longer than ``busy_timeout``: the write fails as
    unavailable (a run waits for it, issue 23), and goes through once the lock is gone."""
    store = SQLiteStore(tmp_path / "syncd.db", busy_timeout=0.1)
    await store.open()
    other = sqlite3.connect(tmp_path / "syncd.db", isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable, match="database is locked"):
            await store.create_connector(make_connector("locked"))
        other.execute("ROLLBACK")
        created = await store.create_connector(make_connector("locked"))
        assert created.name == "locked"
    finally:
        other.close()
        await store.close()
