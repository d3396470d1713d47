"""Pages per second through syncd's fetch layer, next to a bare aiohttp loop.

A local aiohttp server (in its own process, so it does not compete with the client for the
event loop) serves cursor pages from memory. The same pages are then crawled, alternately:

- bare: one ``aiohttp.ClientSession``, ``GET`` + ``json.loads`` + follow ``next_cursor``;
- syncd: ``Transport`` + ``HttpSource`` + ``AsyncCursorPaginator`` (with a cancel token, as a
  sync run uses it).

Run: ``python bench/paginate.py`` (``--pages``, ``--rounds``, ``--records``). It prints the
median pages/s of each, the client's CPU time per page, and the ratio syncd/bare both as a
ratio of medians and as the median of per-round ratios (target: ≥ 0.9).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
from aiohttp import web

from syncd.http.paginator import AsyncCursorPaginator, CancelToken
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Transport
from syncd.sources.base import SourceContext
from syncd.sources.http import HttpSource


def _pages(count: int, records: int) -> dict[str | None, bytes]:
    bodies: dict[str | None, bytes] = {}
    for page in range(count):
        data = [
            {
                "id": f"item-{page * records + i:07d}",
                "title": f"Item {page * records + i}",
                "updated_at": f"2024-01-01T00:{i % 60:02d}:00Z",
            }
            for i in range(records)
        ]
        following = f"page-{page + 1}" if page + 1 < count else None
        cursor = None if page == 0 else f"page-{page}"
        bodies[cursor] = json.dumps({"data": data, "next_cursor": following}).encode()
    return bodies


def _serve(pages: int, records: int, conn: Connection) -> None:
    """The server process: serve the pages until the parent closes the pipe."""
    bodies = _pages(pages, records)

    async def items(request: web.Request) -> web.Response:
        body = bodies[request.query.get("cursor")]
        return web.Response(body=body, content_type="application/json")

    async def serve() -> None:
        app = web.Application()
        app.router.add_get("/items", items)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        conn.send(int(runner.addresses[0][1]))
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)

    with contextlib.suppress(EOFError):
        asyncio.run(serve())


async def bare(url: str) -> int:
    """Crawl with a bare aiohttp loop; returns the number of pages."""
    count = 0
    cursor: str | None = None
    async with aiohttp.ClientSession() as session:
        while True:
            params = {"cursor": cursor} if cursor else None
            async with session.get(url, params=params) as response:
                body = await response.read()
            data: dict[str, Any] = json.loads(body)
            count += 1
            cursor = data["next_cursor"]
            if not cursor:
                return count


async def syncd_stack(url: str) -> int:
    """Crawl through Transport + HttpSource + AsyncCursorPaginator; returns the page count."""
    count = 0
    async with Transport(timeouts=Timeouts()) as transport:
        source = HttpSource({"url": url, "records": "data"}, SourceContext("bench", transport))
        paginator = AsyncCursorPaginator(
            source.fetch_page, max_retries=3, cancel_token=CancelToken()
        )
        async for _page in paginator:
            count += 1
    return count


@dataclass
class Samples:
    """Per-round pages/s (wall clock) and client CPU microseconds per page."""

    rates: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)


async def measure(url: str, pages: int, rounds: int) -> dict[str, Samples]:
    """Alternate the two crawls ``rounds`` times, swapping which goes first each round so
    drift in the machine's load hits both alike."""
    runners: dict[str, Callable[[str], Awaitable[int]]] = {"bare": bare, "syncd": syncd_stack}
    results = {name: Samples() for name in runners}
    for run in runners.values():  # warm-up: imports, first connections, caches
        await run(url)
    for index in range(rounds):
        order = list(runners) if index % 2 == 0 else list(reversed(runners))
        for name in order:
            cpu, started = time.process_time(), time.perf_counter()
            seen = await runners[name](url)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
            if seen != pages:
                raise SystemExit(f"{name}: crawled {seen} pages, expected {pages}")
            results[name].rates.append(pages / elapsed)
            results[name].cpu_us.append(cpu / pages * 1e6)
    return results


def main() -> None:
    """Start the server process, measure, print."""
    parser = argparse.ArgumentParser(description="syncd fetch layer vs bare aiohttp")
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--records", type=int, default=50, help="records per page")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(args.pages, args.records, child), daemon=True)
    server.start()
    try:
        port = parent.recv()
        results = asyncio.run(measure(f"http://127.0.0.1:{port}/items", args.pages, args.rounds))
    finally:
        parent.close()
        server.join(timeout=5)
        if server.is_alive():
            server.terminate()
    bare_s, syncd_s = results["bare"], results["syncd"]
    print(f"pages: {args.pages} x {args.rounds} rounds, {args.records} records/page")
    for label, samples in (("bare aiohttp loop", bare_s), ("syncd fetch layer", syncd_s)):
        print(
            f"{label}: {statistics.median(samples.rates):7.0f} pages/s median "
            f"(min {min(samples.rates):.0f}, max {max(samples.rates):.0f}); "
            f"client CPU {statistics.median(samples.cpu_us):5.0f} us/page"
        )
    ratio = statistics.median(syncd_s.rates) / statistics.median(bare_s.rates)
    # Each round runs both crawls back to back, so a round's ratio is little affected by
    # load that comes and goes on the machine; their median is the steadier figure.
    paired = statistics.median(s / b for s, b in zip(syncd_s.rates, bare_s.rates, strict=True))
    print(f"ratio syncd/bare : {ratio:7.2f} of medians, {paired:.2f} median of per-round ratios")
    print("target           :    0.90")


if __name__ == "__main__":
    main()
