"""The local HTTP servers of the tests: :class:`LoopbackServer` serves a subclass's routes
on 127.0.0.1, on a free port, for the span of an ``async with``."""

from __future__ import annotations

import ipaddress
from abc import ABC, abstractmethod
from types import TracebackType
from typing import ClassVar, Self

from aiohttp import web

__all__ = ["HOST", "LoopbackServer"]

HOST = "127.0.0.1"


class LoopbackServer(ABC):
    """An aiohttp application on ``HOST``, port 0, from :meth:`start` (entering ``async
    with``) to :meth:`stop` (leaving it); the routes are the ones :meth:`routes` adds.

    Every server a test makes syncd fetch is loopback: :meth:`start` asserts it."""

    #: What :attr:`url` holds after the origin, e.g. ``"/graphql"``; none by default.
    path: ClassVar[str] = ""
    #: ``http://127.0.0.1:PORT`` and :attr:`path`, once started.
    url: str = ""
    _runner: web.AppRunner | None = None

    @abstractmethod
    def routes(self, app: web.Application) -> None:
        """Add the server's routes to ``app``."""

    async def start(self) -> None:
        """Serve on 127.0.0.1, on a free port."""
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, HOST, 0).start()
        host, port = self._runner.addresses[0][:2]
        assert ipaddress.ip_address(host).is_loopback, host
        self.url = f"http://{HOST}:{port}{self.path}"

    async def stop(self) -> None:
        """Stop serving (nothing if not started)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
