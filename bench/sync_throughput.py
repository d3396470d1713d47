"""Documents/s of a full sync, side by side with a bare loop (and dlt), plus abort latency.

    python bench/sync_throughput.py                      # embedded: SQLite + in-process queue
    python bench/sync_throughput.py --records 50000      # a quicker run
    python bench/sync_throughput.py --backend postgres   # PostgreSQL + Redis, bare loop, dlt
    python bench/sync_throughput.py --backend postgres --profile /tmp/prof   # cProfile dumps
    python bench/sync_throughput.py --indexer webhook --batch-size 100       # webhook, a sink

The source is a local HTTP server in its own process serving pre-rendered pages of ~1 KB
records. Embedded: the bare loop is aiohttp + ``sqlite3.executemany`` in a thread. PostgreSQL
(a throwaway database and Redis key prefix per run, removed afterwards): (a) the best bare
loop (read-ahead fetch, COPY into a temporary table + ``INSERT … ON CONFLICT``, one ``RPUSH``
per page), syncd through ``Daemon``, and (b) dlt's ``rest_api`` source in a subprocess
(``bench/dlt_baseline.py``). Abort latency: ``abort_sync`` → the run's task ended, for a run
blocked on a page request that never answers. ``--indexer webhook``: the webhook indexer
against a local sink (``bench/webhooksink.py``) next to a hand-written loop POSTing the same
documents one per request at the same concurrency, medians of ``--rounds``.
``bench/README.md`` has the details and figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib.util
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BARE_SCHEMA,
    INDEXER,
    CpuMeter,
    Profiler,
    checkpoint,
    create_bare_schema,
    describe_cpu,
    embedded_config,
    postgres_config,
    rate_line,
    read_ahead,
    safe_dsn,
    source_body,
    syncd_run,
    throwaway_database,
    throwaway_prefix,
    wait_for_source,
    worker_shape,
)
from queued_floor import (
    Claimed,
    Index,
    postgres_floor,
    postgres_queued_floor,
    sqlite_queued_floor,
)
from sourceserver import SourceProcess
from webhooksink import SinkProcess

from syncd.daemon import Daemon
from syncd.daemon.heap import tune_collector
from syncd.observability.logs import configure_logging

HERE = Path(__file__).resolve().parent


# --- embedded backend -----------------------------------------------------------------------


async def bare_sqlite(url: str, db: Path) -> tuple[int, float]:
    """aiohttp + sqlite3 executemany in a thread: the floor to compare with."""
    conn = sqlite3.connect(db, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(
        "CREATE TABLE docs (external_id TEXT PRIMARY KEY, payload TEXT NOT NULL, status TEXT)"
    )

    def write(rows: list[tuple[str, str]]) -> None:
        with conn:
            conn.executemany(
                "INSERT INTO docs (external_id, payload, status) VALUES (?, ?, 'pending') "
                "ON CONFLICT (external_id) DO UPDATE SET payload = excluded.payload",
                rows,
            )

    count = 0
    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        cursor: str | None = None
        while True:
            params = {"cursor": cursor} if cursor else {}
            async with session.get(url + "/items", params=params) as resp:
                body = await resp.json()
            rows = [(r["id"], json.dumps(r)) for r in body["data"]]
            await asyncio.to_thread(write, rows)
            count += len(rows)
            cursor = body.get("next_cursor")
            if not cursor:
                break
    elapsed = time.perf_counter() - started
    conn.close()
    return count, elapsed


def floor_lines(n: int, floor: tuple[int, float, float], crawl: float, indexed: float) -> None:
    """The queued floor's rates, and syncd's queued path against it."""
    floor_n, floor_crawl, floor_indexed = floor
    print(rate_line("queued floor crawl (upsert + queue, claim + finish beside):", n, floor_crawl))
    print(rate_line("queued floor, everything indexed:", floor_n, floor_indexed))
    print(f"ratio syncd crawl / floor crawl:            {floor_crawl / crawl:5.2f}")
    print(f"ratio syncd everything indexed / floor:     {floor_indexed / indexed:5.2f}")


async def abort_latencies(daemon: Daemon, url: str, n: int) -> list[float]:
    c = await daemon.create_connector({"name": "hang", "source": source_body(url, "/hang")})
    out: list[float] = []
    for _ in range(n):
        await daemon.trigger_sync(c.id)
        await asyncio.sleep(0.02)  # let the page request reach the server
        started = time.perf_counter()
        await daemon.abort_sync(c.id)
        await daemon.wait_run(c.id)
        out.append(time.perf_counter() - started)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def describe_aborts(aborts: list[float]) -> str:
    return (
        f"abort latency over {len(aborts)} aborts: p50 {pct(aborts, 0.5) * 1000:.1f} ms, "
        f"p99 {pct(aborts, 0.99) * 1000:.1f} ms, max {max(aborts) * 1000:.1f} ms "
        f"(target p99 < 100 ms); mean {statistics.mean(aborts) * 1000:.1f} ms"
    )


async def run_embedded(args: argparse.Namespace) -> None:
    with SourceProcess(args.records, args.page_size) as source, tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        await wait_for_source(source.url)
        n, bare = await bare_sqlite(source.url, tmp / "bare.db")
        meter = CpuMeter(source.pid)
        floor_cpu: dict[str, float] = {}
        syncd_cpu: dict[str, float] = {}
        floor = None
        if args.indexer == "queued":
            concurrency, batch = worker_shape(args)
            with meter.measure(floor_cpu):
                floor = await sqlite_queued_floor(
                    source.url, tmp / "floor.db", workers=concurrency, batch_size=batch
                )
        async with Daemon(embedded_config(tmp, args), serve_api=False) as daemon:
            with meter.measure(syncd_cpu):
                crawl, indexed = await syncd_run(daemon, source.url, n, Profiler(args.profile))
            aborts = await abort_latencies(daemon, source.url, args.aborts)

    bare_rate, crawl_rate, indexed_rate = n / bare, n / crawl, n / indexed
    print(f"records: {n} in pages of {args.page_size} (~1 KB each)")
    print(f"bare loop (aiohttp + sqlite3.executemany): {bare_rate:10.0f} docs/s")
    print(f"syncd crawl (SQLite + memory queue):       {crawl_rate:10.0f} docs/s")
    print(f"syncd crawl + everything indexed:          {indexed_rate:10.0f} docs/s")
    print(f"ratio crawl / bare: {crawl_rate / bare_rate:.2f} (target >= 0.7)")
    print(f"ratio everything indexed / bare: {indexed_rate / bare_rate:.2f}")
    if floor is not None:
        floor_lines(n, floor, crawl, indexed)
        print(f"ratio floor crawl / bare: {floor[0] / floor[1] / bare_rate:.2f}")
        print(f"ratio floor everything indexed / bare: {floor[0] / floor[2] / bare_rate:.2f}")
        # CPU is steadier than wall time on a shared machine: this process's (loop and the
        # SQLite writer's thread) and the source server's, per document.
        for phase, cpu in (("floor", floor_cpu), ("syncd", syncd_cpu)):
            print(
                f"CPU µs/doc {phase}: this process {cpu['client'] / n * 1e6:5.1f}, "
                f"source {cpu['source'] / n * 1e6:5.1f}"
            )
    print(describe_aborts(aborts))


# --- PostgreSQL + Redis backend -------------------------------------------------------------


BARE_STAGING = """
CREATE TEMPORARY TABLE bare_staging (
    external_id text COLLATE "C", content_hash text, payload jsonb
) ON COMMIT DELETE ROWS"""

BARE_UPSERT = """
INSERT INTO bare.documents AS d
    (connector_id, external_id, status, content_hash, payload, created_at, updated_at)
