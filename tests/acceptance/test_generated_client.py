"""The served OpenAPI description is good enough to generate a typed client from.

``openapi-python-client`` generates a package from the ``/openapi.json`` of a real
``syncd run``; the test then drives the daemon with that package only: create a connector
whose source is the generated ``HttpSourceConfig`` (not a dict), sync, wait, read its runs
and documents, point it at a source that hangs, abort, delete.

A description the generator cannot read is not an error to it: it still writes a client,
without the endpoints or models it gave up on, and says so in warnings. Any warning fails
the test (with the generator's text).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from http import HTTPStatus
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import httpx
import pytest

from tests.acceptance.conftest import POLL, STATE_TIMEOUT, Harness
from tests.integration.sourceserver import SourceServer

TOKEN = "generated-client-token"
PACKAGE = "syncd_generated_client"
GENERATE_TIMEOUT = 60.0


@pytest.fixture
async def hanging() -> AsyncIterator[SourceServer]:
    """A source whose first page never comes (until the server stops)."""
    async with SourceServer(5) as server:
        server.hang_on(None)
        yield server


@pytest.fixture
def forget_generated() -> Iterator[None]:
    """Unload the generated package after the test (its path is removed by monkeypatch)."""
    yield
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


async def _generate(spec: dict[str, Any], into: Path) -> None:
    """Write the client package ``into/PACKAGE`` from ``spec``; fail on any warning."""
    spec_path = into / "openapi.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    config = into / "generator.json"
    # No post hooks: they format the output with ruff, which the generated code does not need.
    config.write_text(json.dumps({"post_hooks": []}), encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "openapi_python_client",
        "generate",
        "--path",
        str(spec_path),
        "--output-path",
        str(into / PACKAGE),
        "--meta",
        "none",
        "--config",
        str(config),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GENERATE_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"openapi-python-client did not finish in {GENERATE_TIMEOUT:g}s")
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "warning" not in text.lower(), (
        f"the generator gave up on part of the description:\n{text}"
    )


class Generated:
    """The generated package's modules, imported by name."""

    def __init__(self) -> None:
        self.models = importlib.import_module(f"{PACKAGE}.models")
        self.client = importlib.import_module(f"{PACKAGE}.client")
        self.types = importlib.import_module(f"{PACKAGE}.types")

    def op(self, tag: str, operation: str) -> ModuleType:
        """The module of one operation, e.g. ``op("connectors", "create_connector")``."""
        return importlib.import_module(f"{PACKAGE}.api.{tag}.{operation}")


async def _until(check: Any, what: str) -> None:
    """Poll ``check`` (which asks the daemon, another process) until true, bounded."""
    deadline = time.monotonic() + STATE_TIMEOUT
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {STATE_TIMEOUT:g}s waiting for {what}")
        await asyncio.sleep(POLL)


