"""Scheduler scale: many connectors due at once, admission control, idle ticks, memory.

    python bench/scheduler_scale.py                         # SQLite + in-process queue
    python bench/scheduler_scale.py --backend postgres      # PostgreSQL + Redis
    python bench/scheduler_scale.py --connectors 1000 --repeat 1   # a quick run

The connectors (hourly schedules, ``store`` indexer) are inserted in bulk with the store's own
``INSERT_CONNECTOR`` statement and row encoding (``syncd.store.codec``) through the raw driver
— one transaction, not 10,000 API calls — into a database the store has migrated. Their
source is a local server in its own process that answers one empty page. Per repetition
(medians of ``--repeat``):

- **idle tick**: ``Daemon.tick()`` with nothing due (median of ``--idle-ticks``), next to a
  bare baseline: the one indexed ``SELECT`` that finds nothing due, through the raw driver;
- **RSS** of this process with the daemon started over the idle connectors (the first round:
  later rounds run in a process that already held 10,000 runs);
- **all due, slots ≥ connectors**: every ``next_run_at`` set in the past, then ``tick()`` is
  called until every connector has started: ticks needed, and the time until the last start;
- **all due, ``--slots`` (default 32)**: one ``tick()``, then nothing but the wake-ups of
  freed slots: time until every connector has run, runs/s, and the slot occupancy (mean runs
  executing / slots, sampled every 10 ms: near 1 when each freed slot is refilled at once).

The scheduler's own interval is an hour, so that only the ticks above happen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import throwaway_database, throwaway_prefix

from syncd.config import Config
from syncd.daemon import Daemon
from syncd.models import Connector, new_id, utcnow
from syncd.observability.logs import configure_logging
from syncd.store import codec
from syncd.store.postgres import PostgresStore
from syncd.store.postgres import sql as pg_sql
from syncd.store.sqlite import SQLiteStore
from syncd.store.sqlite import sql as sqlite_sql

SCHEDULE = "0 * * * *"


# --- the source: one empty page ----------------------------------------------------------


def _serve_empty(sock: socket.socket) -> None:
    from aiohttp import web

    body = orjson.dumps({"data": [], "next_cursor": None})

    async def items(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/items", items)
    web.run_app(app, sock=sock, print=None, handle_signals=True, access_log=None)


@contextlib.contextmanager
def empty_source() -> Iterator[str]:
    """A server in its own process answering ``/items`` with one empty last page."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    proc = mp.get_context("fork").Process(target=_serve_empty, args=(sock,), daemon=True)
    proc.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/items"
    finally:
        proc.terminate()
        proc.join(10)
        sock.close()


def connectors(n: int, url: str, next_run_at: datetime) -> Iterator[Connector]:
    """``n`` scheduled connectors of the empty source (not kept: built as inserted)."""
    now = utcnow()
    source = {
        "type": "http",
        "url": url,
        "records": "data",
        "id_field": "id",
        "pagination": {"type": "cursor", "cursor_param": "cursor", "next_cursor": "next_cursor"},
    }
    for i in range(n):
        yield Connector(
            id=new_id(),
            name=f"scale-{i:06d}",
            source=source,
            indexer={"type": "store"},
            created_at=now,
            updated_at=now,
            sync_schedule=SCHEDULE,
            next_run_at=next_run_at,
        )


# --- backends ------------------------------------------------------------------------------


class Backend:
    """Bulk setup and bare queries through the raw driver, and the daemon's configuration."""

    name = ""

    async def insert(self, n: int, url: str, next_run_at: datetime) -> float: ...
    async def set_due(self, at: datetime) -> None: ...
    async def bare_idle_select(self, now: datetime, n: int) -> float:
        """Median of ``n`` runs of the indexed "anything due?" query, on one connection."""
        ...

    async def count_runs(self) -> int: ...
    def config(self, slots: int) -> Config: ...


def _config(store: dict[str, Any], queue: dict[str, Any], slots: int) -> Config:
    return Config.from_mapping(
        {
            "store": store,
            "queue": queue,
            "scheduler": {"tick_seconds": 3600},
            "sync": {"max_concurrent_runs": slots},
            "workers": {"concurrency": 2},
            "log": {"level": "warning"},
        },
        environ={},
    )


class SQLiteBackend(Backend):
    name = "SQLite + memory://"

    def __init__(self, path: Path) -> None:
        self.path = path

    async def insert(self, n: int, url: str, next_run_at: datetime) -> float:
        store = SQLiteStore(self.path)
        await store.open()  # the migrations
        await store.close()
        started = time.perf_counter()
        with contextlib.closing(sqlite3.connect(self.path)) as db, db:
            db.executemany(
                sqlite_sql.INSERT_CONNECTOR,
                (codec.connector_to_row(c) for c in connectors(n, url, next_run_at)),
            )
        return time.perf_counter() - started

    async def set_due(self, at: datetime) -> None:
        with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            db.execute("UPDATE connectors SET next_run_at = ?", (codec.encode_dt(at),))

    async def bare_idle_select(self, now: datetime, n: int) -> float:
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            query = "SELECT id FROM connectors WHERE next_run_at <= ? LIMIT 1"
            db.execute(query, (codec.encode_dt(now),)).fetchall()  # schema read, cache warm
            durations = []
            for _ in range(n):
                started = time.perf_counter()
                db.execute(query, (codec.encode_dt(now),)).fetchall()
                durations.append(time.perf_counter() - started)
            return statistics.median(durations)

    async def count_runs(self) -> int:
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])

    def config(self, slots: int) -> Config:
        return _config({"url": f"sqlite:///{self.path}"}, {"url": "memory://"}, slots)