SELECT $1, external_id, 'pending', content_hash, payload, $2, $2 FROM bare_staging
ON CONFLICT (connector_id, external_id) DO UPDATE SET
    status = 'pending', content_hash = excluded.content_hash, payload = excluded.payload,
    updated_at = excluded.updated_at
WHERE d.content_hash <> excluded.content_hash"""


async def bare_postgres(
    url: str, dsn: str, redis_url: str, prefix: str, meter: CpuMeter, cpu: dict[str, float]
) -> tuple[int, float]:
    """The best hand-written loop: read-ahead fetch, COPY + upsert, one RPUSH per page.
    CPU is measured into ``cpu`` while its connection is still open."""
    conn = await asyncpg.connect(dsn)
    client = aioredis.Redis.from_url(redis_url)
    try:
        await conn.execute(BARE_SCHEMA)
        await conn.execute(BARE_STAGING)
        queue_key = f"{prefix}:bare:q"
        pages: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue(maxsize=1)

        count = 0
        sha256 = hashlib.sha256
        started = time.perf_counter()
        async with aiohttp.ClientSession() as session, contextlib.AsyncExitStack() as stack:
            stack.enter_context(meter.measure(cpu))
            reader = asyncio.create_task(read_ahead(session, url, pages), name="bare-fetch")
            try:
                while (records := await pages.get()) is not None:
                    rows = []
                    for rec in records:
                        blob = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
                        rows.append((rec["id"], sha256(blob).hexdigest(), blob.decode()))
                    async with conn.transaction():
                        await conn.copy_records_to_table("bare_staging", records=rows)
                        await conn.execute(BARE_UPSERT, "bare", datetime.now(UTC))
                    await client.rpush(queue_key, *(r[0] for r in rows))
                    count += len(rows)
                await reader
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        elapsed = time.perf_counter() - started
        stored = await conn.fetchval("SELECT count(*) FROM bare.documents")
        queued = await client.llen(queue_key)
        if stored != count or queued != count:
            raise SystemExit(f"bare loop: {count} fetched, {stored} stored, {queued} queued")
        return count, elapsed
    finally:
        await conn.close()
        await client.aclose()


# The physical limit: the same pages appended with COPY, nothing looked up or indexed.
COPY_SCHEMA = """
CREATE SCHEMA bare_copy;
CREATE TABLE bare_copy.documents (
    connector_id text NOT NULL, external_id text NOT NULL, status text NOT NULL,
    content_hash text NOT NULL, payload text NOT NULL, created_at timestamptz NOT NULL
);
"""
COPY_COLUMNS = ("connector_id", "external_id", "status", "content_hash", "payload", "created_at")


async def bare_postgres_copy(
    url: str, dsn: str, meter: CpuMeter, cpu: dict[str, float]
) -> tuple[int, float]:
    """An append-only loop: read-ahead fetch, canonical JSON and hash per record, one COPY
    per page into an unindexed table (no upsert, no queue): the floor of any idempotent
    store path. CPU is measured into ``cpu``."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(COPY_SCHEMA)
        pages: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue(maxsize=1)

        count = 0
        sha256 = hashlib.sha256
        started = time.perf_counter()
        async with aiohttp.ClientSession() as session, contextlib.AsyncExitStack() as stack:
            stack.enter_context(meter.measure(cpu))
            reader = asyncio.create_task(read_ahead(session, url, pages), name="copy-fetch")
            try:
                while (records := await pages.get()) is not None:
                    now = datetime.now(UTC)
                    rows = []
                    for rec in records:
                        blob = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
                        rows.append(
                            (
                                "bare",
                                rec["id"],
                                "pending",
                                sha256(blob).hexdigest(),
                                blob.decode(),
                                now,
                            )
                        )
                    await conn.copy_records_to_table(
                        "documents", schema_name="bare_copy", columns=COPY_COLUMNS, records=rows
                    )
                    count += len(rows)
                await reader
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        elapsed = time.perf_counter() - started
        stored = await conn.fetchval("SELECT count(*) FROM bare_copy.documents")
        if stored != count:
            raise SystemExit(f"copy loop: {count} fetched, {stored} stored")
        return count, elapsed
    finally:
        await conn.close()


