"""What the document counters cost the store's writes, and what a count read costs.

    python bench/store_counters.py                          # SQLite, 200 pages of 500
    python bench/store_counters.py --backend postgres       # a throwaway database
    python bench/store_counters.py --pages 20 --repeat 1    # a quick check

Times, on one connector: ``commit_page`` of new documents (inserts), of the same ids with
changed content (the upsert's update path), claim + finish in batches (``pending → running
→ indexed``), a count read (``document_counts``) and ``delete_connector``. Each phase is the
median of ``--repeat`` runs on a fresh store. Run it on two commits to compare. Besides the
wall time, each phase reports the CPU time that did the store's work, which other processes
on a busy machine disturb much less: this process's (SQLite runs on its thread) or, on
PostgreSQL, the server backend's (the store gets a pool of one connection).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

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
)
from syncd.store.base import Store

DSN = os.environ.get("SYNCD_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
NOW = datetime(2024, 5, 1, tzinfo=UTC)


def page(start: int, size: int, version: int) -> list[DocumentInput]:
    """``size`` documents of ~1 KB with ids from ``start``."""
    docs = []
    for i in range(start, start + size):
        payload = {"id": f"doc-{i:08d}", "v": version, "body": "x" * 900}
        docs.append(DocumentInput(payload["id"], payload, content_hash(payload)))
    return docs


@contextlib.asynccontextmanager
async def fresh_store(backend: str) -> AsyncIterator[Store]:
    """An opened store on a new database, removed afterwards."""
    if backend == "sqlite":
        from syncd.store.sqlite import SQLiteStore

        with tempfile.TemporaryDirectory() as tmp:
            store = SQLiteStore(Path(tmp) / "bench.db")
            await store.open()
            try:
                yield store
            finally:
                await store.close()
        return
    from syncd.store.postgres import PostgresStore

    name = f"syncd_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    dsn = urlunsplit(urlsplit(DSN)._replace(path="/" + name))
    store = PostgresStore(dsn, min_size=1, max_size=1)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
        admin = await asyncpg.connect(DSN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def start(store: Store) -> tuple[str, str]:
    """A connector with a running run: ``(connector id, run id)``."""
    c = Connector(
        id=new_id(),
        name=f"bench-{new_id()}",
        source={"type": "http", "url": "http://127.0.0.1:9/items"},
        indexer={"type": "webhook", "url": "http://127.0.0.1:9/hook"},
        created_at=NOW,
        updated_at=NOW,
    )
    await store.create_connector(c)
    run_id = new_id()

    def running(c: Connector) -> Transition:
        after = replace(c, sync_status=SyncStatus.RUNNING, run_id=run_id, sync_started_at=NOW)
        return Transition(after, start=RunStart(run_id, c.id, RunTrigger.MANUAL, NOW, None))

    await store.mutate_connector(c.id, running)
    return c.id, run_id


class Clock:
    """Wall and CPU seconds of the phases: this process's CPU, or a PostgreSQL backend's."""

    def __init__(self, backend_pid: int | None) -> None:
        self._pid = backend_pid
        self.phases: dict[str, tuple[float, float]] = {}
        self._start = (0.0, 0.0)

    def _cpu(self) -> float:
        if self._pid is None:
            return time.process_time()
        fields = Path(f"/proc/{self._pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        self._start = (time.perf_counter(), self._cpu())

    def stop(self, phase: str) -> None:
        wall, cpu = self._start
        self.phases[phase] = (time.perf_counter() - wall, self._cpu() - cpu)


async def backend_pid(store: Store) -> int | None:
    """The server process behind a PostgreSQL store's one connection (``None`` for SQLite)."""
    from syncd.store.postgres import PostgresStore

    if not isinstance(store, PostgresStore):
        return None
    async with store._db.acquire() as conn:
        pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    return pid


async def once(backend: str, pages: int, size: int, batch: int) -> dict[str, tuple[float, float]]:
    """One pass of every phase on a fresh store; (wall, CPU) seconds per phase."""
    async with fresh_store(backend) as store:
        clock = Clock(await backend_pid(store))
        cid, run_id = await start(store)
        commit = {"next_cursor": None, "source_state": {}, "now": NOW}
        clock.start()
        for p in range(pages):
            await store.commit_page(cid, run_id, page(p * size, size, 1), **commit)
        clock.stop("commit new")
        ids = [f"doc-{i:08d}" for i in range(pages * size)]
        clock.start()
        for i in range(0, len(ids), batch):
            chunk = ids[i : i + batch]
            token = new_id()
            until = NOW + timedelta(minutes=5)
            await store.claim_for_delivery(
                cid, chunk, lease_token=token, lease_until=until, now=NOW, with_payload=False
            )
            results = [(e, DocStatus.INDEXED, None) for e in chunk]
            await store.finish_documents(cid, token, results, now=NOW)
        clock.stop("claim+finish")
        clock.start()
        for p in range(pages):
            await store.commit_page(cid, run_id, page(p * size, size, 2), **commit)
        clock.stop("commit changed")
        clock.start()
        for _ in range(100):
            await store.document_counts(cid)
        clock.stop("100 count reads")
        clock.start()
        await store.delete_connector(cid)
        clock.stop("delete connector")
    return clock.phases


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--batch", type=int, default=100, help="claim/finish batch size")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [
        await once(args.backend, args.pages, args.page_size, args.batch) for _ in range(args.repeat)
    ]
    print(
        f"{args.backend}: {args.pages} pages of {args.page_size}, batches of {args.batch}, "
        f"median of {args.repeat}; load average {os.getloadavg()[0]:.2f}"
    )
    cpu = "server backend CPU" if args.backend == "postgres" else "process CPU"
    print(f"  {'phase':18} {'wall ms':>9} {cpu + ' ms':>22}")
    for phase in runs[0]:
        wall = statistics.median(r[phase][0] for r in runs) * 1000
        spent = statistics.median(r[phase][1] for r in runs) * 1000
        print(f"  {phase:18} {wall:9.1f} {spent:22.1f}")


if __name__ == "__main__":
    asyncio.run(main())
