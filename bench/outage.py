"""What a store or queue outage does to a running sync (issue 23), measured on private servers.

    PYTHONPATH=$PWD python3 bench/outage.py postgres --outage 2 --queue redis --indexer webhook
    PYTHONPATH=$PWD python3 bench/outage.py postgres --outage 30 --queue memory --indexer store
    PYTHONPATH=$PWD python3 bench/outage.py redis --documents 10000

``postgres``: a private PostgreSQL cluster (``initdb`` in a temporary directory) is stopped
(``pg_ctl stop -m fast``) while a sync crawls a throttled local source, kept down ``--outage``
seconds, and started again. Printed: the run's outcome and error, the store calls that met the
outage (from the daemon's warnings), how long the connector read ``running`` after the server
accepted connections again, and the webhook deliveries (duplicates, missing).

``redis``: ``--documents`` documents are committed and queued behind a webhook sink that holds
them; a private ``redis-server`` without persistence is restarted (its data gone), the sink is
released, and the deliveries per document are counted once every document is indexed.

The shared PostgreSQL and Redis are never touched.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import structlog
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import DocStatus
from tests.integration.conftest import http_source
from tests.integration.multi import RedisServer, free_port, shared_config
from tests.integration.pgserver import PostgresServer
from tests.integration.sourceserver import SourceServer


class Sink:
    """A webhook endpoint counting deliveries per document; holds them while ``held``."""

    def __init__(self) -> None:
        self.deliveries: collections.Counter[str] = collections.Counter()
        self.release = asyncio.Event()
        self.release.set()
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/index", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/index"

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        await self.release.wait()
        body = await request.json()
        items = body if isinstance(body, list) else body.get("documents", [body])
        for item in items:
            self.deliveries[str(item["external_id"])] += 1
        return web.json_response({"ok": True})


@contextlib.asynccontextmanager
async def daemon_on(store_url: str, queue_url: str, **sync: Any) -> AsyncIterator[Daemon]:
    config = shared_config(
        store_url,
        queue_url,
        "syncd-outage-bench",
        "bench",
        sync={"heartbeat_seconds": 0.2, **sync},
        workers={"concurrency": 4, "batch_size": 50},
    )
    daemon = Daemon(config, serve_api=False)
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.stop()


async def _idle_seen(dsn: str, connector_id: str, since: float) -> float | None:
    """Seconds after ``since`` at which the store first reads the connector ``idle``."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            conn = await asyncpg.connect(dsn, timeout=1)
        except (OSError, asyncpg.PostgresError):
            await asyncio.sleep(0.01)
            continue
        try:
            while time.monotonic() < deadline:
                status = await conn.fetchval(
                    "SELECT sync_status FROM connectors WHERE id = $1", connector_id
                )
                if status == "idle":
                    return time.monotonic() - since
                await asyncio.sleep(0.01)
        finally:
            await conn.close()
    return None