def ensure_dlt() -> str | None:
    """``None`` when dlt is importable (installing it if needed), else why it is not."""
    if importlib.util.find_spec("dlt") is not None:
        return None
    print("dlt is not installed: installing dlt[postgres] for this benchmark", flush=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "dlt[postgres]"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"pip install 'dlt[postgres]' failed: {tail[0]}"
    importlib.invalidate_caches()
    if importlib.util.find_spec("dlt") is None:
        return "dlt is still not importable after pip install"
    return None


async def dlt_run(url: str, dsn: str, write_disposition: str) -> tuple[int, float] | str:
    """Run ``bench/dlt_baseline.py``: records and seconds, or why it failed."""
    env = dict(os.environ, RUNTIME__DLTHUB_TELEMETRY="false")
    with tempfile.TemporaryDirectory(prefix="dlt-cwd-") as cwd:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "dlt_baseline.py"),
            "--url",
            url,
            "--dsn",
            dsn,
            "--dataset",
            "dlt_bench",
            "--write-disposition",
            write_disposition,
            cwd=cwd,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await proc.communicate()
        except BaseException:
            proc.kill()
            await proc.wait()
            raise
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        return f"exit code {proc.returncode}: {lines[-1] if lines else 'no output'}"
    result = json.loads(out.decode().strip().splitlines()[-1])
    return int(result["records"]), float(result["seconds"])


