"""``POST /connectors/preview`` against a real daemon serving its API and real local sources:
what it fetches, what it compares, how it fails, and that it stores nothing and stops when
its client leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import DocStatus
from tests.integration.conftest import embedded_config, http_source
from tests.integration.sourceserver import SourceServer, make_records

SECRET = "preview-secret-0123456789"


class Api:
    """The daemon's control API over HTTP."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def preview(self, body: Any) -> tuple[int, Any]:
        async with self.session.post(f"{self.base}/connectors/preview", json=body) as resp:
            return resp.status, await resp.json()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Daemon, Api]]:
    """A started daemon serving its API on 127.0.0.1 (a port of its own)."""
    daemon = Daemon(embedded_config(tmp_path))
    await daemon.start()
    assert daemon.api_address is not None
    api = Api(daemon.api_address)
    try:
        yield daemon, api
    finally:
        await api.session.close()
        await daemon.stop()


async def test_preview_of_a_body_fetches_pages_and_stores_nothing(
    served: tuple[Daemon, Api], source: SourceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, api = served
    monkeypatch.setenv("PREVIEW_TOKEN", SECRET)
    records = make_records(25)
    records[3] = {"title": "no id"}
    source.set_records(records)
    body = {
        "name": "tickets",
        "source": http_source(
            source,
            params={"limit": 10, "token": "${env:PREVIEW_TOKEN}", "api_key": "literal-key-987"},
            headers={"Authorization": "Bearer ${env:PREVIEW_TOKEN}", "X-Plain": "visible?"},
        ),
    }
    status, answer = await api.preview({"connector": body, "pages": 2})
    assert status == 200, answer
    assert answer["request"] == {
        "method": "GET",
        "url": f"{source.items_url}?limit=10&token=***&api_key=***",
        "headers": {"Authorization": "***", "X-Plain": "***"},
    }
    first, second = answer["pages"]
    assert first == {
        "records": 10,
        "ids": [f"item-{i:05d}" for i in range(10) if i != 3],
        "rejected": [{"index": 3, "reason": "id field 'id' is missing"}],
        "next_cursor": "page-1",
        "reason": "next cursor at 'next_cursor'",
        "warnings": [],
    }
    assert (second["records"], second["next_cursor"]) == (10, "page-2")
    assert second["ids"] == [f"item-{i:05d}" for i in range(10, 20)]
    assert "error" not in answer
    # Two pages asked for, two fetched; the secret was sent, never shown.
    assert source.cursors == [None, "page-1"]
    assert source.requests[0].query["token"] == SECRET
    assert source.requests[0].headers["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in str(answer) and "literal-key-987" not in str(answer)
    connectors, _ = await daemon.list_connectors()
    assert connectors == []


async def test_preview_of_a_connector_compares_with_its_documents(
    served: tuple[Daemon, Api], source: SourceServer
) -> None:
    daemon, api = served
    c = await daemon.create_connector({"name": "tickets", "source": http_source(source)})
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 25)
    records = make_records(27)
    records[1] = {**records[1], "title": "renamed"}
    del records[2]  # the first page now ends with item-00010
    source.set_records(records)
    runs_before, _ = await daemon.list_runs(c.id)
    before = await daemon.get_connector(c.id)

    status, answer = await api.preview({"connector_id": c.id, "pages": 10})
    assert status == 200, answer
    assert "error" not in answer
    assert [p["records"] for p in answer["pages"]] == [10, 10, 6]
    assert [p["next_cursor"] for p in answer["pages"]] == ["page-1", "page-2", None]
    first, _, last = answer["pages"]
    assert first["new"] == []
    assert first["changed"] == ["item-00001"]
    assert first["unchanged"] == [r["id"] for r in records[:10] if r["id"] != "item-00001"]
    assert last["new"] == ["item-00025", "item-00026"]
    assert last["changed"] == []
    assert len(last["unchanged"]) == 4
    # Nothing written: no run, the documents and the connector as they were.
    assert (await daemon.list_runs(c.id))[0] == runs_before
    assert (await daemon.document_counts(c.id))[DocStatus.INDEXED] == 25
    assert await daemon.get_connector(c.id) == before
    assert (await daemon.get_document(c.id, "item-00001")).payload["title"] == "Item 1"


async def test_a_failing_source_is_the_result_with_the_pages_before_it(
    served: tuple[Daemon, Api], source: SourceServer
) -> None:
    _, api = served
    source.hang_on("page-1")
    body = {"name": "t", "source": http_source(source), "page_retries": 0}
    call = asyncio.create_task(api.preview({"connector": body, "pages": 3}))
    await source.requested("page-1").wait()
    source.fail_next(500)
    source.release()
    status, answer = await call
    assert status == 200
    assert [p["next_cursor"] for p in answer["pages"]] == ["page-1"]
    assert answer["error"].startswith("HTTP 500")
    assert source.items_url in answer["error"]


async def test_the_time_limit_ends_a_preview(
    served: tuple[Daemon, Api], source: SourceServer
) -> None:
    _, api = served
    source.hang_on(None)
    body = {"name": "t", "source": http_source(source)}
    status, answer = await api.preview({"connector": body, "timeout_seconds": 1})
    assert status == 200
    assert answer == {
        "request": {"method": "GET", "url": source.items_url, "headers": {}},
        "pages": [],
        "error": "Preview stopped: time limit of 1 s",
    }


async def test_input_errors(served: tuple[Daemon, Api], source: SourceServer) -> None:
    _, api = served
    body = {"name": "t", "source": http_source(source)}
    status, answer = await api.preview({"connector_id": "nope"})
    assert (status, answer) == (404, {"detail": "Connector not found"})
    cases: list[tuple[Any, dict[tuple[str | int, ...], str]]] = [
        ({}, {("body",): "Give exactly one of 'connector' or 'connector_id'"}),
        (
            {"connector": body, "connector_id": "x", "pages": 11, "extra": 1},
            {
                ("body",): "Give exactly one of 'connector' or 'connector_id'",
                ("body", "extra"): "Unknown field",
                ("body", "pages"): "Must be an integer between 1 and 10",
            },
        ),
        (
            {"connector_id": 3, "timeout_seconds": 61},
            {
                ("body", "connector_id"): "Must be a string",
                ("body", "timeout_seconds"): "Must be a number between 1 and 60",
            },
        ),
        (
            {"connector": {"source": {"type": "http"}}},
            {
                ("body", "connector", "name"): "Field required",
                ("body", "connector", "source", "url"): "Field required",
            },
        ),
        ({"connector": []}, {("body", "connector"): "Must be a JSON object"}),
    ]
    for request, expected in cases:
        status, answer = await api.preview(request)
        assert status == 422, (request, answer)
        found = {tuple(item["loc"]): item["msg"] for item in answer["detail"]}
        assert found == expected, request
    assert source.requests == []


class HangingSource:
    """A source whose every request hangs, and which sees when one is cancelled (its
    server cancels a handler whose client disconnected)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")

    async def __aenter__(self) -> HangingSource:
        app = web.Application()
        app.router.add_get("/items", self.handle)
        self._runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/items"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


async def test_a_client_that_leaves_stops_the_preview(served: tuple[Daemon, Api]) -> None:
    daemon, api = served
    async with HangingSource() as hanging:
        c = await daemon.create_connector(
            {"name": "slow", "source": {"url": hanging.url, "records": "data"}}
        )
        call = asyncio.create_task(api.preview({"connector_id": c.id, "timeout_seconds": 60}))
        await hanging.started.wait()
        call.cancel()  # the client gives up: its connection closes
        with pytest.raises(asyncio.CancelledError):
            await call
        # The daemon notices and cancels its request to the source, long before the limit.
        await asyncio.wait_for(hanging.cancelled.wait(), 5)
    assert (await daemon.list_runs(c.id))[0] == []
    assert sum((await daemon.document_counts(c.id)).values()) == 0
    after = await daemon.get_connector(c.id)
    assert (after.sync_status, after.updated_at, after.run_id) == ("idle", c.updated_at, None)