class PostgresBackend(Backend):
    name = "PostgreSQL + Redis"

    def __init__(self, dsn: str, redis_url: str, prefix: str) -> None:
        self.dsn = dsn
        self.redis_url = redis_url
        self.prefix = prefix

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[asyncpg.Connection[Any]]:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.set_type_codec(
                "jsonb",
                encoder=lambda v: orjson.dumps(v).decode(),
                decoder=orjson.loads,
                schema="pg_catalog",
            )
            yield conn
        finally:
            await conn.close()

    async def insert(self, n: int, url: str, next_run_at: datetime) -> float:
        store = PostgresStore(self.dsn)
        await store.open()  # the migrations
        await store.close()
        started = time.perf_counter()
        async with self._conn() as conn, conn.transaction():
            rows = [
                list(codec.connector_to_row(c, dt=codec.identity, js=codec.identity).values())
                for c in connectors(n, url, next_run_at)
            ]
            await conn.executemany(pg_sql.INSERT_CONNECTOR, rows)
        async with self._conn() as conn:
            await conn.execute("ANALYZE connectors")
        return time.perf_counter() - started

    async def set_due(self, at: datetime) -> None:
        async with self._conn() as conn:
            await conn.execute("UPDATE connectors SET next_run_at = $1", at)
            await conn.execute("VACUUM ANALYZE connectors")

    async def bare_idle_select(self, now: datetime, n: int) -> float:
        async with self._conn() as conn:
            query = "SELECT id FROM connectors WHERE next_run_at <= $1 LIMIT 1"
            await conn.fetch(query, now)  # prepared once, as the pool's statement cache does
            durations = []
            for _ in range(n):
                started = time.perf_counter()
                await conn.fetch(query, now)
                durations.append(time.perf_counter() - started)
            return statistics.median(durations)

    async def count_runs(self) -> int:
        async with self._conn() as conn:
            return int(await conn.fetchval("SELECT count(*) FROM runs"))

    def config(self, slots: int) -> Config:
        return _config(
            {"url": self.dsn, "pool_max_size": 10},
            {"url": self.redis_url, "prefix": self.prefix},
            slots,
        )


# --- measurements ----------------------------------------------------------------------------


