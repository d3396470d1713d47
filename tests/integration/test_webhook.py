"""The ``webhook`` indexer against a real local receiver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import DocStatus
from tests.integration.conftest import http_source
from tests.integration.sourceserver import SourceServer


class Receiver:
    """Accepts POSTs; answers 422 (a refusal: final, never retried) for the external ids
    listed in ``reject``."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.reject: set[str] = set()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.received.append(body)
        self.headers.append(dict(request.headers))
        if body["external_id"] in self.reject:
            return web.json_response({"error": "nope"}, status=422)
        return web.json_response({"ok": True}, status=202)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/index", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/index"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    assert r.runner is not None
    await r.runner.cleanup()


async def test_webhook_posts_each_document(
    daemon: Daemon, source: SourceServer, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "hook-secret")
    receiver.reject = {"item-00002"}
    c = await daemon.create_connector(
        {
            "name": "items",
            "source": http_source(source),
            "indexer": {
                "type": "webhook",
                "url": receiver.url,
                "headers": {"Authorization": "Bearer ${env:HOOK_TOKEN}"},
            },
        }
    )
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    counts = await daemon.wait_documents(
        c.id, lambda n: n[DocStatus.INDEXED] == 24 and n[DocStatus.FAILED] == 1
    )
    assert counts[DocStatus.PENDING] == 0
    assert len(receiver.received) == 25
    first = next(b for b in receiver.received if b["external_id"] == "item-00000")
    assert first["connector_id"] == c.id
    assert first["payload"] == source.records[0]
    assert len(first["content_hash"]) == 64
    assert {h["Authorization"] for h in receiver.headers} == {"Bearer hook-secret"}
    failed = await daemon.get_document(c.id, "item-00002")
    assert failed.status is DocStatus.FAILED and failed.error is not None
    assert "422" in failed.error
