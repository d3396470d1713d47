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

That is ``delivery="store"`` (the default): the claim is held by the store. With
``delivery="queue"`` (DESIGN.md §7, "Delivery") the queue holds it instead
(``floor_queues.py``: one atomic move of a batch into an in-flight set with a deadline, renewed
while a worker holds it, swept back when it passes; a document queued at most once at a time),
and the store is written twice per document: the page upsert, and a finish that is a
compare-and-set on the content the worker indexed (``pending → indexed`` only where the
content hash is still the one it read). A worker reads the documents it took from the store
(a read, no write) and acknowledges them in the queue after the finish; one that found other
content queues it again.

Each returns ``(documents, seconds until the crawl ended, seconds until every document was
indexed)`` and checks that every document was stored and indexed exactly once (with the
queue: delivered exactly once, every store row ``indexed``, the queue's structures empty).

Run on its own, it measures both floors side by side (medians of ``--runs``, alternating)::

    python bench/queued_floor.py --backend sqlite --records 100000
    python bench/queued_floor.py --backend postgres --records 100000
    python bench/queued_floor.py --backend both --delivery queue   # the queue floor only
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import os
import resource
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import aiohttp
import asyncpg
import orjson
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CpuMeter,
    checkpoint,
    create_bare_schema,
    proc_cpu,
    read_ahead,
    throwaway_database,
    throwaway_prefix,
    wait_for_source,
    worker_shape,
)
from floor_queues import MemoryClaimQueue, RedisClaimQueue, self_check
from sourceserver import SourceProcess

from syncd.config.sections import WorkersConfig
from syncd.daemon.heap import tune_collector

T = TypeVar("T")
Delivery = Literal["store", "queue"]
"""Who holds the claim: the store (a compare-and-set under a lease) or the queue."""

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

# The PostgreSQL table is common.py's BARE_SCHEMA (syncd's shape); it is created by the
# caller in its own schema name.
PG_UPSERT = """
INSERT INTO {schema}.documents AS d
    (connector_id, external_id, status, content_hash, payload, created_at, updated_at)
SELECT 'bare', external_id, 'pending', content_hash, payload, $1, $1 FROM bare_staging
ON CONFLICT (connector_id, external_id) DO UPDATE SET
    status = 'pending', content_hash = excluded.content_hash, payload = excluded.payload,
    updated_at = excluded.updated_at
WHERE d.content_hash <> excluded.content_hash"""
# Driven by the ids, one locking index probe each, as syncd's claim and finish are
# (syncd/store/postgres/sql.py): on a table growing faster than autovacuum analyses it,
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

# --delivery queue: the worker's read of what it took (by key, no write), and the finish, a
# compare-and-set on the content it read. SQLite probes the status index by
# (status, connector_id, external_id) for each pair, as the plan of the store floor's claim.
SQLITE_READ = """
SELECT external_id, content_hash, payload FROM documents
WHERE connector_id = 'bare' AND status = 'pending'
    AND external_id IN (SELECT value FROM json_each(?))"""
SQLITE_FINISH_CAS = """
UPDATE documents SET status = 'indexed', indexed_at = ?1, updated_at = ?1
WHERE connector_id = 'bare' AND status = 'pending'
    AND (external_id, content_hash) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?2))
RETURNING external_id"""
# PostgreSQL: driven by the ids, one index probe each, as PG_CLAIM and PG_FINISH (the LIMIT
# keeps the read's subquery from being flattened into a join, as FOR UPDATE does the finish's).
PG_READ = """
SELECT l.external_id, l.content_hash, l.payload
FROM unnest($1::text[]) AS i (external_id)
CROSS JOIN LATERAL (
    SELECT p.external_id, p.content_hash, p.payload FROM {schema}.documents AS p
    WHERE p.connector_id = 'bare' AND p.external_id = i.external_id AND p.status = 'pending'
    LIMIT 1
) AS l"""
PG_FINISH_CAS = """
WITH c AS (
    SELECT l.external_id
    FROM (
        SELECT * FROM unnest($1::text[], $2::text[]) AS u (external_id, content_hash) ORDER BY 1
    ) AS i
    CROSS JOIN LATERAL (
        SELECT p.external_id FROM {schema}.documents AS p
        WHERE p.connector_id = 'bare' AND p.external_id = i.external_id
            AND p.content_hash = i.content_hash AND p.status = 'pending'
        FOR UPDATE
    ) AS l
)
UPDATE {schema}.documents AS d SET status = 'indexed', indexed_at = $3, updated_at = $3
FROM c
WHERE d.connector_id = 'bare' AND d.external_id = c.external_id
RETURNING d.external_id"""
SWEEP_EVERY = 1.0
"""Seconds between two sweeps of expired deliveries (a product's period; here none expire)."""


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
    url: str,
    db: Path,
    *,
    workers: int,
    batch_size: int,
    index: Index = _nothing,
    delivery: Delivery = "store",
) -> tuple[int, float, float]:
    """The SQLite floor: one connection on one writer thread (as syncd's), an in-process
    queue of id batches, ``workers`` senders that claim, ``index``, and finish. With
    ``delivery="queue"``: a :class:`MemoryClaimQueue`, senders that take a batch from it,
    read it on a read-only connection and thread of its own, ``index``, finish with the
    compare-and-set and acknowledge."""
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

    if delivery == "queue":
        try:
            return await _sqlite_queue_delivery(
                url, db, conn, on_writer, write_page, workers, batch_size, index
            )
        finally:
            writer.shutdown()
            conn.close()
    try:
        return await _crawl_and_index(url, write_page, push, worker, workers, crawled)
    finally:
        writer.shutdown()
        conn.close()


