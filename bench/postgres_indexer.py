"""Documents/s of a full sync, everything indexed through the ``postgres`` indexer, next to
syncd's queued path with an indexer that does nothing, and a hand-written COPY + upsert loop
into the same table.

    python bench/postgres_indexer.py                        # SQLite + in-process queue
    python bench/postgres_indexer.py --records 50000 --rounds 3
    python bench/postgres_indexer.py --backend postgres     # syncd's store on PostgreSQL + Redis

Each round runs, one after the other, against the same local source server (its own process,
pre-rendered pages of ~1 KB records ``{"id", "title", "updated_at", "body"}``):

- **queued, doing nothing**: a new connector whose indexer takes batches and does nothing
  (it reads payloads, as the ``postgres`` indexer does): syncd's own cost of crawl, store,
  queue, claim and finish;
- **postgres indexer**: a new connector with ``{"type": "postgres"}`` into a fresh table of a
  throwaway target database, full text on (``--no-full-text``: off): the indexer's cost on
  top of the queued path. Both syncd phases map ``title`` and ``body`` to the document's
  title and text (a ``document`` mapping);
- **hand-written loop**: read-ahead fetch, canonical JSON and SHA-256 per record, one
  ``COPY`` into a temporary table and one ``INSERT … SELECT … ON CONFLICT DO UPDATE`` per page
  into a table of the same shape (generated ``tsvector`` and GIN index included).

Every phase is timed from the start of the crawl to the last document indexed (rows counted
in the target table). Medians of ``--rounds``. Printed: the rates, the ratio postgres
indexer / queued (target >= 0.8: the indexer adds little to the queue's cost) and postgres
indexer / hand-written loop, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    rate_line,
    read_ahead,
    safe_dsn,
    source_body,
    throwaway_database,
    throwaway_prefix,
    wait_for_source,
)
from sourceserver import SourceProcess

from syncd.config import Config
from syncd.daemon import Daemon
from syncd.daemon.heap import tune_collector
from syncd.indexers.base import BatchFailures
from syncd.indexers.postgres.table import TableSpec, create_statements
from syncd.models import DocStatus, Document
from syncd.observability.logs import configure_logging


class NothingIndexer:
    """Takes batches, reads nothing of them, indexes nothing."""

    def __init__(self, config: object, context: object) -> None:
        self.batch_size = int(config.get("batch_size", 500)) if isinstance(config, Mapping) else 500

    async def index(self, document: Document) -> None:
        return None

    async def index_batch(self, documents: Sequence[Document]) -> BatchFailures:
        return None


#: Both syncd phases map each record's title and body to the document's title and text.
MAPPING = {"title": "title", "text": "body"}


def config(args: argparse.Namespace, tmp: Path, dsn: str | None, prefix: str | None) -> Config:
    data: dict[str, Any] = {
        "store": {"url": f"sqlite:///{tmp / 'syncd.db'}"},
        "queue": {"url": "memory://"},
        "workers": {"concurrency": args.workers, "batch_size": args.worker_batch_size},
        "log": {"level": "warning"},
    }
    if dsn is not None:
        data["store"] = {"url": dsn}
        data["queue"] = {"url": args.redis_url, "prefix": prefix}
    return Config.from_mapping(data, environ={})


async def wait_rows(target: str, table: str, connector_id: str | None, total: int) -> None:
    """Until ``total`` rows of the connector are in the table (looking every 50 ms)."""
    conn = await asyncpg.connect(target)
    try:
        where = " WHERE connector_id = $1" if connector_id else ""
        query = f"SELECT count(*) FROM {table}{where}"
        params = [connector_id] if connector_id else []
        while await conn.fetchval(query, *params) < total:  # noqa: ASYNC110 - another process
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def wait_indexed(daemon: Daemon, connector_id: str, total: int) -> None:
    while True:
        idle = not await daemon.queue.depth() and not daemon.workers.busy
        if idle and (await daemon.document_counts(connector_id))[DocStatus.INDEXED] >= total:
            return
        await asyncio.sleep(0.05)


async def syncd_phase(
    daemon: Daemon, url: str, total: int, indexer: dict[str, Any], name: str
) -> float:
    c = await daemon.create_connector(
        {"name": name, "source": source_body(url), "document": MAPPING, "indexer": indexer}
    )
    started = time.perf_counter()
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    await wait_indexed(daemon, c.id, total)
    elapsed = time.perf_counter() - started
    counts = await daemon.document_counts(c.id)
    if counts[DocStatus.INDEXED] != total or counts[DocStatus.FAILED]:
        raise SystemExit(f"{name}: {dict(counts)}")
    return elapsed


HAND_UPSERT = """
INSERT INTO {table} AS t (connector_id, external_id, content_hash, title, text, url,
                          updated_at, metadata, payload, indexed_at)
SELECT 'hand', external_id, content_hash, title, text, NULL, NULL, '{{}}', payload::jsonb, now()
  FROM hand_page
ON CONFLICT (connector_id, external_id) DO UPDATE SET
    content_hash = EXCLUDED.content_hash, title = EXCLUDED.title, text = EXCLUDED.text,
    payload = EXCLUDED.payload, indexed_at = EXCLUDED.indexed_at
