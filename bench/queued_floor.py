"""Hand-written loops that do the work the queued path must do, and nothing more: the floor
``sync_throughput.py --indexer queued`` compares syncd with, next to the bare loops.

DESIGN.md §1 and §7 ask of every document that goes through the queue three durable writes:
the page upsert, a claim (compare-and-set ``pending → running`` with a lease, in the store:
no lock lives only in process memory) and a finish (``running → indexed`` under that lease).
The bare loops of ``sync_throughput.py`` do the first only. These loops add the other two as
plainly as a script would: the crawl (read-ahead fetch, canonical JSON and SHA-256 per
record, one upsert per page into a table shaped like syncd's, its ids queued in batches) and
``workers`` senders that each take a batch, claim it with one ``UPDATE … RETURNING``, index
nothing, and finish it with one ``UPDATE``. No counters, no runs, no checkpoints, no fencing,
no abort, no leases renewed: what syncd adds on top of these is its own cost.

Each returns ``(documents, seconds until the crawl ended, seconds until every document was
indexed)`` and checks that every document was stored and indexed exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

import aiohttp
import asyncpg
import orjson
import redis.asyncio as aioredis

T = TypeVar("T")

Claimed = list[tuple[str, str, str]]
"""The documents a claim took: ``(external_id, content_hash, payload JSON text)``."""
Index = Callable[[Claimed], Awaitable[None]]
"""What a floor worker does with the documents it claimed (nothing, by default)."""


async def _nothing(documents: Claimed) -> None:
    return None


# syncd's SQLite documents table and status index (syncd/store/sqlite_migrations.py, migrations 1
# and 3), without the counters.
SQLITE_SCHEMA = (
    """
    CREATE TABLE documents (
        connector_id TEXT NOT NULL, external_id TEXT NOT NULL, status TEXT NOT NULL,
        content_hash TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
        error TEXT, attempts INTEGER NOT NULL DEFAULT 0, indexed_at TEXT, lease_token TEXT,
        lease_until TEXT, payload TEXT NOT NULL, op TEXT NOT NULL DEFAULT 'index',
        held INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (connector_id, external_id)
    )
    """,
    "CREATE INDEX documents_status ON documents (status, connector_id, external_id)",
)
SQLITE_UPSERT = """
INSERT INTO documents
    (connector_id, external_id, status, content_hash, created_at, updated_at, payload)
VALUES ('bare', ?, 'pending', ?, ?, ?, ?)
ON CONFLICT (connector_id, external_id) DO UPDATE SET
    status = 'pending', content_hash = excluded.content_hash, payload = excluded.payload,
    updated_at = excluded.updated_at
WHERE content_hash <> excluded.content_hash"""
SQLITE_CLAIM = """
UPDATE documents SET status = 'running', lease_token = ?, lease_until = ?,
    attempts = attempts + 1, updated_at = ?
WHERE status = 'pending' AND connector_id = 'bare'
    AND external_id IN (SELECT value FROM json_each(?))
RETURNING external_id, content_hash, payload"""
SQLITE_FINISH = """
UPDATE documents SET status = 'indexed', indexed_at = ?1, updated_at = ?1,
    lease_token = NULL, lease_until = NULL
WHERE status = 'running' AND connector_id = 'bare'
    AND external_id IN (SELECT value FROM json_each(?2)) AND lease_token = ?3"""

# The PostgreSQL table is sync_throughput's BARE_SCHEMA (syncd's shape); it is created by
# the caller in its own schema name.
PG_UPSERT = """
INSERT INTO {schema}.documents AS d
    (connector_id, external_id, status, content_hash, payload, created_at, updated_at)
SELECT 'bare', external_id, 'pending', content_hash, payload, $1, $1 FROM bare_staging
ON CONFLICT (connector_id, external_id) DO UPDATE SET
    status = 'pending', content_hash = excluded.content_hash, payload = excluded.payload,
    updated_at = excluded.updated_at
