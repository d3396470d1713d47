"""A local paginated source for the benchmarks, run in its own process.

Pages are rendered once up front, so the server costs little per request and the numbers
measure the client side. ``GET /items?cursor=N`` returns ``{"data": [...], "next_cursor": ...}``;
``GET /hang`` never answers (for abort latency). With ``delay``, each page answers that many
seconds late (a slow source: the client waits, the server spends no CPU).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import socket
from typing import Any

from aiohttp import web


def make_record(i: int, size: int) -> dict[str, Any]:
    """Record ``i``, padded to about ``size`` bytes of JSON."""
    rec: dict[str, Any] = {"id": f"rec-{i:07d}", "title": f"Record {i}", "updated_at": i}
    rec["body"] = "x" * max(0, size - len(json.dumps(rec)) - 12)
    return rec


def render_pages(total: int, page_size: int, record_size: int) -> list[bytes]:
    """Every page's body, ``next_cursor`` the next page's index as a string."""
    pages: list[bytes] = []
    count = (total + page_size - 1) // page_size
    for p in range(count):
        records = [
            make_record(i, record_size)
            for i in range(p * page_size, min(total, (p + 1) * page_size))
        ]
        nxt = str(p + 1) if p + 1 < count else None
        pages.append(json.dumps({"data": records, "next_cursor": nxt}).encode())
    return pages


def _serve(
    sock: socket.socket, total: int, page_size: int, record_size: int, delay: float = 0.0
) -> None:
    pages = render_pages(total, page_size, record_size)
    hang = asyncio.Event()

    async def items(request: web.Request) -> web.Response:
        index = int(request.query.get("cursor") or 0)
        if delay:
            await asyncio.sleep(delay)
        return web.Response(body=pages[index], content_type="application/json")

    async def hang_forever(request: web.Request) -> web.Response:
        await hang.wait()
        return web.json_response({"data": [], "next_cursor": None})

    async def release_hung(app: web.Application) -> None:
        # Let hung handlers answer before shutdown: cancelling them at exit makes aiohttp log
        # spurious tracebacks.
        hang.set()

    app = web.Application()
    app.on_shutdown.append(release_hung)
    app.router.add_get("/items", items)
    app.router.add_get("/hang", hang_forever)
    web.run_app(app, sock=sock, print=None, handle_signals=True, access_log=None)


class SourceProcess:
    """Start the source server in a child process; ``url`` is its base URL."""

    def __init__(
        self, total: int, page_size: int = 500, record_size: int = 1000, delay: float = 0.0
    ) -> None:
        self.total = total
        self.page_size = page_size
        self.record_size = record_size
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._proc = mp.get_context("fork").Process(
            target=_serve, args=(self._sock, total, page_size, record_size, delay), daemon=True
        )

    @property
    def pid(self) -> int | None:
        """The server process's id once started (to measure its CPU time)."""
        return self._proc.pid

    def __enter__(self) -> SourceProcess:
        self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.join(10)
        self._sock.close()


def main() -> None:
    """Serve a demo source in the foreground: ``python3 bench/sourceserver.py --port 9000``."""
    import argparse

    parser = argparse.ArgumentParser(description="A local cursor-paginated JSON source.")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--records", type=int, default=2500)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--record-size", type=int, default=300)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    print(f"serving {args.records} records at http://127.0.0.1:{args.port}/items")
    _serve(sock, args.records, args.page_size, args.record_size)


if __name__ == "__main__":
    main()
