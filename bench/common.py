"""What the benchmark scripts share: the local source's connector body and readiness, the
read-ahead page fetch, CPU accounting from ``/proc``, cProfile sections, throwaway PostgreSQL
databases and Redis key prefixes, the bare documents table of syncd's shape, and a sync through
syncd timed until every document is indexed.

A helper module, not a script: the scripts import it, and it imports none of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import resource
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import orjson
import redis.asyncio as aioredis

from syncd.config import Config
from syncd.config.sections import WorkersConfig
from syncd.daemon import Daemon
from syncd.models import DocStatus

# --- the source -------------------------------------------------------------------------------


def source_body(url: str, path: str = "/items") -> dict[str, object]:
    return {
        "type": "http",
        "url": url + path,
        "records": "data",
        "id_field": "id",
        "pagination": {"type": "cursor", "cursor_param": "cursor", "next_cursor": "next_cursor"},
    }


async def wait_for_source(url: str) -> None:
    """Let the server render its pages before timing anything."""
    async with aiohttp.ClientSession() as s:
        for _ in range(600):
            try:
                async with s.get(url + "/items") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
    raise SystemExit("the source server did not start")


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


# --- CPU accounting ---------------------------------------------------------------------------


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu(pid: int, *, reaped: bool = False) -> float:
    """CPU seconds (user + system) of one process from ``/proc``; 0 if unreadable. With
    ``reaped``, its exited children's too: the postmaster's holds every backend that exited."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    used = int(fields[11]) + int(fields[12])
    if reaped:
        used += int(fields[13]) + int(fields[14])
    return used / _TICK


@dataclass
class CpuMeter:
    """CPU seconds spent during a phase by this process, its waited-for children (dlt), the
    source server, the webhook sink, PostgreSQL and Redis. PostgreSQL's are its live
    processes' and the postmaster's reaped children's, so backends that exit during the
    phase count too (and so does whatever else the server ran meanwhile)."""

    source_pid: int | None
    sink_pid: int | None = None

    def snapshot(self) -> dict[str, float]:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = {
            "client": me.ru_utime + me.ru_stime,
            "subprocess": kids.ru_utime + kids.ru_stime,
            "source": proc_cpu(self.source_pid) if self.source_pid else 0.0,
            "sink": proc_cpu(self.sink_pid) if self.sink_pid else 0.0,
            "postgres": 0.0,
            "redis": 0.0,
        }
        for entry in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                comm = (entry / "comm").read_text().strip()
                if comm == "postgres" or comm.startswith("redis-server"):
                    key = "postgres" if comm == "postgres" else "redis"
                    out[key] += proc_cpu(int(entry.name), reaped=key == "postgres")
        return out

    @contextlib.contextmanager
    def measure(self, into: dict[str, float]) -> Iterator[None]:
        before = self.snapshot()
        try:
            yield
        finally:
            after = self.snapshot()
            into.update({k: after[k] - before[k] for k in after})


def describe_cpu(cpu: dict[str, float], seconds: float) -> str:
    parts = [f"{k} {v:.1f}" for k, v in cpu.items() if v >= 0.05]
    return f"CPU s over {seconds:.1f} s wall: " + ", ".join(parts)


def rate_line(label: str, n: int, seconds: float) -> str:
    return f"{label:<58}{n / seconds:10.0f} docs/s  ({seconds:.2f} s)"


# --- profiling --------------------------------------------------------------------------------


class Profiler:
    """cProfile sections written to ``directory`` (a no-op without one)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._current: cProfile.Profile | None = None
        self._name = ""

    def start(self, name: str) -> None:
        if self.directory is None:
            return
        self.stop()
        self._name = name
        self._current = cProfile.Profile()
        self._current.enable()

    def stop(self) -> None:
        prof, self._current = self._current, None
        if prof is None or self.directory is None:
            return
        prof.disable()
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{self._name}.prof"
        prof.dump_stats(path)
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text).strip_dirs()
        stats.sort_stats("tottime").print_stats(25)
        print(f"--- profile {self._name} ({path}), top 25 by own time ---")
        print(text.getvalue().split("\n", 3)[-1].strip("\n"))


# --- PostgreSQL and Redis ---------------------------------------------------------------------


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointing at another database of the same server."""
    return urlunsplit(urlsplit(dsn)._replace(path="/" + database))


def safe_dsn(dsn: str) -> str:
    """``dsn`` without its password, for printing."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


@contextlib.asynccontextmanager
async def throwaway_database(dsn: str) -> AsyncIterator[str]:
    """Create a database for this run on ``dsn``'s server; yield its DSN; drop it after."""
    name = f"syncd_bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(dsn, name)
    finally:
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@contextlib.asynccontextmanager
async def throwaway_prefix(redis_url: str) -> AsyncIterator[str]:
    """A unique Redis key prefix; every key under it is deleted afterwards."""
    prefix = f"syncd-bench-{secrets.token_hex(4)}"
    try:
        yield prefix
    finally:
        client = aioredis.Redis.from_url(redis_url)
        try:
            keys: list[bytes] = []
            async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                keys.append(key)
                if len(keys) >= 1000:
                    await client.unlink(*keys)
                    keys.clear()
            if keys:
                await client.unlink(*keys)
        finally:
            await client.aclose()