WHERE d.content_hash <> excluded.content_hash"""
# Driven by the ids, one locking index probe each, as syncd's claim and finish are
# (syncd/store/postgres_sql.py): on a table growing faster than autovacuum analyses it,
# "external_id = ANY($1) AND status = 'pending'", or a plain join with the ids, is planned as
# a scan of the connector's entries, and each batch reads the whole backlog (measured here:
# 650 documents/s at 200,000). A subquery with FOR UPDATE is never flattened into a join.
PG_CLAIM = """
WITH c AS (
    SELECT l.external_id
    FROM (SELECT DISTINCT unnest($1::text[]) AS external_id ORDER BY 1) AS i
    CROSS JOIN LATERAL (
        SELECT p.external_id FROM {schema}.documents AS p
        WHERE p.connector_id = 'bare' AND p.external_id = i.external_id
            AND p.status = 'pending'
        FOR UPDATE
    ) AS l
)
UPDATE {schema}.documents AS d SET status = 'running', lease_token = $2, lease_until = $3,
    attempts = d.attempts + 1, updated_at = $4
FROM c
WHERE d.connector_id = 'bare' AND d.external_id = c.external_id
RETURNING d.external_id, d.content_hash, d.payload"""
PG_FINISH = """
WITH c AS (
    SELECT l.external_id
    FROM (SELECT unnest($1::text[]) AS external_id ORDER BY 1) AS i
    CROSS JOIN LATERAL (
        SELECT p.external_id FROM {schema}.documents AS p
        WHERE p.connector_id = 'bare' AND p.external_id = i.external_id
            AND p.status = 'running' AND p.lease_token = $3
        FOR UPDATE
    ) AS l
)
UPDATE {schema}.documents AS d SET status = 'indexed', indexed_at = $2, updated_at = $2,
    lease_token = NULL, lease_until = NULL
FROM c
WHERE d.connector_id = 'bare' AND d.external_id = c.external_id"""
PG_STAGING = """
CREATE TEMPORARY TABLE bare_staging (
    external_id text COLLATE "C", content_hash text, payload text
) ON COMMIT DELETE ROWS"""

LEASE = timedelta(minutes=5)


async def read_ahead(
    session: aiohttp.ClientSession, url: str, out: asyncio.Queue[list[dict[str, Any]] | None]
) -> None:
    """Read ahead: fetch every page into ``out`` (one page waiting at most), then None."""
    cursor: str | None = None
    while True:
        params = {"cursor": cursor} if cursor else {}
        async with session.get(url + "/items", params=params) as resp:
            resp.raise_for_status()
            body = orjson.loads(await resp.read())
        await out.put(body["data"])
        cursor = body.get("next_cursor")
        if not cursor:
            break
    await out.put(None)


def _rows(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(external_id, content_hash, canonical JSON)`` per record, as syncd computes them."""
    sha256 = hashlib.sha256
    rows = []
    for rec in records:
        blob = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
        rows.append((str(rec["id"]), sha256(blob).hexdigest(), blob.decode()))
    return rows


async def _crawl_and_index(
    url: str,
    write_page: Callable[[list[tuple[str, str, str]]], Awaitable[None]],
    push: Callable[[list[str]], Awaitable[None]],
    worker: Callable[[], Coroutine[Any, Any, int]],
    workers: int,
    crawled: asyncio.Event,
) -> tuple[int, float, float]:
    """The crawl (read-ahead fetch, rows, ``write_page``, ``push`` of the page's ids) and
    ``workers`` copies of ``worker`` (each returns how many documents it finished), side by
    side. The workers end once the crawl has ended and the queue is drained."""
    pages: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue(maxsize=1)
    count = 0
    started = time.perf_counter()
    tasks = [asyncio.create_task(worker(), name=f"floor-worker:{i}") for i in range(workers)]
    async with aiohttp.ClientSession() as session:
        reader = asyncio.create_task(read_ahead(session, url, pages), name="floor-fetch")
        try:
            while (records := await pages.get()) is not None:
                rows = _rows(records)
                await write_page(rows)
                await push([r[0] for r in rows])
                count += len(rows)
            await reader
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
    crawl = time.perf_counter() - started
    crawled.set()
    finished = sum(await asyncio.gather(*tasks))
    indexed = time.perf_counter() - started
    if finished != count:
        raise SystemExit(f"queued floor: {count} crawled, {finished} indexed")
    return count, crawl, indexed


def _claim(conn: sqlite3.Connection, params: tuple[str, ...]) -> Callable[[], list[Any]]:
    return lambda: conn.execute(SQLITE_CLAIM, params).fetchall()


def _finish(conn: sqlite3.Connection, params: tuple[str, ...]) -> int:
    return conn.execute(SQLITE_FINISH, params).rowcount