async def postgres_outage(args: argparse.Namespace) -> None:
    pg = PostgresServer(free_port())
    await pg.init()
    await pg.start()
    redis = RedisServer(free_port())
    sink = Sink()
    await sink.start()
    try:
        if args.queue == "redis":
            await redis.start()
        queue_url = redis.url if args.queue == "redis" else "memory://"
        pages = args.pages
        async with (
            SourceServer(pages * 10, page_size=10) as source,
            daemon_on(
                pg.dsn, queue_url, **({"outage_seconds": args.budget} if args.budget else {})
            ) as daemon,
        ):
            indexer = (
                {"type": "webhook", "url": sink.url}
                if args.indexer == "webhook"
                else {"type": "store"}
            )
            c = await daemon.create_connector(
                {
                    "name": "items",
                    "source": http_source(source),
                    "indexer": indexer,
                    "throttle_seconds": args.throttle,
                    "page_retries": 0,
                }
            )
            with structlog.testing.capture_logs() as logs:
                run_id = await daemon.trigger_sync(c.id)
                await source.requested(source.cursor_for(pages // 4)).wait()
                t_down = time.monotonic()
                await pg.stop()
                await asyncio.sleep(args.outage)
                await pg.start()
                t_up = time.monotonic()
                idle_after = await _idle_seen(pg.dsn, c.id, t_up)
                await asyncio.wait_for(daemon.wait_run(c.id), 120)
                if args.indexer == "webhook":
                    with contextlib.suppress(TimeoutError):
                        await daemon.wait_documents(
                            c.id,
                            lambda n: n[DocStatus.PENDING] == n[DocStatus.RUNNING] == 0,
                            60,
                        )
            runs, _ = await daemon.list_runs(c.id, limit=5)
            run = next(r for r in runs if r.id == run_id)
            after = await daemon.get_connector(c.id)
            counts = await daemon.document_counts(c.id)
        events = collections.Counter(
            e["event"] for e in logs if e.get("log_level") in ("warning", "error")
        )
        print(f"outage {args.outage:g}s, queue {args.queue}, indexer {args.indexer}")
        print(f"  server down for {t_up - t_down:.2f}s")
        print(f"  run: {run.outcome} pages={run.pages} error={run.error!r}")
        print(f"  connector: status={after.status} last_error={after.last_error!r}")
        print(f"  read `running` {idle_after and round(idle_after, 3)}s after the server was back")
        print(f"  documents: {dict(counts)}")
        print(f"  warnings: {dict(events)}")
        waits = [e for e in logs if e["event"] in ("sync.end_retry",)]
        if waits:
            print(f"  end-write retries: {len(waits)}")
        if args.indexer == "webhook":
            dupes = sum(n - 1 for n in sink.deliveries.values() if n > 1)
            missing = pages * 10 - len(sink.deliveries)
            total = sum(sink.deliveries.values())
            print(f"  deliveries: {total} duplicates={dupes} missing={missing}")
    finally:
        await sink.stop()
        await redis.stop()
        await pg.close()


async def redis_restart(args: argparse.Namespace) -> None:
    pg = PostgresServer(free_port())
    await pg.init()
    await pg.start()
    redis = RedisServer(free_port())
    await redis.start()
    sink = Sink()
    await sink.start()
    n = args.documents
    try:
        async with (
            SourceServer(n, page_size=500) as source,
            daemon_on(pg.dsn, redis.url) as daemon,
        ):
            c = await daemon.create_connector(
                {
                    "name": "items",
                    "source": http_source(source),
                    "indexer": {"type": "webhook", "url": sink.url},
                }
            )
            sink.release.clear()  # every document stays queued (the first batches held)
            await daemon.trigger_sync(c.id)
            await asyncio.wait_for(daemon.wait_run(c.id), 120)
            depth = await daemon.queue.depth()
            print(f"queued before the restart: {sum(depth.values())} (of {n})")
            await redis.stop()
            await redis.start()
            t0 = time.monotonic()
            sink.release.set()
            await daemon.wait_documents(c.id, lambda k: k[DocStatus.INDEXED] == n, 300)
            elapsed = time.monotonic() - t0
        dupes = sum(k - 1 for k in sink.deliveries.values() if k > 1)
        print(f"redis restarted with {n} documents queued")
        print(f"  all indexed {elapsed:.1f}s after the restart")
        total, missing = sum(sink.deliveries.values()), n - len(sink.deliveries)
        print(f"  deliveries {total}, duplicates {dupes}, missing {missing}")
    finally:
        await sink.stop()
        await redis.stop()
        await pg.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("postgres")
    p.add_argument("--outage", type=float, default=2.0)
    p.add_argument("--queue", choices=("redis", "memory"), default="redis")
    p.add_argument("--indexer", choices=("webhook", "store"), default="webhook")
    p.add_argument("--pages", type=int, default=40)
    p.add_argument("--throttle", type=float, default=0.1)
    p.add_argument("--budget", type=float, default=None, help="[sync] outage_seconds")
    r = sub.add_parser("redis")
    r.add_argument("--documents", type=int, default=10_000)
    args = parser.parse_args()
    asyncio.run(postgres_outage(args) if args.what == "postgres" else redis_restart(args))


if __name__ == "__main__":
    main()