def _finish_cas(conn: sqlite3.Connection, params: tuple[str, str]) -> list[Any]:
    return conn.execute(SQLITE_FINISH_CAS, params).fetchall()


@contextlib.asynccontextmanager
async def _keepers(
    held: dict[int, list[str]],
    renew: Callable[[list[str], float], Awaitable[int]],
    sweep: Callable[[], Awaitable[int]],
) -> Any:
    """The queue's two background duties while the floor runs: renew the deliveries the
    workers hold every third of the lease, sweep expired ones every ``SWEEP_EVERY``."""
    lease = LEASE.total_seconds()

    async def renewer() -> None:
        while True:
            await asyncio.sleep(lease / 3)
            for ids in list(held.values()):
                await renew(ids, lease)

    async def sweeper() -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            await sweep()

    tasks = [
        asyncio.create_task(renewer(), name="floor-renew"),
        asyncio.create_task(sweeper(), name="floor-sweep"),
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _check_queue_floor(count: int, delivered: int, indexed: int, sizes: dict[str, int]) -> None:
    """Every document delivered once, every stored row indexed, nothing left queued."""
    if delivered != count or indexed != count or any(sizes.values()):
        raise SystemExit(
            f"queue floor: {count} crawled, {delivered} delivered, {indexed} rows indexed, "
            f"left in the queue: {sizes}"
        )


async def _sqlite_queue_delivery(
    url: str,
    db: Path,
    conn: sqlite3.Connection,
    on_writer: Callable[[Callable[[], Any]], Awaitable[Any]],
    write_page: Callable[[list[tuple[str, str, str]]], Awaitable[None]],
    workers: int,
    batch_size: int,
    index: Index,
) -> tuple[int, float, float]:
    """The SQLite floor with the claim in a :class:`MemoryClaimQueue`."""
    reader = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    reader.execute("PRAGMA query_only = ON")
    reading = ThreadPoolExecutor(1, thread_name_prefix="floor-sqlite-read")
    loop = asyncio.get_running_loop()
    queue = MemoryClaimQueue()
    lease = LEASE.total_seconds()
    crawled = asyncio.Event()
    held: dict[int, list[str]] = {}
    delivered = 0

    async def push(ids: list[str]) -> None:
        queue.push(ids)

    async def renew(ids: list[str], seconds: float) -> int:
        return queue.renew(ids, seconds)

    async def sweep() -> int:
        return queue.sweep()

    async def worker() -> int:
        nonlocal delivered
        done = 0
        while True:
            ids = queue.claim(batch_size, lease)
            if not ids:
                if crawled.is_set() and queue.idle():
                    return done
                await asyncio.sleep(0.001)
                continue
            held[id(ids)] = ids
            try:
                claimed: Claimed = await loop.run_in_executor(
                    reading, _read, reader, orjson.dumps(ids).decode()
                )
                delivered += len(claimed)
                await index(claimed)
                pairs = orjson.dumps([(r[0], r[1]) for r in claimed]).decode()
                params = (datetime.now(UTC).isoformat(), pairs)
                finished = await on_writer(functools.partial(_finish_cas, conn, params))
            finally:
                del held[id(ids)]
            written = {r[0] for r in finished}
            again = [r[0] for r in claimed if r[0] not in written]  # changed meanwhile
            queue.ack([i for i in ids if i not in again], again)
            done += len(written)

    try:
        async with _keepers(held, renew, sweep):
            count, crawl, indexed = await _crawl_and_index(
                url, write_page, push, worker, workers, crawled
            )
        rows = reader.execute("SELECT count(*) FROM documents WHERE status = 'indexed'")
        _check_queue_floor(count, delivered, rows.fetchone()[0], queue.sizes())
        return count, crawl, indexed
    finally:
        reading.shutdown()
        reader.close()


def _read(conn: sqlite3.Connection, ids: str) -> list[Any]:
    return conn.execute(SQLITE_READ, (ids,)).fetchall()


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
    delivery: Delivery = "store",
) -> tuple[int, float, float]:
    """The PostgreSQL + Redis floor: the crawl on a connection of its own (COPY into a
    temporary table, then the upsert, one transaction per page; one ``RPUSH`` of the page's
    ids), ``workers`` senders each on its own connection taking ``batch_size`` ids with one
    ``LPOP``, then claiming, ``index`` and finishing. The table ``{schema}.documents`` must
    exist (syncd's shape, payloads as text). With ``delivery="queue"``: a
    :class:`RedisClaimQueue` (the push one script per page, the take one script per batch),
    senders that read what they took, ``index``, finish with the compare-and-set and
    acknowledge (one script)."""
    crawl_conn = await asyncpg.connect(dsn)
    pool = await asyncpg.create_pool(dsn, min_size=workers, max_size=workers)
    client = aioredis.Redis.from_url(redis_url)
    key = f"{prefix}:{schema}:q"
    upsert = PG_UPSERT.format(schema=schema)
    claim_sql = PG_CLAIM.format(schema=schema)
    finish_sql = PG_FINISH.format(schema=schema)
    crawled = asyncio.Event()
    if delivery == "queue":
        try:
            await crawl_conn.execute(PG_STAGING)
            return await _postgres_queue_delivery(
                url,
                crawl_conn,
                pool,
                client,
                f"{prefix}:{schema}",
                schema,
                workers,
                batch_size,
                index,
            )
        finally:
            await client.aclose()
            await pool.close()
            await crawl_conn.close()
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


