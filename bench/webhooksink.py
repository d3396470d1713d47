"""A local webhook sink for the benchmarks, run in its own process.

``POST /index`` answers 200 with an empty body at once (every document indexed) and counts
what it received: a single-document body (``{"op", "external_id", ...}``, the webhook with
``batch_size = 1``) or a batch (``{"op", "documents": [...]}``). ``GET /stats`` returns
``{"posts", "documents", "distinct"}`` (distinct external ids); ``POST /reset`` clears them.
"""

from __future__ import annotations

import multiprocessing as mp
import socket

import orjson
from aiohttp import web


def _serve(sock: socket.socket) -> None:
    seen: set[str] = set()
    counts = {"posts": 0, "documents": 0}

    async def index(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        documents = body.get("documents")
        if documents is None:
            seen.add(body["external_id"])
            counts["documents"] += 1
        else:
            seen.update(d["external_id"] for d in documents)
            counts["documents"] += len(documents)
        counts["posts"] += 1
        return web.Response(status=200)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({**counts, "distinct": len(seen)})

    async def reset(request: web.Request) -> web.Response:
        seen.clear()
        counts.update(posts=0, documents=0)
        return web.Response(status=204)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/index", index)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    web.run_app(app, sock=sock, print=None, handle_signals=True, access_log=None)


class SinkProcess:
    """Start the sink in a child process; ``url`` is its ``/index`` URL, ``base`` its root."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1024)
        self.base = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.url = self.base + "/index"
        self._proc = mp.get_context("fork").Process(target=_serve, args=(self._sock,), daemon=True)

    @property
    def pid(self) -> int | None:
        """The sink process's id once started (to measure its CPU time)."""
        return self._proc.pid

    def __enter__(self) -> SinkProcess:
        self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.join(10)
        self._sock.close()