async def checkpoint(dsn: str) -> None:
    """Flush dirty pages between phases so that one phase's writes do not tax the next."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CHECKPOINT")
    except asyncpg.InsufficientPrivilegeError:
        pass  # only a superuser may; the phases then share the background writer's work
    finally:
        await conn.close()


# The same shape as syncd's documents table (see syncd/store/postgres/sql.py).
BARE_SCHEMA = """
CREATE SCHEMA bare;
CREATE TABLE bare.documents (
    connector_id text COLLATE "C" NOT NULL,
    external_id  text COLLATE "C" NOT NULL,
    status       text NOT NULL,
    content_hash text NOT NULL,
    payload      jsonb,
    error        text,
    attempts     integer NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    indexed_at   timestamptz,
    lease_token  text,
    lease_until  timestamptz,
    PRIMARY KEY (connector_id, external_id)
);
CREATE INDEX ON bare.documents (connector_id, status, external_id);
CREATE INDEX ON bare.documents (lease_until) WHERE status = 'running';
"""


async def create_bare_schema(dsn: str, schema: str) -> None:
    """BARE_SCHEMA's table (syncd's shape, payloads as text) in ``schema``."""
    conn = await asyncpg.connect(dsn)
    try:
        # Payloads as text, as syncd keeps them (its migration 2).
        ddl = BARE_SCHEMA.replace("bare.", f"{schema}.")
        ddl = ddl.replace("payload      jsonb", "payload      text")
        await conn.execute(ddl.replace("CREATE SCHEMA bare;", f"CREATE SCHEMA {schema};"))
    finally:
        await conn.close()


# --- syncd ------------------------------------------------------------------------------------


def workers_section(args: argparse.Namespace) -> dict[str, Any]:
    """The ``[workers]`` settings given on the command line."""
    workers: dict[str, Any] = {}
    if args.workers is not None:
        workers["concurrency"] = args.workers
    if args.worker_batch_size is not None:
        workers["batch_size"] = args.worker_batch_size
    return workers


def worker_shape(args: argparse.Namespace) -> tuple[int, int]:
    """syncd's ``[workers]`` concurrency and batch size for this run (the floor loops use
    the same)."""
    defaults = WorkersConfig()
    return (
        args.workers if args.workers is not None else defaults.concurrency,
        args.worker_batch_size if args.worker_batch_size is not None else defaults.batch_size,
    )


def embedded_config(tmp: Path, args: argparse.Namespace) -> Config:
    return Config.from_mapping(
        {
            "store": {"url": f"sqlite:///{tmp / 'syncd.db'}"},
            "queue": {"url": "memory://"},
            "workers": workers_section(args),
            "log": {"level": "warning"},
        },
        environ={},
    )


def postgres_config(dsn: str, redis_url: str, prefix: str, args: argparse.Namespace) -> Config:
    return Config.from_mapping(
        {
            "store": {"url": dsn},
            "queue": {"url": redis_url, "prefix": prefix},
            "workers": workers_section(args),
            "log": {"level": "warning"},
        },
        environ={},
    )


class QueuedIndexer:
    """Does nothing, but through the queue and the workers: the built-in ``store`` indexer
    marks documents indexed as they are committed, so it never exercises the worker path.

    It takes each claimed batch in one call, as the floor's workers do (``index_batch``); the
    webhook rounds measure the one-call-per-document path (``batch_size 1``)."""

    def __init__(self, config: object, context: object) -> None:
        pass

    needs_payload = False

    async def index(self, document: object) -> None:
        return None

    async def index_batch(self, documents: object) -> None:
        return None


INDEXER = {"type": "store"}


async def syncd_run(
    daemon: Daemon,
    url: str,
    total: int,
    profiler: Profiler | None = None,
    *,
    indexer: dict[str, Any] | None = None,
    name: str = "bench",
) -> tuple[float, float]:
    """Seconds until the crawl finished, and until every document was indexed."""
    profiler = profiler or Profiler(None)
    daemon.register_indexer("queued", QueuedIndexer)
    c = await daemon.create_connector(
        {"name": name, "source": source_body(url), "indexer": indexer or INDEXER}
    )
    profiler.start("crawl")
    started = time.perf_counter()
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    crawl = time.perf_counter() - started
    profiler.start("indexing")
    run = (await daemon.list_runs(c.id, limit=1))[0][0]
    if run.outcome != "succeeded":
        raise SystemExit(f"sync did not succeed: {run.outcome} {run.error}")
    await wait_indexed(daemon, c.id, total)
    indexed = time.perf_counter() - started
    profiler.stop()
    return crawl, indexed


async def wait_indexed(daemon: Daemon, connector_id: str, total: int) -> None:
    """Wait until ``total`` documents are indexed, looking every 50 ms.

    Counting documents is a scan of the connector's rows (~170 ms for 200,000 rows in a table
    not analyzed yet), which would tax the very indexing being measured: the queue depth
    and the workers' busy count are cheap, so the count runs only once both are zero.
    """
    while True:
        idle = not await daemon.queue.depth() and not daemon.workers.busy
        if idle and (await daemon.document_counts(connector_id))[DocStatus.INDEXED] >= total:
            return
        await asyncio.sleep(0.05)