async def sqlite_queued_floor(
    url: str, db: Path, *, workers: int, batch_size: int, index: Index = _nothing
) -> tuple[int, float, float]:
    """The SQLite floor: one connection on one writer thread (as syncd's), an in-process
    queue of id batches, ``workers`` senders that claim, ``index``, and finish."""
    conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "cache_size = -65536"):
        conn.execute(f"PRAGMA {pragma}")
    for statement in SQLITE_SCHEMA:
        conn.execute(statement)
    writer = ThreadPoolExecutor(1, thread_name_prefix="floor-sqlite")
    loop = asyncio.get_running_loop()

    def on_writer(fn: Callable[[], T]) -> Awaitable[T]:
        return loop.run_in_executor(writer, fn)

    def transaction(fn: Callable[[], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return out

    queue: asyncio.Queue[list[str]] = asyncio.Queue()
    crawled = asyncio.Event()

    async def write_page(rows: list[tuple[str, str, str]]) -> None:
        now = datetime.now(UTC).isoformat()
        params = [(ext, digest, now, now, text) for ext, digest, text in rows]
        await on_writer(lambda: transaction(lambda: conn.executemany(SQLITE_UPSERT, params)))

    async def push(ids: list[str]) -> None:
        for start in range(0, len(ids), batch_size):
            queue.put_nowait(ids[start : start + batch_size])

    async def worker() -> int:
        done = 0
        while True:
            if queue.empty():
                if crawled.is_set():
                    return done
                await asyncio.sleep(0.001)
                continue
            ids = orjson.dumps(queue.get_nowait()).decode()
            token = secrets.token_hex(8)
            now = datetime.now(UTC)
            claim = (token, (now + LEASE).isoformat(), now.isoformat(), ids)
            claimed: Claimed = await on_writer(functools.partial(transaction, _claim(conn, claim)))
            await index(claimed)
            held = orjson.dumps([r[0] for r in claimed]).decode()
            finish = (datetime.now(UTC).isoformat(), held, token)
            written = await on_writer(functools.partial(_finish, conn, finish))
            done += written

    try:
        return await _crawl_and_index(url, write_page, push, worker, workers, crawled)
    finally:
        writer.shutdown()
        conn.close()


async def postgres_queued_floor(
    url: str,
    dsn: str,
    redis_url: str,
    prefix: str,
    schema: str,
    *,
    workers: int,
    batch_size: int,
    index: Index = _nothing,
) -> tuple[int, float, float]:
    """The PostgreSQL + Redis floor: the crawl on a connection of its own (COPY into a
    temporary table, then the upsert, one transaction per page; one ``RPUSH`` of the page's
    ids), ``workers`` senders each on its own connection taking ``batch_size`` ids with one
    ``LPOP``, then claiming, ``index`` and finishing. The table ``{schema}.documents`` must
    exist (syncd's shape, payloads as text)."""
    crawl_conn = await asyncpg.connect(dsn)
    pool = await asyncpg.create_pool(dsn, min_size=workers, max_size=workers)
    client = aioredis.Redis.from_url(redis_url)
    key = f"{prefix}:{schema}:q"
    upsert = PG_UPSERT.format(schema=schema)
    claim_sql = PG_CLAIM.format(schema=schema)
    finish_sql = PG_FINISH.format(schema=schema)
    crawled = asyncio.Event()
    try:
        await crawl_conn.execute(PG_STAGING)

        async def write_page(rows: list[tuple[str, str, str]]) -> None:
            async with crawl_conn.transaction():
                await crawl_conn.copy_records_to_table("bare_staging", records=rows)
                await crawl_conn.execute(upsert, datetime.now(UTC))

        async def push(ids: list[str]) -> None:
            await client.rpush(key, *ids)

        async def worker() -> int:
            done = 0
            async with pool.acquire() as conn:
                while True:
                    ids = cast(list[bytes] | None, await client.lpop(key, batch_size))
                    if not ids:
                        if crawled.is_set() and not await client.llen(key):
                            return done
                        await asyncio.sleep(0.001)
                        continue
                    token = secrets.token_hex(8)
                    now = datetime.now(UTC)
                    names = [i.decode() for i in ids]
                    rows = await conn.fetch(claim_sql, names, token, now + LEASE, now)
                    claimed = [(r[0], r[1], r[2]) for r in rows]
                    await index(claimed)
                    held = [r[0] for r in claimed]
                    status = await conn.execute(finish_sql, held, datetime.now(UTC), token)
                    done += int(status.split()[-1])

        return await _crawl_and_index(url, write_page, push, worker, workers, crawled)
    finally:
        await client.delete(key)
        await client.aclose()
        await pool.close()
        await crawl_conn.close()