async def _postgres_queue_delivery(
    url: str,
    crawl_conn: asyncpg.Connection,
    pool: asyncpg.Pool,
    client: aioredis.Redis,
    prefix: str,
    schema: str,
    workers: int,
    batch_size: int,
    index: Index,
) -> tuple[int, float, float]:
    """The PostgreSQL floor with the claim in a :class:`RedisClaimQueue`."""
    queue = RedisClaimQueue(client, prefix)
    upsert = PG_UPSERT.format(schema=schema)
    read_sql = PG_READ.format(schema=schema)
    finish_sql = PG_FINISH_CAS.format(schema=schema)
    lease = LEASE.total_seconds()
    crawled = asyncio.Event()
    held: dict[int, list[str]] = {}
    delivered = 0

    async def write_page(rows: list[tuple[str, str, str]]) -> None:
        async with crawl_conn.transaction():
            await crawl_conn.copy_records_to_table("bare_staging", records=rows)
            await crawl_conn.execute(upsert, datetime.now(UTC))

    async def push(ids: list[str]) -> None:
        await queue.push(ids)

    async def worker() -> int:
        nonlocal delivered
        done = 0
        async with pool.acquire() as conn:
            while True:
                ids = await queue.claim(batch_size, lease)
                if not ids:
                    if crawled.is_set() and await queue.idle():
                        return done
                    await asyncio.sleep(0.001)
                    continue
                held[id(ids)] = ids
                try:
                    rows = await conn.fetch(read_sql, ids)
                    claimed = [(r[0], r[1], r[2]) for r in rows]
                    delivered += len(claimed)
                    await index(claimed)
                    finished = await conn.fetch(
                        finish_sql,
                        [r[0] for r in claimed],
                        [r[1] for r in claimed],
                        datetime.now(UTC),
                    )
                finally:
                    del held[id(ids)]
                written = {r[0] for r in finished}
                again = [r[0] for r in claimed if r[0] not in written]  # changed meanwhile
                await queue.ack([i for i in ids if i not in again], again)
                done += len(written)

    try:
        async with _keepers(held, queue.renew, queue.sweep):
            count, crawl, indexed = await _crawl_and_index(
                url, write_page, push, worker, workers, crawled
            )
        rows = await crawl_conn.fetchval(
            f"SELECT count(*) FROM {schema}.documents WHERE status = 'indexed'"
        )
        _check_queue_floor(count, delivered, rows, await queue.sizes())
        return count, crawl, indexed
    finally:
        await queue.delete()


