"""Documents whose indexing failed for a transient reason are tried again, within
``[workers] max_attempts``, on both backend pairs; other failures are final (dead letters)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from syncd.models import DocStatus
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.loopback import LoopbackServer
from tests.integration.sourceserver import SourceServer

RETRYING = {"workers": {"retry_backoff_seconds": 0, "max_attempts": 3}}


class Hook(LoopbackServer):
    """A webhook receiver answering the statuses scripted per external id, then 200."""

    path = "/hook"

    def __init__(self) -> None:
        self.script: dict[str, list[int]] = {}
        self.calls: dict[str, int] = {}

    async def _handle(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        eid = body["external_id"]
        self.calls[eid] = self.calls.get(eid, 0) + 1
        statuses = self.script.get(eid) or []
        status = statuses.pop(0) if statuses else 200
        return web.json_response({}, status=status)

    def routes(self, app: web.Application) -> None:
        app.router.add_post(self.path, self._handle)


@pytest.fixture
async def hook() -> AsyncIterator[Hook]:
    async with Hook() as h:
        yield h


async def test_transient_failures_are_retried_and_others_are_dead_letters(
    make_any_daemon: DaemonFactory, hook: Hook
) -> None:
    daemon = make_any_daemon(**RETRYING)
    await daemon.start()
    hook.script = {
        "item-00000": [503, 429],  # transient twice, then indexed on the third attempt
        "item-00001": [400],  # refused: final at once
        "item-00002": [503, 503, 503],  # transient on every attempt: a dead letter
    }
    async with SourceServer(5) as source:
        c = await daemon.create_connector(
            {
                "name": "items",
                "source": http_source(source),
                "indexer": {"type": "webhook", "url": hook.url},
            }
        )
        await daemon.trigger_sync(c.id)
        await daemon.wait_run(c.id)
        counts = await daemon.wait_documents(
            c.id,
            lambda n: n[DocStatus.INDEXED] == 3 and n[DocStatus.FAILED] == 2,
        )
    assert counts[DocStatus.PENDING] == counts[DocStatus.RUNNING] == 0
    assert hook.calls == {
        "item-00000": 3,
        "item-00001": 1,
        "item-00002": 3,
        "item-00003": 1,
        "item-00004": 1,
    }
    refused = await daemon.get_document(c.id, "item-00001")
    assert (refused.status, refused.error, refused.attempts) == (DocStatus.FAILED, "HTTP 400", 1)
    dead = await daemon.get_document(c.id, "item-00002")
    assert (dead.status, dead.error, dead.attempts) == (DocStatus.FAILED, "HTTP 503", 3)
    retried = await daemon.get_document(c.id, "item-00000")
    assert (retried.status, retried.error, retried.attempts) == (DocStatus.INDEXED, None, 3)
    failed, _ = await daemon.list_documents(c.id, status=DocStatus.FAILED)
    assert sorted(d.external_id for d in failed) == ["item-00001", "item-00002"]
    samples = daemon.metrics.document_retries.collect()[0].samples
    assert [s.value for s in samples if s.name.endswith("_total")] == [4.0]  # 2 + 2
