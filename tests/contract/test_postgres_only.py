"""Behaviour of the PostgreSQL store that the shared contract suite cannot show.

Concurrent migrations, pooler mode, connection loss, session timeouts, error messages,
index use and row-level concurrency — all against a real PostgreSQL server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from syncd.errors import Fenced, NameConflict, NotFound, StoreError, StoreUnavailable
from syncd.jsontext import content_hash
from syncd.models import (
    Connector,
    DocStatus,
    DocumentInput,
    RunStart,
    RunTrigger,
    SyncStatus,
    Transition,
    new_id,
    utcnow,
)
from syncd.rules.records import document_inputs
from syncd.store import open_store
from syncd.store.postgres import PostgresStore, sql
from syncd.store.postgres import migrations as schema


async def wait_until(predicate: Callable[[], Awaitable[bool]]) -> None:
    """Wait for server-side state that has no event to await (a backend blocked on a lock)."""
    async with asyncio.timeout(10):
        # Polled: the state lives in another process (pg_locks / pg_stat_activity).
        while not await predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def make_connector(name: str = "tickets") -> Connector:
    now = utcnow()
    return Connector(
        id=new_id(),
        name=name,
        source={"type": "http", "url": "http://127.0.0.1:9/items", "params": {"limit": 10}},
        indexer={"type": "store"},
        created_at=now,
        updated_at=now,
    )


def start_run(run_id: str) -> Callable[[Connector], Transition]:
    def change(c: Connector) -> Transition:
        now = utcnow()
        return Transition(
            dataclasses.replace(
                c,
                sync_status=SyncStatus.RUNNING,
                run_id=run_id,
                sync_started_at=now,
                updated_at=now,
            ),
            start=RunStart(run_id, c.id, RunTrigger.MANUAL, now, "instance-a"),
        )

    return change


def docs(n: int, *, version: int = 0) -> list[DocumentInput]:
    out = []
    for i in range(n):
        payload = {"id": f"r{i:05d}", "v": version, "text": "é✓" * 5}
        out.append(DocumentInput(f"r{i:05d}", payload, content_hash(payload)))
    return out


@pytest.fixture
def store(postgres_store: PostgresStore) -> PostgresStore:
    return postgres_store  # this module's tests are PostgreSQL's alone


def database_of(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/")


# --- migrations ---------------------------------------------------------------------------


@pytest.fixture
async def fresh_admin(
    fresh_postgres_dsn: str,
) -> AsyncIterator[asyncpg.Connection[asyncpg.Record]]:
    conn: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(fresh_postgres_dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def test_two_stores_opening_a_fresh_database_at_once_migrate_once(
    fresh_postgres_dsn: str, fresh_admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    """Every migration from an empty database (the other tests start from a template
    database migrated once per session)."""
    admin = fresh_admin
    first, second = PostgresStore(fresh_postgres_dsn), PostgresStore(fresh_postgres_dsn)
    # Hold the migration lock so that both openers are provably inside open() at once.
    holder = admin.transaction()
    await holder.start()
    await admin.execute("SELECT pg_advisory_xact_lock($1)", schema.MIGRATION_LOCK_KEY)
    opening = [
        asyncio.create_task(first.open(), name="open-first"),
        asyncio.create_task(second.open(), name="open-second"),
    ]
    try:

        async def both_waiting() -> bool:
            waiting = await admin.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            return bool(waiting == 2)

        await wait_until(both_waiting)
        assert not any(task.done() for task in opening)
    finally:
        await holder.rollback()
    try:
        await asyncio.gather(*opening)
        versions = await admin.fetch(f"SELECT version FROM {schema.SCHEMA_VERSION_TABLE}")
        assert [r["version"] for r in versions] == [v for v, _ in schema.MIGRATIONS]
        created = await first.create_connector(make_connector())
        assert await second.get_connector(created.id) == created
    finally:
        await first.close()
        await second.close()


async def test_reopening_a_migrated_database_changes_nothing(
    postgres_dsn: str, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    for _ in range(2):
        s = PostgresStore(postgres_dsn)
        await s.open()
        await s.close()
    assert await admin.fetchval(f"SELECT count(*) FROM {schema.SCHEMA_VERSION_TABLE}") == len(
        schema.MIGRATIONS
    )


async def test_a_newer_schema_than_known_refuses_to_open(
    store: PostgresStore, postgres_dsn: str, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    await admin.execute(f"INSERT INTO {schema.SCHEMA_VERSION_TABLE} (version) VALUES (999)")
    newer = PostgresStore(postgres_dsn)
    with pytest.raises(StoreError, match="schema version 999 is newer"):
        await newer.open()


async def test_open_store_builds_a_postgres_store_from_its_url(postgres_dsn: str) -> None:
    s = open_store(postgres_dsn, max_size=2)
    assert isinstance(s, PostgresStore)
    await s.open()
    try:
        await s.ping()
    finally:
        await s.close()


# --- pooler mode --------------------------------------------------------------------------


async def _prepared_statements(s: PostgresStore) -> int:
    async with s._db.acquire() as conn:
        count: int = await conn.fetchval("SELECT count(*) FROM pg_prepared_statements")
    return count


async def _exercise(s: PostgresStore) -> None:
    c = await s.create_connector(make_connector())
    run_id = new_id()
    await s.mutate_connector(c.id, start_run(run_id))
    now = utcnow()
    ids = await s.commit_page(c.id, run_id, docs(3), next_cursor="n", source_state={}, now=now)
    claimed = (
        await s.claim_for_delivery(
            c.id, ids, lease_token="t", lease_until=now + timedelta(minutes=1), now=now
        )
    ).documents
    done = await s.finish_documents(
        c.id, "t", [(d.external_id, DocStatus.INDEXED, None) for d in claimed], now=now
    )
    assert done == 3
    assert (await s.document_counts(c.id))[DocStatus.INDEXED] == 3


@pytest.mark.parametrize(("cache_size", "named"), [(0, False), (None, True)])
async def test_statement_cache_size_zero_uses_no_named_prepared_statements(
    postgres_dsn: str, cache_size: int | None, named: bool
) -> None:
    # A transaction-mode pooler hands each transaction to any server session, where a named
    # statement prepared by another client's session does not exist.
    s = PostgresStore(postgres_dsn, statement_cache_size=cache_size, min_size=1, max_size=1)
    await s.open()
    try:
        await _exercise(s)
        assert (await _prepared_statements(s) > 0) is named
    finally:
        await s.close()


# --- connection loss, timeouts, errors ------------------------------------------------------


async def _hold_row_lock(
    admin: asyncpg.Connection[asyncpg.Record], connector_id: str
) -> asyncpg.transaction.Transaction:
    tx = admin.transaction()
    await tx.start()
    await admin.execute("SELECT 1 FROM connectors WHERE id = $1 FOR UPDATE", connector_id)
    return tx


def _blocked_backends(
    admin: asyncpg.Connection[asyncpg.Record], dsn: str
) -> Callable[[], Awaitable[list[int]]]:
    async def pids() -> list[int]:
        rows = await admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = 'syncd'"
            " AND wait_event_type = 'Lock'",
            database_of(dsn),
        )
        return [r["pid"] for r in rows]

    return pids


async def test_connection_terminated_mid_operation_is_a_store_error_then_the_pool_recovers(
    postgres_dsn: str, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    s = PostgresStore(postgres_dsn, min_size=1, max_size=2)
    await s.open()
    try:
        c = await s.create_connector(make_connector())
        tx = await _hold_row_lock(admin, c.id)
        try:
            mutating = asyncio.create_task(
                s.mutate_connector(c.id, start_run(new_id())), name="blocked-mutation"
            )
            blocked = _blocked_backends(admin, postgres_dsn)

            async def is_blocked() -> bool:
                return len(await blocked()) == 1

            await wait_until(is_blocked)
            (pid,) = await blocked()
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            with pytest.raises(StoreError, match="lost connection to PostgreSQL") as info:
                await mutating
            assert isinstance(info.value.__cause__, asyncpg.PostgresError | asyncpg.InterfaceError)
        finally:
            await tx.rollback()
        # The next calls work again: the pool replaced the dead connection.
        _, after = await s.mutate_connector(c.id, start_run("run-2"))
        assert after.run_id == "run-2"
        assert (await s.get_connector(c.id)) == after
    finally:
        await s.close()


async def _settings(conn: Any) -> dict[str, str]:
    names = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
    return {name: await conn.fetchval(f"SELECT current_setting('{name}')") for name in names}


async def test_session_timeouts_are_set(postgres_dsn: str) -> None:
    s = PostgresStore(
        postgres_dsn, statement_timeout=1.5, lock_timeout=0.25, idle_in_transaction_timeout=2
    )
    await s.open()
    try:
        async with s._db.acquire() as conn:
            settings = await _settings(conn)
            assert await conn.fetchval("SELECT current_setting('TimeZone')") == "UTC"
    finally:
        await s.close()
    assert settings == {
        "statement_timeout": "1500ms",
        "lock_timeout": "250ms",
        "idle_in_transaction_session_timeout": "2s",
    }


async def test_timeouts_of_none_keep_the_server_values(
    postgres_dsn: str, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    # For poolers that refuse these startup parameters: the role's settings apply instead.
    s = PostgresStore(
        postgres_dsn, statement_timeout=None, lock_timeout=None, idle_in_transaction_timeout=None
    )
    await s.open()
    try:
        async with s._db.acquire() as conn:
            settings = await _settings(conn)
    finally:
        await s.close()
    assert settings == await _settings(admin)


@pytest.mark.parametrize(
    ("lock_timeout", "statement_timeout", "message"),
    [(0.2, 30.0, "lock wait timed out"), (0.0, 0.2, "statement timed out")],
)
async def test_a_blocked_statement_times_out_as_a_store_error(
    postgres_dsn: str,
    admin: asyncpg.Connection[asyncpg.Record],
    lock_timeout: float,
    statement_timeout: float,
    message: str,
) -> None:
    s = PostgresStore(postgres_dsn, lock_timeout=lock_timeout, statement_timeout=statement_timeout)
    await s.open()
    try:
        c = await s.create_connector(make_connector())
        tx = await _hold_row_lock(admin, c.id)
        try:
            with pytest.raises(StoreError, match=message):
                await s.mutate_connector(c.id, start_run(new_id()))
        finally:
            await tx.rollback()
        # Nothing was written, and the session is usable again.
        assert (await s.get_connector(c.id)) == c
    finally:
        await s.close()


@pytest.mark.parametrize(
    ("dsn", "target"),
    [
        ("postgresql://syncd:s3cret-pw@127.0.0.1:1/nowhere", "127.0.0.1:1/nowhere"),
        ("postgresql://syncd:s3cret-pw@127.0.0.1:port/nowhere", "127.0.0.1/nowhere"),
        ("postgresql://syncd:s3cret-pw@127.0.0.1:1/db?sslmode=bogus", "127.0.0.1:1/db"),
    ],
)
async def test_connect_errors_name_the_server_but_not_the_password(dsn: str, target: str) -> None:
    s = PostgresStore(dsn, connect_timeout=2.0)
    with pytest.raises(StoreError) as info:
        await s.open()
    text = str(info.value)
    assert text.startswith(f"cannot connect to PostgreSQL at {target}: ")
    assert "s3cret-pw" not in text
    assert "s3cret-pw" not in repr(s)


async def test_unknown_database_is_a_store_error(postgres_dsn: str) -> None:
    base = postgres_dsn.rsplit("/", 1)[0]
    s = PostgresStore(f"{base}/syncd_no_such_database_{new_id()}")
    with pytest.raises(StoreError, match="does not exist"):
        await s.open()


async def test_calls_before_open_or_after_close_are_store_errors(store: PostgresStore) -> None:
    await store.close()
    with pytest.raises(StoreError, match="not open"):
        await store.ping()


# --- queries, types and row-level concurrency ----------------------------------------------


async def test_finish_reads_only_the_documents_it_finishes(
    store: PostgresStore, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    # Thousands of documents running (and as many dead index entries of finished ones, as
    # in a long first sync): finishing two of them probes two keys, it does not scan the
    # connector's running documents (which made each finish grow with the sync).
    c = await store.create_connector(make_connector())
    run_id = new_id()
    await store.mutate_connector(c.id, start_run(run_id))
    now = utcnow()
    ids = await store.commit_page(
        c.id, run_id, docs(3000), next_cursor=None, source_state={}, now=now
    )
    until = now + timedelta(minutes=1)
    await store.claim_for_delivery(c.id, ids, lease_token="L", lease_until=until, now=now)
    half = [(e, DocStatus.INDEXED, None) for e in ids[:1500]]
    assert await store.finish_documents(c.id, "L", half, now=now) == 1500
    tx = admin.transaction()
    await tx.start()
    try:
        # The generic plan: the one a prepared statement ends up with, knowing no ids.
        await admin.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        plan = await admin.fetchval(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql.FINISH_DOCUMENTS}",
            c.id,
            "L",
            now,
            [ids[2000], ids[2999]],
            ["indexed", "failed"],
            [None, "x"],
        )
    finally:
        await tx.rollback()  # leave the documents as they were
    top = json.loads(plan)[0]["Plan"]
    read = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
    assert read < 100, f"finishing 2 documents read {read} blocks"


async def test_payloads_are_stored_as_their_canonical_json_text(
    store: PostgresStore, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    c = await store.create_connector(make_connector())
    run_id = new_id()
    await store.mutate_connector(c.id, start_run(run_id))
    payloads: list[Any] = [
        {"t": "é✓\x00", "a": {"b": [1, 2.5, None, True]}, "n": 2**80},
        [1, "x"],
        "text",
        7,
    ]
    page, _ = document_inputs([{"id": f"d{i}", "p": p} for i, p in enumerate(payloads)])
    await store.commit_page(c.id, run_id, page, next_cursor=None, source_state={}, now=utcnow())
    assert (
        await admin.fetchval(
            "SELECT data_type FROM information_schema.columns "
            "WHERE table_name = 'documents' AND column_name = 'payload'"
        )
        == "text"
    )
    stored = await admin.fetch("SELECT payload FROM documents ORDER BY external_id")
    assert [r["payload"] for r in stored] == [d.payload_json for d in page]
    assert stored[0]["payload"] == (
        '{"id":"d0","p":{"a":{"b":[1,2.5,null,true]},"n":1208925819614629174706176,'
        '"t":"é✓\\u0000"}}'
    )
    for i, p in enumerate(payloads):
        got = await store.get_document(c.id, f"d{i}")
        assert got is not None
        assert got.payload == {"id": f"d{i}", "p": p}
        assert got.payload_json == page[i].payload_json
    source = await admin.fetchval("SELECT source FROM connectors WHERE id = $1", c.id)
    assert source.startswith("{")  # connector configuration stays jsonb


async def test_migration_2_keeps_jsonb_payloads_and_adds_run_columns(
    postgres_dsn: str, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    # A database as version 1 left it, with a jsonb payload holding a long number.
    # Every table later migrations create goes too (they are recreated by them).
    await admin.execute(
        "DROP TABLE documents, runs, crawl_pages, instances, connectors, "
        f"{schema.SCHEMA_VERSION_TABLE}"
    )
    await admin.execute(schema.MIGRATIONS[0][1])
    await admin.execute(schema.CREATE_VERSION_TABLE)
    await admin.execute(schema.RECORD_VERSION, 1)
    c = make_connector()
    now = utcnow()
    await admin.execute(
        "INSERT INTO connectors (id, name, source, indexer, created_at, updated_at, "
        "page_retries, page_retry_backoff, throttle_seconds, retry_on_status, status, "
        "sync_status) VALUES ($1, $2, '{}', '{}', $3, $3, 3, 2.0, 0.0, '{}', 'active', 'idle')",
        c.id,
        c.name,
        now,
    )
    await admin.execute(
        "INSERT INTO runs (id, connector_id, trigger, outcome, started_at) "
        "VALUES ('r1', $1, 'manual', 'succeeded', $2)",
        c.id,
        now,
    )
    await admin.execute(
        "INSERT INTO documents (connector_id, external_id, status, content_hash, payload, "
        "created_at, updated_at) VALUES ($1, 'a', 'indexed', 'h', "
        '\'{"n": 123456789012345678901234567890, "t": "x"}\'::jsonb, $2, $2)',
        c.id,
        now,
    )

    migrated = PostgresStore(postgres_dsn)
    await migrated.open()
    try:
        doc = await migrated.get_document(c.id, "a")
        assert doc is not None
        assert doc.payload == {"n": 123456789012345678901234567890, "t": "x"}
        run = await migrated.get_run("r1")
        assert run is not None
        assert (run.documents_rejected, run.rejections, run.note) == (0, (), None)
    finally:
        await migrated.close()
    versions = await admin.fetch(f"SELECT version FROM {schema.SCHEMA_VERSION_TABLE}")
    assert [r["version"] for r in versions] == [v for v, _ in schema.MIGRATIONS]


async def test_times_come_back_as_aware_utc(store: PostgresStore) -> None:
    c = await store.create_connector(make_connector())
    got = await store.get_connector(c.id)
    assert got is not None
    assert got.created_at == c.created_at
    assert got.created_at.utcoffset() == timedelta(0)


async def test_concurrent_claims_take_each_document_once(store: PostgresStore) -> None:
    c = await store.create_connector(make_connector())
    run_id = new_id()
    await store.mutate_connector(c.id, start_run(run_id))
    now = utcnow()
    ids = await store.commit_page(
        c.id, run_id, docs(200), next_cursor=None, source_state={}, now=now
    )
    # Every claimer asks for every document, in different orders.
    claims = await asyncio.gather(
        *(
            store.claim_for_delivery(
                c.id,
                ids if i % 2 else list(reversed(ids)),
                lease_token=f"worker-{i}",
                lease_until=now + timedelta(minutes=1),
                now=now,
            )
            for i in range(8)
        )
    )
    claimed = [d.external_id for claim in claims for d in claim.documents]
    assert sorted(claimed) == sorted(ids)
    assert all(
        d.attempts == 1 and d.payload is not None for claim in claims for d in claim.documents
    )


async def test_concurrent_page_commits_and_claims_do_not_deadlock(store: PostgresStore) -> None:
    # Pages re-pending documents (changed content) in one order while workers claim and
    # finish the same documents in another: rows are always locked in key order.
    c = await store.create_connector(make_connector())
    run_id = new_id()
    await store.mutate_connector(c.id, start_run(run_id))
    now = utcnow()
    ids = await store.commit_page(
        c.id, run_id, docs(300), next_cursor=None, source_state={}, now=now
    )

    async def commit(version: int) -> None:
        page = list(reversed(docs(300, version=version)))
        await store.commit_page(c.id, run_id, page, next_cursor=None, source_state={}, now=now)

    async def work(i: int) -> None:
        order = ids if i % 2 else list(reversed(ids))
        got = (
            await store.claim_for_delivery(
                c.id, order, lease_token=f"w{i}", lease_until=now + timedelta(minutes=1), now=now
            )
        ).documents
        await store.finish_documents(
            c.id, f"w{i}", [(d.external_id, DocStatus.INDEXED, None) for d in got], now=now
        )

    await asyncio.gather(*(commit(v) for v in range(1, 4)), *(work(i) for i in range(6)))
    counts = await store.document_counts(c.id)
    assert sum(counts.values()) == 300


async def test_fenced_commit_writes_nothing(store: PostgresStore) -> None:
    c = await store.create_connector(make_connector())
    await store.mutate_connector(c.id, start_run("current"))
    with pytest.raises(Fenced):
        await store.commit_page(
            c.id, "stale", docs(5), next_cursor="x", source_state={"k": 1}, now=utcnow()
        )
    assert (await store.document_counts(c.id))[DocStatus.PENDING] == 0
    after = await store.get_connector(c.id)
    assert after is not None
    assert after.resume_cursor is None
    assert after.progress.pages == 0


async def test_name_conflicts_and_missing_connectors(store: PostgresStore) -> None:
    a = await store.create_connector(make_connector("a"))
    await store.create_connector(make_connector("b"))
    with pytest.raises(NameConflict):
        await store.create_connector(make_connector("a"))
    with pytest.raises(NameConflict):
        await store.mutate_connector(a.id, lambda c: Transition(dataclasses.replace(c, name="b")))
    with pytest.raises(NotFound):
        await store.mutate_connector("missing", lambda c: Transition(c))
    assert (await store.get_connector(a.id)) == a


async def test_a_released_connection_costs_no_reset_round_trip(
    postgres_dsn: str, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    s = PostgresStore(postgres_dsn, min_size=1, max_size=1)
    await s.open()
    try:
        async with s._db.acquire() as conn:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
        connector = await s.create_connector(make_connector())
        assert await s.get_connector(connector.id) is not None
        # The backend's last statement is the store's read, not asyncpg's reset query.
        last = await admin.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
        assert "FROM connectors" in last and "RESET ALL" not in last
        # A transaction left open on a released connection is still rolled back.
        async with s._db.acquire() as conn:
            await conn.execute("BEGIN")
            await conn.execute("DELETE FROM connectors")
        assert await s.get_connector(connector.id) is not None
        async with s._db.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid
    finally:
        await s.close()


async def test_reads_for_clients_do_not_wait_for_the_main_pool(postgres_dsn: str) -> None:
    # Every connection of the main pool busy (page commits of many syncs, say): the API's
    # reads go to the read pool and are answered meanwhile.
    store = PostgresStore(postgres_dsn, max_size=1)
    await store.open()
    try:
        c = await store.create_connector(make_connector("read-pool"))
        holding, release = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with store._db.transaction("hold"):
                holding.set()
                await release.wait()

        holder = asyncio.create_task(hold())
        try:
            await holding.wait()
            async with asyncio.timeout(30):  # a deadlock guard only
                found = await store.get_connector_with_counts(c.id)
                listed = await store.list_connectors_with_counts()
                counts = await store.document_counts(c.id)
                runs = await store.list_runs(c.id)
            assert found is not None and found[0].name == "read-pool"
            assert [x.id for x, _ in listed] == [c.id]
            assert sum(counts.values()) == 0 and runs == []
            assert not holder.done()
        finally:
            release.set()
            await holder
    finally:
        await store.close()


async def test_a_server_that_refuses_connections_is_unavailable() -> None:
    """Nothing listens on the port: the store is unavailable (a run would wait, issue 23)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/syncd")
    with pytest.raises(StoreUnavailable, match="cannot connect to PostgreSQL"):
        await store.open()