async def postgres_floor(
    args: argparse.Namespace,
    url: str,
    dsn: str,
    prefix: str,
    meter: CpuMeter,
    cpu: dict[str, float],
) -> tuple[int, float, float]:
    """The PostgreSQL queued floor with syncd's worker shape, in schema ``floor`` of ``dsn``
    (created here, before the CPU of the run is measured into ``cpu``)."""
    concurrency, batch = worker_shape(args)
    await create_bare_schema(dsn, "floor")
    with meter.measure(cpu):
        return await postgres_queued_floor(
            url, dsn, args.redis_url, prefix, "floor", workers=concurrency, batch_size=batch
        )


# --- both floors side by side -----------------------------------------------------------------


class ServerCpu:
    """CPU seconds of every ``postgres`` and ``redis-server`` process, sampled from ``/proc``
    every ``every`` seconds on a thread, so that the floor's pool backends, which exit when the
    floor ends, are counted up to their last sample (a process first seen counts from zero)."""

    def __init__(self, every: float = 0.2) -> None:
        self._every = every
        self._seen: dict[int, tuple[str, float]] = {}
        self._base: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="floor-cpu", daemon=True)

    def _scan(self) -> dict[int, tuple[str, float]]:
        out = {}
        for entry in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                comm = (entry / "comm").read_text().strip()
                if comm == "postgres" or comm.startswith("redis-server"):
                    name = "postgres" if comm == "postgres" else "redis"
                    out[int(entry.name)] = (name, proc_cpu(int(entry.name)))
        return out

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self._seen.update(self._scan())

    def __enter__(self) -> ServerCpu:
        self._base = {pid: cpu for pid, (_, cpu) in self._scan().items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._seen.update(self._scan())

    def totals(self) -> dict[str, float]:
        out = {"postgres": 0.0, "redis": 0.0}
        for pid, (name, cpu) in self._seen.items():
            out[name] += cpu - self._base.get(pid, 0.0)
        return out


def _busy() -> str:
    """The processes using the most CPU right now, besides this one (``ps``)."""
    out = subprocess.run(
        ["ps", "-eo", "pid,pcpu,etime,args", "--sort=-pcpu"], capture_output=True, text=True
    ).stdout.splitlines()[1:]
    mine = str(os.getpid())
    rows = [line.split(None, 3) for line in out]
    rows = [r for r in rows if len(r) == 4 and r[0] != mine and float(r[1]) >= 5.0][:6]
    return "; ".join(f"{r[3][:70]} ({r[1]} %)" for r in rows) or "nothing above 5 % CPU"


async def _one_floor(
    args: Any, backend: str, delivery: Delivery, source_url: str, where: dict[str, str], run: int
) -> dict[str, float]:
    """One floor on a fresh table: rates, CPU µs per document, load average."""
    schema = f"floor_{delivery}_{run}"
    if backend == "postgres":
        await create_bare_schema(where["dsn"], schema)
        await checkpoint(where["dsn"])
    before = resource.getrusage(resource.RUSAGE_SELF)
    with ServerCpu() as servers:
        if backend == "postgres":
            n, crawl, indexed = await postgres_queued_floor(
                source_url,
                where["dsn"],
                args.redis_url,
                where["prefix"],
                schema,
                workers=args.workers,
                batch_size=args.batch_size,
                delivery=delivery,
            )
        else:
            n, crawl, indexed = await sqlite_queued_floor(
                source_url,
                Path(where["dir"]) / f"{schema}.db",
                workers=args.workers,
                batch_size=args.batch_size,
                delivery=delivery,
            )
    after = resource.getrusage(resource.RUSAGE_SELF)
    load = os.getloadavg()[0]
    if backend == "postgres":
        conn = await asyncpg.connect(where["dsn"])
        try:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        finally:
            await conn.close()
    client_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    cpu = servers.totals()
    return {
        "crawl": n / crawl,
        "indexed": n / indexed,
        "load": load,
        "client_us": client_cpu / n * 1e6,
        "postgres_us": cpu["postgres"] / n * 1e6,
        "redis_us": cpu["redis"] / n * 1e6,
    }


async def _self_check(args: Any, where: dict[str, str]) -> None:
    """``floor_queues.self_check`` on the queue the floor will use."""
    if "prefix" not in where:
        await self_check(MemoryClaimQueue())
        return
    client = aioredis.Redis.from_url(args.redis_url)
    queue = RedisClaimQueue(client, f"{where['prefix']}:self-check")
    try:
        await self_check(queue)
    finally:
        await queue.delete()
        await client.aclose()


async def _compare(args: Any, backend: str) -> None:
    """``--runs`` rounds of the floors of ``--delivery``, alternating which goes first."""
    pair = "PostgreSQL + Redis" if backend == "postgres" else "SQLite + memory://"
    print(
        f"\n== {pair}: {args.records} records of ~1 KB in pages of {args.page_size}, "
        f"{args.workers} workers, batches of {args.batch_size}, {args.runs} runs",
        flush=True,
    )
    print(f"   busy at start: {_busy()}", flush=True)
    results: dict[str, list[dict[str, float]]] = {d: [] for d in args.delivery}
    async with contextlib.AsyncExitStack() as stack:
        where: dict[str, str] = {}
        if backend == "postgres":
            where["dsn"] = await stack.enter_async_context(throwaway_database(args.postgres_dsn))
            where["prefix"] = await stack.enter_async_context(throwaway_prefix(args.redis_url))
        else:
            where["dir"] = stack.enter_context(tempfile.TemporaryDirectory())
        if "queue" in args.delivery:
            await _self_check(args, where)
        source = stack.enter_context(SourceProcess(args.records, args.page_size))
        await wait_for_source(source.url)
        for run in range(args.runs):
            order = args.delivery if run % 2 == 0 else args.delivery[::-1]
            for delivery in order:
                r = await _one_floor(args, backend, delivery, source.url, where, run)
                results[delivery].append(r)
                print(
                    f"   run {run + 1} {delivery:>5}: crawl {r['crawl']:7.0f}/s, everything "
                    f"indexed {r['indexed']:7.0f}/s; CPU µs/doc client {r['client_us']:.0f}, "
                    f"postgres {r['postgres_us']:.0f}, redis {r['redis_us']:.0f}; "
                    f"load {r['load']:.2f}",
                    flush=True,
                )
    print(f"   busy at end: {_busy()}")
    med = statistics.median
    print(f"   medians of {args.runs}:")
    for delivery, rs in results.items():
        loads = [r["load"] for r in rs]
        print(
            f"   {delivery:>5} floor: crawl {med(r['crawl'] for r in rs):7.0f} docs/s, "
            f"everything indexed {med(r['indexed'] for r in rs):7.0f} docs/s; CPU µs/doc "
            f"client {med(r['client_us'] for r in rs):.0f}, postgres "
            f"{med(r['postgres_us'] for r in rs):.0f}, redis {med(r['redis_us'] for r in rs):.0f}"
            f" (load {min(loads):.2f} to {max(loads):.2f})"
        )
    if "store" in results and "queue" in results:
        for what in ("crawl", "indexed"):
            q = med(r[what] for r in results["queue"])
            s = med(r[what] for r in results["store"])
            label = "everything indexed" if what == "indexed" else "crawl"
            print(f"   ratio queue floor / store floor, {label}: {q / s:.2f}")
        per_run = [
            q["indexed"] / s["indexed"]
            for q, s in zip(results["queue"], results["store"], strict=True)
        ]
        print(
            "   per-run ratios, everything indexed: "
            + ", ".join(f"{x:.2f}" for x in per_run)
            + f" (rule: build it if >= 1.3 on both pairs); load now {os.getloadavg()}"
        )


def main() -> None:
    """Both floors side by side, medians of ``--runs``."""
    defaults = WorkersConfig()
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument(
        "--delivery",
        choices=("store", "queue"),
        nargs="+",
        default=["store", "queue"],
        help="the floors to run: store (the claim in the store, today's) and/or queue",
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=defaults.concurrency)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--postgres-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    tune_collector()  # as syncd run and sync_throughput.py do
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    for backend in backends:
        asyncio.run(_compare(args, backend))


if __name__ == "__main__":
    main()