async def test_a_generated_client_drives_the_daemon(
    harness: Harness,
    source: SourceServer,
    hanging: SourceServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    forget_generated: None,
) -> None:
    harness.write_config(api={"token": TOKEN})
    harness.api.token = TOKEN
    await harness.start()
    spec = await harness.api.ok("GET", "/openapi.json")
    await _generate(spec, tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    gen = Generated()
    m = gen.models

    # The bodies are typed: the source is the http kind's class, the indexer a union of
    # the indexer kinds' classes, the pagination a union of the five styles.
    create_fields = attrs.fields_dict(m.ConnectorCreate)
    assert str(create_fields["source"].type) == "HttpSourceConfig"
    indexer_types = str(create_fields["indexer"].type)
    assert "StoreIndexerConfig" in indexer_types and "WebhookIndexerConfig" in indexer_types
    http_fields = attrs.fields_dict(m.HttpSourceConfig)
    assert "additional_properties" not in http_fields  # unknown keys are refused, not kept
    assert {"url", "records", "id_field", "pagination", "max_pages"} <= set(http_fields)
    for style in ("Cursor", "NextUrl", "LinkHeader", "Offset", "Page"):
        assert f"{style}Pagination" in str(http_fields["pagination"].type)

    transport = httpx.AsyncHTTPTransport(uds=str(harness.socket_path))
    client = gen.client.AuthenticatedClient(
        base_url="http://localhost", token=TOKEN, httpx_args={"transport": transport}
    )
    async with client as client:
        create = gen.op("connectors", "create_connector")
        get = gen.op("connectors", "get_connector")
        update = gen.op("connectors", "update_connector")
        trigger = gen.op("connectors", "trigger_sync")
        abort = gen.op("connectors", "abort_sync")
        delete = gen.op("connectors", "delete_connector")
        runs = gen.op("runs", "list_runs")
        documents = gen.op("documents", "list_documents")

        def http_source(server: SourceServer) -> Any:
            return m.HttpSourceConfig(
                url=server.items_url,
                records="data",
                id_field="id",
                pagination=m.CursorPagination(
                    type_="cursor", cursor_param="cursor", next_cursor="next_cursor"
                ),
            )

        body = m.ConnectorCreate(
            name="generated",
            source=http_source(source),
            indexer=m.StoreIndexerConfig(type_="store"),
            page_retries=0,
        )
        created = await create.asyncio_detailed(client=client, body=body)
        assert created.status_code == HTTPStatus.CREATED, created.content
        assert isinstance(created.parsed, m.Connector)
        cid = created.parsed.id

        started = await trigger.asyncio_detailed(cid, client=client)
        assert started.status_code == HTTPStatus.ACCEPTED, started.content
        assert isinstance(started.parsed, m.SyncStarted)
        first_run = started.parsed.run_id

        async def idle() -> bool:
            got = await get.asyncio_detailed(cid, client=client)
            assert isinstance(got.parsed, m.Connector), got.content
            return bool(got.parsed.sync_status == m.ConnectorSyncStatus.IDLE)

        await _until(idle, "the first sync to finish")

        listed = await runs.asyncio(cid, client=client)
        assert isinstance(listed, m.RunList)
        [run] = listed.data
        assert (run.id, run.outcome) == (first_run, m.RunOutcome.SUCCEEDED)
        assert (run.pages, run.documents_seen) == (3, 25)

        ids: list[str] = []
        cursor: Any = gen.types.UNSET
        while True:
            page = await documents.asyncio(cid, client=client, limit=10, cursor=cursor)
            assert isinstance(page, m.DocumentList)
            ids += [doc.external_id for doc in page.data]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert sorted(ids) == sorted(str(r["id"]) for r in source.records)

        # Another sync, on a source that never answers: abort it.
        patched = await update.asyncio_detailed(
            cid, client=client, body=m.ConnectorPatch(source=http_source(hanging))
        )
        assert patched.status_code == HTTPStatus.OK, patched.content
        started = await trigger.asyncio_detailed(cid, client=client)
        assert started.status_code == HTTPStatus.ACCEPTED, started.content
        second_run = started.parsed.run_id
        await asyncio.wait_for(hanging.requested(None).wait(), STATE_TIMEOUT)

        aborted = await abort.asyncio_detailed(cid, client=client)
        assert aborted.status_code == HTTPStatus.ACCEPTED, aborted.content
        assert isinstance(aborted.parsed, m.AbortRequested)
        assert aborted.parsed.run_id == second_run
        await _until(idle, "the aborted sync to stop")
        listed = await runs.asyncio(cid, client=client)
        assert [(r.id, r.outcome) for r in listed.data] == [
            (second_run, m.RunOutcome.ABORTED),
            (first_run, m.RunOutcome.SUCCEEDED),
        ]

        deleted = await delete.asyncio_detailed(cid, client=client)
        assert deleted.status_code == HTTPStatus.ACCEPTED, deleted.content
        assert isinstance(deleted.parsed, m.Deleting)

        async def gone() -> bool:
            got = await get.asyncio_detailed(cid, client=client)
            return bool(got.status_code == HTTPStatus.NOT_FOUND)

        await _until(gone, "the deleted connector to be gone")
