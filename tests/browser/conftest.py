"""Fixtures of the dashboard's browser tests: a real daemon serving its API (and ``/ui/``)
on 127.0.0.1, port 0, and Debian's headless Chromium driven by Playwright.

The browser is the system one (``apt-get install chromium``), never a build downloaded by
``playwright install``. Screenshots go to ``$SYNCD_SCREENSHOTS`` when set (the README's
images: ``SYNCD_SCREENSHOTS=tests/browser/screenshots``), else to the test's ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, ViewportSize, async_playwright

from syncd.daemon import Daemon
from syncd.models import Document
from tests.integration.conftest import embedded_config

CHROMIUM = os.environ.get("SYNCD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT: ViewportSize = {"width": 1280, "height": 760}
TOKEN = "browser-test-token-0123456789"


class HoldIndexer:
    """An indexer plugin that does not return until its event is set: documents stay
    ``pending``/``running`` while a test looks at them."""

    def __init__(self, release: asyncio.Event) -> None:
        self._release = release

    async def index(self, document: Document) -> None:
        await self._release.wait()


@dataclass
class Dashboard:
    """A started daemon and the URL of its dashboard."""

    daemon: Daemon
    url: str
    release_indexer: asyncio.Event = field(default_factory=asyncio.Event)


StartDashboard = Callable[..., Awaitable[Dashboard]]


@pytest.fixture
async def start_dashboard(tmp_path: Path) -> AsyncIterator[StartDashboard]:
    """Start a daemon (``await start_dashboard(token=...)``) with the ``hold`` indexer
    registered; stopped after the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(**api: Any) -> Dashboard:
            config = embedded_config(
                tmp_path, api={"listen": "127.0.0.1:0", **api}, daemon={"grace_seconds": 0.2}
            )
            daemon = Daemon(config)
            release = asyncio.Event()

            def hold(cfg: Mapping[str, Any], ctx: Any) -> HoldIndexer:
                return HoldIndexer(release)

            daemon.register_indexer("hold", hold)
            await stack.enter_async_context(daemon)
            # Let held indexing end first, so that the daemon stops without waiting on it.
            stack.callback(release.set)
            assert daemon.api_address is not None
            return Dashboard(daemon, f"{daemon.api_address}/ui/", release)

        yield start


@pytest.fixture
async def dashboard(start_dashboard: StartDashboard) -> Dashboard:
    """A daemon without an API token."""
    return await start_dashboard()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium from the OS packages."""
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh browser tab. The test fails on a JavaScript error or a Content-Security-Policy
    violation (the UI must need neither inline scripts nor inline styles)."""
    context = await browser.new_context(viewport=VIEWPORT)
    tab = await context.new_page()
    problems: list[str] = []

    def console(message: ConsoleMessage) -> None:
        # Failed loads (401 before sign-in, 404 from a missing /events) are logged as errors
        # too: those are expected.
        if message.type == "error" and "Content Security Policy" in message.text:
            problems.append(message.text)

    tab.on("console", console)
    tab.on("pageerror", lambda exc: problems.append(f"uncaught: {exc}"))
    try:
        yield tab
    finally:
        await context.close()
    assert problems == []


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where screenshots are saved: ``$SYNCD_SCREENSHOTS`` or the test's ``tmp_path``."""
    where = Path(os.environ.get("SYNCD_SCREENSHOTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


class Proxy:
    """A TCP proxy on 127.0.0.1, port 0, in front of ``target_port``: :meth:`cut` drops every
    connection through it, as a network failure does (new connections are served again)."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def cut(self) -> None:
        """Drop every open connection."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        self._writers |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst), name="browser-test-proxy-pipe")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            dst.transport.abort()
            self._writers.discard(dst)