async def run_postgres(args: argparse.Namespace) -> None:
    dlt_problem = "skipped (--no-dlt)" if args.no_dlt else ensure_dlt()
    meter_cpu: dict[str, dict[str, float]] = {}
    async with (
        throwaway_database(args.postgres_dsn) as dsn,
        throwaway_prefix(args.redis_url) as prefix,
    ):
        with SourceProcess(args.records, args.page_size) as source:
            meter = CpuMeter(source.pid)
            await wait_for_source(source.url)

            n, bare = await bare_postgres(
                source.url, dsn, args.redis_url, prefix, meter, meter_cpu.setdefault("bare", {})
            )
            await checkpoint(dsn)
            copy_n, copy_seconds = await bare_postgres_copy(
                source.url, dsn, meter, meter_cpu.setdefault("copy", {})
            )
            await checkpoint(dsn)
            floor = None
            if args.indexer == "queued":
                floor = await postgres_floor(
                    args, source.url, dsn, prefix, meter, meter_cpu.setdefault("floor", {})
                )
                await checkpoint(dsn)

            config = postgres_config(dsn, args.redis_url, prefix, args)
            async with Daemon(config, serve_api=False) as daemon:
                with meter.measure(meter_cpu.setdefault("syncd", {})):
                    crawl, indexed = await syncd_run(daemon, source.url, n, Profiler(args.profile))
                aborts = await abort_latencies(daemon, source.url, args.aborts)
            await checkpoint(dsn)

            dlt: tuple[int, float] | str | None = dlt_problem
            if dlt_problem is None:
                with meter.measure(meter_cpu.setdefault("dlt", {})):
                    dlt = await dlt_run(source.url, dsn, args.dlt_write_disposition)

    bare_rate, crawl_rate, indexed_rate = n / bare, n / crawl, n / indexed
    print(
        f"records: {n} in pages of {args.page_size} (~1 KB each); PostgreSQL "
        f"{safe_dsn(args.postgres_dsn)} (throwaway database), Redis {args.redis_url}"
    )
    print(rate_line("(a) bare loop (read-ahead, COPY + upsert, RPUSH per page):", n, bare))
    print(rate_line("(c) append-only loop (read-ahead, COPY, no index):", copy_n, copy_seconds))
    print(rate_line("syncd crawl (PostgreSQL + Redis):", n, crawl))
    print(rate_line("syncd crawl + everything indexed:", n, indexed))
    dlt_rate: float | None = None
    if isinstance(dlt, tuple):
        dlt_n, dlt_seconds = dlt
        dlt_rate = dlt_n / dlt_seconds
        label = f"(b) dlt rest_api -> PostgreSQL ({args.dlt_write_disposition}):"
        print(rate_line(label, dlt_n, dlt_seconds))
        if dlt_n != n:
            print(f"    warning: dlt loaded {dlt_n} records, expected {n}")
    else:
        print(f"(b) dlt: not measured: {dlt}")
    print(f"ratio syncd crawl / bare:           {crawl_rate / bare_rate:5.2f} (target >= 0.6)")
    copy_rate = copy_n / copy_seconds
    print(f"ratio syncd crawl / append-only:    {crawl_rate / copy_rate:5.2f} (target >= 0.6)")
    print(f"ratio everything indexed / bare:    {indexed_rate / bare_rate:5.2f}")
    walls = {"bare": bare, "copy": copy_seconds, "syncd": indexed}
    if floor is not None:
        floor_lines(n, floor, crawl, indexed)
        print(f"ratio floor crawl / bare:           {floor[0] / floor[1] / bare_rate:5.2f}")
        print(f"ratio floor everything indexed / bare: {floor[0] / floor[2] / bare_rate:5.2f}")
        walls["floor"] = floor[2]
    if dlt_rate is not None:
        print(f"ratio syncd crawl / dlt:            {crawl_rate / dlt_rate:5.2f} (target >= 3)")
        print(f"ratio everything indexed / dlt:     {indexed_rate / dlt_rate:5.2f} (target >= 1.5)")
    print(describe_aborts(aborts))
    if isinstance(dlt, tuple):
        walls["dlt"] = dlt[1]
    for phase, cpu in meter_cpu.items():
        print(f"{phase:>6}: {describe_cpu(cpu, walls.get(phase, 0.0))}")