def rss_mb() -> float:
    """This process's resident set size (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


async def until(predicate: Callable[[], Awaitable[bool]], timeout: float) -> None:
    """Poll ``predicate`` (cheap, every 10 ms) until true."""
    deadline = time.perf_counter() + timeout
    while not await predicate():
        if time.perf_counter() > deadline:
            raise SystemExit("timed out")
        await asyncio.sleep(0.01)


@dataclass
class Round:
    idle_tick: float
    bare_select: float
    rss: float
    wide_ticks: int
    wide_seconds: float
    narrow_seconds: float
    narrow_ticks: int
    occupancy: float


async def idle_phase(backend: Backend, args: argparse.Namespace) -> tuple[float, float, float]:
    # The whole process: interpreter, libraries, the daemon and what it holds.
    async with Daemon(backend.config(args.slots), serve_api=False) as daemon:
        await daemon.tick()  # warm: statements prepared, pages cached
        durations = []
        for _ in range(args.idle_ticks):
            started = time.perf_counter()
            assert await daemon.tick() == []
            durations.append(time.perf_counter() - started)
        rss = rss_mb()
    bare = await backend.bare_idle_select(utcnow(), args.idle_ticks)
    return statistics.median(durations), bare, rss


async def wide_phase(backend: Backend, n: int) -> tuple[int, float]:
    """Slots for every connector: ticks until all started, and how long."""
    async with Daemon(backend.config(max(n, 1)), serve_api=False) as daemon:
        # The scheduler loop's catch-up tick runs at start: let it find nothing due first, so
        # that only the ticks below start the connectors.
        async def caught_up() -> bool:
            return daemon.scheduler.loop_ticks > 0

        await until(caught_up, 60)
        before = await backend.count_runs()
        await backend.set_due(utcnow() - timedelta(minutes=1))
        started = time.perf_counter()
        ticks = count = 0
        while count < n:
            ticks += 1
            count += len(await daemon.tick())
            if ticks > 50:
                raise SystemExit(f"only {count} of {n} started after 50 ticks")
        seconds = time.perf_counter() - started
        await until(lambda: _all_ran(backend, before + n), 600)
        await until(lambda: _none_running(daemon), 600)
    return ticks, seconds


async def narrow_phase(backend: Backend, n: int, slots: int) -> tuple[float, int, float]:
    """``slots`` slots: one tick, then the wake-ups of freed slots only."""
    async with Daemon(backend.config(slots), serve_api=False) as daemon:
        scheduler = daemon.scheduler
        original = scheduler.tick
        ticks = 0

        async def counted() -> list[str]:
            nonlocal ticks
            ticks += 1
            return await original()

        scheduler.tick = counted  # type: ignore[method-assign]
        before = await backend.count_runs()
        await backend.set_due(utcnow() - timedelta(minutes=1))
        samples: list[int] = []
        done = asyncio.Event()

        async def sample() -> None:
            while not done.is_set():
                samples.append(len(daemon.running_syncs))
                await asyncio.sleep(0.01)

        sampler = asyncio.create_task(sample())
        started = time.perf_counter()
        await daemon.tick()
        await until(lambda: _all_ran(backend, before + n), 3600)
        seconds = time.perf_counter() - started
        done.set()
        await sampler
        await until(lambda: _none_running(daemon), 600)
    occupancy = statistics.mean(samples) / slots if samples else float("nan")
    return seconds, ticks, occupancy


async def _all_ran(backend: Backend, total: int) -> bool:
    return await backend.count_runs() >= total


async def _none_running(daemon: Daemon) -> bool:
    return not daemon.running_syncs


async def one_round(backend: Backend, args: argparse.Namespace) -> Round:
    idle, bare, rss = await idle_phase(backend, args)
    wide_ticks, wide_seconds = await wide_phase(backend, args.connectors)
    narrow_seconds, narrow_ticks, occupancy = float("nan"), 0, float("nan")
    if not args.no_narrow:
        narrow_seconds, narrow_ticks, occupancy = await narrow_phase(
            backend, args.connectors, args.slots
        )
    # Back to idle (not due) for the next round.
    await backend.set_due(utcnow() + timedelta(days=1))
    return Round(idle, bare, rss, wide_ticks, wide_seconds, narrow_seconds, narrow_ticks, occupancy)


def report(backend: Backend, args: argparse.Namespace, rounds: list[Round], setup: float) -> None:
    def med(f: Callable[[Round], float]) -> float:
        return statistics.median(f(r) for r in rounds)

    n = args.connectors
    print(f"backend: {backend.name}; {n} connectors, bulk insert {setup:.2f} s; {load()}")
    print(f"rounds: {len(rounds)} (medians)")
    print(
        f"idle tick (nothing due):        {med(lambda r: r.idle_tick) * 1000:8.2f} ms "
        f"(target < 20 ms); bare indexed SELECT {med(lambda r: r.bare_select) * 1000:.2f} ms"
    )
    # The first round only: later rounds run in a process that has already held 10,000 runs,
    # and CPython keeps the memory it once took.
    print(
        f"RSS, daemon over idle connectors: {rounds[0].rss:6.1f} MB (target < 100 MB; "
        "first round, a fresh process)"
    )
    print(
        f"all due, {n} slots:  all started in {med(lambda r: r.wide_ticks):.0f} tick(s), "
        f"{med(lambda r: r.wide_seconds):.2f} s (target: within two ticks)"
    )
    narrow = med(lambda r: r.narrow_seconds)
    if args.no_narrow:
        print(f"all due, {args.slots} slots: not measured (--no-narrow)")
    else:
        print(
            f"all due, {args.slots} slots: all ran in {narrow:.2f} s ({n / narrow:.0f} runs/s), "
            f"{med(lambda r: r.narrow_ticks):.0f} ticks (wake-ups), slot occupancy "
            f"{med(lambda r: r.occupancy):.2f}"
        )
    print(f"after: {load()}")


# --- PostgreSQL + Redis throwaways -------------------------------------------------------------


async def run(args: argparse.Namespace) -> None:
    with empty_source() as url, tempfile.TemporaryDirectory() as tmp:
        async with contextlib.AsyncExitStack() as stack:
            backend: Backend
            if args.backend == "postgres":
                dsn = await stack.enter_async_context(throwaway_database(args.postgres_dsn))
                prefix = await stack.enter_async_context(throwaway_prefix(args.redis_url))
                backend = PostgresBackend(dsn, args.redis_url, prefix)
            else:
                backend = SQLiteBackend(Path(tmp) / "syncd.db")
            setup = await backend.insert(args.connectors, url, utcnow() + timedelta(days=1))
            rounds = [await one_round(backend, args) for _ in range(args.repeat)]
            report(backend, args, rounds, setup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("embedded", "postgres"), default="embedded")
    parser.add_argument("--connectors", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=32, help="max_concurrent_runs, narrow phase")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle-ticks", type=int, default=20)
    parser.add_argument("--no-narrow", action="store_true", help="skip the --slots phase")
    parser.add_argument(
        "--postgres-dsn",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="server on which a throwaway database is created (postgres backend)",
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    configure_logging("warning", "console")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