"""


async def hand_written(url: str, target: str, table: str) -> tuple[int, float]:
    """Fetch, hash and COPY + upsert each page into ``table`` (see the module docstring)."""
    conn = await asyncpg.connect(target)
    try:
        await conn.execute(
            "CREATE TEMPORARY TABLE hand_page (external_id text, content_hash text, title text,"
            " text text, payload text)"
        )
        upsert = HAND_UPSERT.format(table=table)
        pages: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue(maxsize=1)
        count = 0
        sha256 = hashlib.sha256
        started = time.perf_counter()
        async with aiohttp.ClientSession() as session:
            reader = asyncio.create_task(read_ahead(session, url, pages), name="hand-fetch")
            try:
                while (records := await pages.get()) is not None:
                    rows = []
                    for rec in records:
                        blob = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
                        digest = sha256(blob).hexdigest()
                        rows.append(
                            (rec["id"], digest, rec.get("title"), rec.get("body"), blob.decode())
                        )
                    async with conn.transaction():
                        await conn.copy_records_to_table("hand_page", records=rows)
                        await conn.execute(upsert)
                        await conn.execute("TRUNCATE hand_page")
                    count += len(rows)
                await reader
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        return count, time.perf_counter() - started
    finally:
        await conn.close()


async def fresh_table(target: str, spec: TableSpec) -> None:
    conn = await asyncpg.connect(target)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {spec.qualified}")
        for statement in create_statements(spec):
            await conn.execute(statement)
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def run(args: argparse.Namespace) -> None:
    results: dict[str, list[float]] = {"queued": [], "postgres": [], "hand": []}
    async with contextlib.AsyncExitStack() as stack:
        target = await stack.enter_async_context(throwaway_database(args.postgres_dsn))
        store_dsn = prefix = None
        if args.backend == "postgres":
            store_dsn = await stack.enter_async_context(throwaway_database(args.postgres_dsn))
            prefix = await stack.enter_async_context(throwaway_prefix(args.redis_url))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        source = stack.enter_context(SourceProcess(args.records, args.page_size))
        await wait_for_source(source.url)
        n = args.records
        batch = min(args.batch_size, args.worker_batch_size)
        daemon = Daemon(config(args, tmp, store_dsn, prefix), serve_api=False)
        daemon.register_indexer("nothing", NothingIndexer)
        await daemon.start()
        stack.push_async_callback(daemon.stop)
        for r in range(args.rounds):
            spec = TableSpec(table=f"docs_{r}", full_text=args.full_text)
            await fresh_table(target, spec)
            results["queued"].append(
                await syncd_phase(
                    daemon, source.url, n, {"type": "nothing", "batch_size": batch}, f"q{r}"
                )
            )
            indexer = {
                "type": "postgres",
                "dsn": target,
                "table": spec.table,
                "batch_size": batch,
                "full_text": args.full_text,
            }
            seconds = await syncd_phase(daemon, source.url, n, indexer, f"p{r}")
            await wait_rows(target, spec.qualified, None, n)
            results["postgres"].append(seconds)
            hand = TableSpec(table=f"hand_{r}", full_text=args.full_text)
            await fresh_table(target, hand)
            count, seconds = await hand_written(source.url, target, hand.qualified)
            if count != n:
                raise SystemExit(f"hand-written loop: {count} of {n}")
            results["hand"].append(seconds)
            print(
                f"round {r + 1}: queued {n / results['queued'][-1]:.0f}, postgres "
                f"{n / results['postgres'][-1]:.0f}, hand-written {n / seconds:.0f} docs/s",
                flush=True,
            )

    med = {k: statistics.median(v) for k, v in results.items()}
    store = "SQLite + in-process queue" if args.backend == "embedded" else "PostgreSQL + Redis"
    print(
        f"records: {n} in pages of {args.page_size} (~1 KB each); syncd's store: {store}; "
        f"target: {safe_dsn(args.postgres_dsn)} (throwaway database); workers "
        f"{args.workers} x batches of {args.worker_batch_size}, indexer batch_size {batch}; "
        f"medians of {args.rounds}"
    )
    print(rate_line("queued path, indexer doing nothing:", n, med["queued"]))
    label = "on" if args.full_text else "off"
    print(rate_line(f"postgres indexer (full text {label}):", n, med["postgres"]))
    print(rate_line("hand-written COPY + upsert loop:", n, med["hand"]))
    ratio = med["queued"] / med["postgres"]
    print(f"ratio postgres / queued doing nothing:  {ratio:5.2f} (target >= 0.8)")
    print(f"ratio postgres / hand-written loop:     {med['hand'] / med['postgres']:5.2f}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cpus: {os.cpu_count()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("embedded", "postgres"), default="embedded")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4, help="syncd [workers] concurrency")
    parser.add_argument("--worker-batch-size", type=int, default=100, help="[workers] batch_size")
    parser.add_argument("--batch-size", type=int, default=500, help="the indexer's batch_size")
    parser.add_argument(
        "--postgres-dsn",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="server on which the throwaway databases are created",
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--no-full-text",
        dest="full_text",
        action="store_false",
        help="tables without the search column and its GIN index (both loops alike)",
    )
    args = parser.parse_args()
    tune_collector()  # as syncd run does
    configure_logging("warning", "console")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