# --- webhook indexer ------------------------------------------------------------------------


async def sink_call(sink: SinkProcess, method: str, path: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, sink.base + path) as resp,
    ):
        resp.raise_for_status()
        return await resp.json() if resp.status == 200 else {}


async def check_sink(sink: SinkProcess, phase: str, n: int) -> None:
    """Every document arrived at the sink exactly once; then clear its counts."""
    stats = await sink_call(sink, "GET", "/stats")
    if stats["distinct"] != n or stats["documents"] != n:
        raise SystemExit(f"{phase}: the sink received {stats}, expected {n} documents once each")
    await sink_call(sink, "POST", "/reset")


async def wait_for_sink(sink: SinkProcess) -> None:
    for _ in range(600):
        try:
            await sink_call(sink, "GET", "/stats")
            return
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)
    raise SystemExit("the webhook sink did not start")


async def bare_webhook(url: str, sink_url: str, connector_id: str, concurrency: int) -> float:
    """The hand-written loop: read-ahead page fetches, and ``concurrency`` senders POSTing the
    documents one per request, each body the webhook's (``op``, ``connector_id``,
    ``external_id``, ``content_hash`` of the canonical JSON, ``payload``). Seconds taken."""
    bodies: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=2000)
    sha256 = hashlib.sha256
    headers = {"Content-Type": "application/json"}

    async def fetch_all(session: aiohttp.ClientSession) -> None:
        cursor: str | None = None
        while True:
            params = {"cursor": cursor} if cursor else {}
            async with session.get(url + "/items", params=params) as resp:
                resp.raise_for_status()
                body = orjson.loads(await resp.read())
            for rec in body["data"]:
                blob = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
                doc = {
                    "op": "upsert",
                    "connector_id": connector_id,
                    "external_id": rec["id"],
                    "content_hash": sha256(blob).hexdigest(),
                    "payload": rec,
                }
                await bodies.put(orjson.dumps(doc))
            cursor = body.get("next_cursor")
            if not cursor:
                break
        for _ in range(concurrency):
            await bodies.put(None)

    async def send(session: aiohttp.ClientSession) -> None:
        while (body := await bodies.get()) is not None:
            async with session.post(sink_url, data=body, headers=headers) as resp:
                await resp.read()
                if not 200 <= resp.status < 300:
                    raise SystemExit(f"hand-written loop: HTTP {resp.status} from the sink")

    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(fetch_all(session), *(send(session) for _ in range(concurrency)))
    return time.perf_counter() - started


@dataclass
class Round:
    """One round of the webhook comparison: seconds and CPU of each phase."""

    hand: float
    crawl: float
    indexed: float
    hand_cpu: dict[str, float]
    syncd_cpu: dict[str, float]
    floor: float
    floor_cpu: dict[str, float]


FloorRun = Callable[[int, Index], Awaitable[tuple[int, float, float]]]
"""Round number, what a floor worker does with a claimed batch -> the queued floor's result
(``queued_floor``) on a fresh table."""


