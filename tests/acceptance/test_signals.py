"""A second stop signal exits at once, even while a graceful stop waits for indexing."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.acceptance.conftest import Harness, http_source, wait_until
from tests.integration.sourceserver import SourceServer

GRACE = 30.0


class HangingWebhook:
    """A webhook receiver that accepts requests and never answers them."""

    def __init__(self) -> None:
        self.received = asyncio.Event()
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        self.received.set()
        await self._release.wait()
        return web.json_response({})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/index", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/index"

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def webhook() -> AsyncIterator[HangingWebhook]:
    hook = HangingWebhook()
    await hook.start()
    yield hook
    await hook.stop()


async def test_second_sigterm_exits_at_once(
    harness: Harness, source: SourceServer, webhook: HangingWebhook
) -> None:
    harness.write_config(daemon={"grace_seconds": GRACE}, log={"level": "info", "format": "json"})
    daemon = await harness.start()
    body = {
        "name": "items",
        "source": http_source(source),
        "indexer": {"type": "webhook", "url": webhook.url},
    }
    cid = (await harness.api.ok("POST", "/connectors", body))["id"]
    await harness.api.ok("POST", f"/connectors/{cid}/sync")
    await webhook.received.wait()  # a worker now holds a batch, blocked on the webhook

    daemon.send_signal(signal.SIGTERM)

    async def stopping() -> bool:
        return any(e.get("event") == "runner.stopping" for e in daemon.log_events())

    await wait_until(stopping, "the graceful stop to begin")
    signalled = time.monotonic()
    daemon.send_signal(signal.SIGTERM)
    code = await daemon.wait(10.0)
    assert code == 130
    assert time.monotonic() - signalled < GRACE / 3
