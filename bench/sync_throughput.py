"""Documents/s of a full sync, side by side with a bare loop, plus abort latency.

    python bench/sync_throughput.py                      # embedded: SQLite + in-process queue
    python bench/sync_throughput.py --records 50000      # a quicker run

The source is a local HTTP server in its own process serving pre-rendered pages of ~1 KB
records. The bare loop is what a hand-written script would do: aiohttp fetching each page
and ``sqlite3.executemany`` upserting it in a worker thread. Abort latency is the time from
``abort_sync`` to the run's task having ended, over 50 aborts of a run blocked on a page
request that never answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sourceserver import SourceProcess

from syncd.config import Config
from syncd.daemon import Daemon
from syncd.logs import configure_logging
from syncd.models import DocStatus


def source_body(url: str, path: str = "/items") -> dict[str, object]:
    return {
        "type": "http",
        "url": url + path,
        "records": "data",
        "id_field": "id",
        "pagination": {"type": "cursor", "cursor_param": "cursor", "next_cursor": "next_cursor"},
    }


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


EXTRA: dict[str, object] = {}


def embedded_config(tmp: Path) -> Config:
    return Config.from_mapping(
        {
            "store": {"url": f"sqlite:///{tmp / 'syncd.db'}"},
            "queue": {"url": "memory://"},
            "log": {"level": "warning"}, **EXTRA,
        },
        environ={},
    )


async def syncd_run(daemon: Daemon, url: str, total: int) -> tuple[float, float]:
    """Seconds until the crawl finished, and until every document was indexed."""
    c = await daemon.create_connector({"name": "bench", "source": source_body(url)})
    started = time.perf_counter()
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    crawl = time.perf_counter() - started
    run = (await daemon.list_runs(c.id, limit=1))[0][0]
    if run.outcome != "succeeded":
        raise SystemExit(f"sync did not succeed: {run.outcome} {run.error}")
    while (await daemon.document_counts(c.id))[DocStatus.INDEXED] < total:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return crawl, time.perf_counter() - started


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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--aborts", type=int, default=50)
    args = parser.parse_args()
    configure_logging("warning", "console")

    with SourceProcess(args.records, args.page_size) as source, tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        # Let the server render its pages before timing anything.
        async with aiohttp.ClientSession() as s:
            for _ in range(600):
                try:
                    async with s.get(source.url + "/items") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)

        n, bare = await bare_sqlite(source.url, tmp / "bare.db")
        async with Daemon(embedded_config(tmp), serve_api=False) as daemon:
            crawl, indexed = await syncd_run(daemon, source.url, n)
            aborts = await abort_latencies(daemon, source.url, args.aborts)

    bare_rate, crawl_rate, indexed_rate = n / bare, n / crawl, n / indexed
    print(f"records: {n} in pages of {args.page_size} (~1 KB each)")
    print(f"bare loop (aiohttp + sqlite3.executemany): {bare_rate:10.0f} docs/s")
    print(f"syncd crawl (SQLite + memory queue):       {crawl_rate:10.0f} docs/s")
    print(f"syncd crawl + everything indexed:          {indexed_rate:10.0f} docs/s")
    print(f"ratio crawl / bare: {crawl_rate / bare_rate:.2f} (target >= 0.7)")
    print(
        f"abort latency over {len(aborts)} aborts: p50 {pct(aborts, 0.5) * 1000:.1f} ms, "
        f"p99 {pct(aborts, 0.99) * 1000:.1f} ms, max {max(aborts) * 1000:.1f} ms "
        f"(target p99 < 100 ms); mean {statistics.mean(aborts) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