def webhook_floor_index(session: aiohttp.ClientSession, sink_url: str, batch_size: int) -> Index:
    """The queued floor's worker step for the webhook: POST the claimed documents as syncd's
    webhook indexer does (one per POST, or ``batch_size`` per POST), the payload spliced in
    as the JSON text the store returned."""
    headers = {"Content-Type": "application/json"}

    async def post(body: bytes) -> None:
        async with session.post(sink_url, data=body, headers=headers) as resp:
            await resp.read()
            if not 200 <= resp.status < 300:
                raise SystemExit(f"queued floor: HTTP {resp.status} from the sink")

    def item(doc: tuple[str, str, str]) -> dict[str, Any]:
        external_id, digest, payload = doc
        return {
            "connector_id": "bare",
            "external_id": external_id,
            "content_hash": digest,
            "payload": orjson.Fragment(payload),
        }

    async def index(documents: Claimed) -> None:
        if batch_size == 1:
            for doc in documents:
                await post(orjson.dumps({"op": "upsert", **item(doc)}))
            return
        for start in range(0, len(documents), batch_size):
            chunk = [item(d) for d in documents[start : start + batch_size]]
            await post(orjson.dumps({"op": "upsert", "connector_id": "bare", "documents": chunk}))

    return index


async def webhook_rounds(
    daemon: Daemon,
    args: argparse.Namespace,
    source_url: str,
    sink: SinkProcess,
    n: int,
    floor: FloorRun,
) -> list[Round]:
    """``args.rounds`` times: the hand-written loop, the queued floor posting to the sink,
    then syncd's webhook indexer, on the same documents; the sink checked after each
    phase."""
    meter = CpuMeter(None, sink.pid)
    concurrency = daemon.config.workers.concurrency
    indexer = {"type": "webhook", "url": sink.url, "batch_size": args.batch_size}
    rounds: list[Round] = []
    for i in range(args.rounds):
        hand_cpu: dict[str, float] = {}
        with meter.measure(hand_cpu):
            hand = await bare_webhook(source_url, sink.url, f"hand-{i}", concurrency)
        await check_sink(sink, "hand-written loop", n)
        floor_cpu: dict[str, float] = {}
        async with aiohttp.ClientSession() as session:
            with meter.measure(floor_cpu):
                index = webhook_floor_index(session, sink.url, args.batch_size)
                _, _, floor_seconds = await floor(i, index)
        await check_sink(sink, "queued floor", n)
        syncd_cpu: dict[str, float] = {}
        profiler = Profiler(args.profile if i == 0 else None)
        with meter.measure(syncd_cpu):
            crawl, indexed = await syncd_run(
                daemon, source_url, n, profiler, indexer=indexer, name=f"bench-{i}"
            )
        await check_sink(sink, "syncd", n)
        rounds.append(Round(hand, crawl, indexed, hand_cpu, syncd_cpu, floor_seconds, floor_cpu))
    return rounds


def report_webhook(
    args: argparse.Namespace, n: int, bare: float, bare_label: str, rounds: list[Round]
) -> None:
    med = statistics.median
    hand = med(r.hand for r in rounds)
    crawl = med(r.crawl for r in rounds)
    indexed = med(r.indexed for r in rounds)
    floor = med(r.floor for r in rounds)
    bare_rate, hand_rate, indexed_rate = n / bare, n / hand, n / indexed
    print(
        f"records: {n} in pages of {args.page_size} (~1 KB each); webhook batch_size "
        f"{args.batch_size}; medians of {len(rounds)} rounds (bare storage loop: one run)"
    )
    print(rate_line(bare_label, n, bare))
    print(rate_line("hand-written loop, one POST per document:", n, hand))
    print(rate_line("queued floor (claim + finish in the store, POSTs):", n, floor))
    print(rate_line("syncd crawl (webhook indexer):", n, crawl))
    print(rate_line("syncd crawl + everything indexed:", n, indexed))
    target = "(target >= 0.9 at batch_size 1)" if args.batch_size == 1 else ""
    print(f"ratio everything indexed / hand-written loop: {indexed_rate / hand_rate:5.2f} {target}")
    target = "(target >= 0.7 at batch_size 100)" if args.batch_size > 1 else ""
    print(f"ratio everything indexed / bare storage loop: {indexed_rate / bare_rate:5.2f} {target}")
    print(f"ratio everything indexed / queued floor:      {indexed_rate * floor / n:5.2f}")
    print(f"ratio queued floor / hand-written loop:       {n / floor / hand_rate:5.2f}")
    for label, key in (("hand", "hand_cpu"), ("floor", "floor_cpu"), ("syncd", "syncd_cpu")):
        cpu = {k: med(getattr(r, key)[k] for r in rounds) for k in rounds[0].hand_cpu}
        per_doc = ", ".join(f"{k} {v / n * 1e6:.0f}" for k, v in cpu.items() if v >= 0.05)
        print(f"{label:>6}: CPU µs per document (medians): {per_doc}")
    print(f"load average (1, 5, 15 min) after the run: {os.getloadavg()}")


async def run_webhook(args: argparse.Namespace) -> None:
    """The webhook indexer against a local sink, next to a hand-written POST loop and the
    backend's bare storage loop."""
    with (
        SourceProcess(args.records, args.page_size) as source,
        SinkProcess() as sink,
        tempfile.TemporaryDirectory() as d,
    ):
        await wait_for_source(source.url)
        await wait_for_sink(sink)
        if args.backend == "postgres":
            async with (
                throwaway_database(args.postgres_dsn) as dsn,
                throwaway_prefix(args.redis_url) as prefix,
            ):
                n, bare = await bare_postgres(
                    source.url, dsn, args.redis_url, prefix, CpuMeter(None), {}
                )
                await checkpoint(dsn)
                concurrency, batch = worker_shape(args)

                async def pg_floor(i: int, index: Index) -> tuple[int, float, float]:
                    await create_bare_schema(dsn, f"floor{i}")
                    return await postgres_queued_floor(
                        source.url,
                        dsn,
                        args.redis_url,
                        prefix,
                        f"floor{i}",
                        workers=concurrency,
                        batch_size=batch,
                        index=index,
                    )

                config = postgres_config(dsn, args.redis_url, prefix, args)
                async with Daemon(config, serve_api=False) as daemon:
                    rounds = await webhook_rounds(daemon, args, source.url, sink, n, pg_floor)
            label = "(a) bare loop (read-ahead, COPY + upsert, RPUSH per page):"
        else:
            n, bare = await bare_sqlite(source.url, Path(d) / "bare.db")
            concurrency, batch = worker_shape(args)

            async def sqlite_floor(i: int, index: Index) -> tuple[int, float, float]:
                db = Path(d) / f"floor-{i}.db"
                return await sqlite_queued_floor(
                    source.url, db, workers=concurrency, batch_size=batch, index=index
                )

            async with Daemon(embedded_config(Path(d), args), serve_api=False) as daemon:
                rounds = await webhook_rounds(daemon, args, source.url, sink, n, sqlite_floor)
            label = "bare loop (aiohttp + sqlite3.executemany):"
    report_webhook(args, n, bare, label, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("embedded", "postgres"), default="embedded")
    parser.add_argument(
        "--records", type=int, help="records to sync (default 200,000; webhook: 50,000)"
    )
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--aborts", type=int, default=50)
    parser.add_argument(
        "--postgres-dsn",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="server on which a throwaway database is created (postgres backend)",
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--workers", type=int, help="syncd [workers] concurrency")
    parser.add_argument("--worker-batch-size", type=int, help="syncd [workers] batch_size")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=1,
        help="the webhook indexer's batch_size (--indexer webhook): documents per POST",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of the webhook comparison (medians)"
    )
    parser.add_argument("--no-dlt", action="store_true", help="do not run the dlt baseline")
    parser.add_argument("--dlt-write-disposition", choices=("merge", "append"), default="merge")
    parser.add_argument("--profile", type=Path, help="write cProfile dumps of syncd here")
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="keep CPython's collector settings (syncd run tunes them: syncd.daemon.heap)",
    )
    parser.add_argument(
        "--indexer",
        choices=("store", "queued", "webhook"),
        default="store",
        help="store: the built-in indexer (indexed on commit); queued: a no-op indexer that "
        "goes through the queue and the workers; webhook: the webhook indexer against a local "
        "sink, next to a hand-written loop POSTing the same documents",
    )
    args = parser.parse_args()
    if not args.default_gc:
        # As syncd run does; for every phase of the process alike, bare loops included.
        tune_collector()
    INDEXER["type"] = args.indexer
    configure_logging("warning", "console")
    if args.indexer == "webhook":
        if args.records is None:
            args.records = 50_000  # one POST per document: a smaller default run
        asyncio.run(run_webhook(args))
    elif args.backend == "postgres":
        args.records = args.records or 200_000
        asyncio.run(run_postgres(args))
    else:
        args.records = args.records or 200_000
        asyncio.run(run_embedded(args))


if __name__ == "__main__":
    main()
