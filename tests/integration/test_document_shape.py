"""The document shape (DESIGN.md §7) end to end: kept with the connector on every backend,
sent to the webhook beside the payload, shown by a preview, given to a plugin."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.indexers.base import IndexerKind
from syncd.models import DocStatus, Document
from tests.integration.conftest import http_source
from tests.integration.loopback import LoopbackServer
from tests.integration.sourceserver import SourceServer

MAPPING = {
    "title": {"template": "{id}: {title}"},
    "text": ["title", "body"],
    "text_format": "html",
    "url": {"template": "https://tickets.example.com/{id}"},
    "updated_at": "updated_at",
    "metadata": {"author": "author.name"},
}


def records(count: int, body: str = "<p>Printer <b>jammed</b></p>") -> list[dict[str, Any]]:
    return [
        {
            "id": f"t-{i}",
            "title": f"Ticket {i}",
            "body": body,
            "author": {"name": f"user{i}"},
            "updated_at": "2024-05-01T12:00:00+02:00",
        }
        for i in range(count)
    ]


class Receiver(LoopbackServer):
    """A webhook receiver keeping every body it was sent."""

    path = "/hook"

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def _handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        return web.json_response({})

    def routes(self, app: web.Application) -> None:
        app.router.add_post(self.path, self._handle)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as r:
        yield r


async def test_the_mapping_is_kept_and_patched_on_every_backend(any_daemon: Daemon) -> None:
    async with SourceServer(records(1)) as server:
        c = await any_daemon.create_connector(
            {"name": "t", "source": http_source(server), "document": MAPPING}
        )
        assert (await any_daemon.get_connector(c.id)).document == MAPPING
        changed = await any_daemon.update_connector(c.id, {"document": {"title": "title"}})
        assert changed.document == {"title": "title"}
        cleared = await any_daemon.update_connector(c.id, {"document": None})
        assert cleared.document is None
        assert (await any_daemon.get_connector(c.id)).document is None


async def test_the_webhook_receives_the_shape_beside_the_payload(
    any_daemon: Daemon, receiver: Receiver
) -> None:
    async with SourceServer(records(3)) as server:
        c = await any_daemon.create_connector(
            {
                "name": "t",
                "source": http_source(server),
                "indexer": {"type": "webhook", "url": receiver.url},
                "document": MAPPING,
            }
        )
        await any_daemon.trigger_sync(c.id)
        await any_daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 3)
    first = next(b for b in receiver.bodies if b["external_id"] == "t-0")
    assert first["payload"] == records(1)[0]
    assert first["document"] == {
        "title": "t-0: Ticket 0",
        "text": "Ticket 0\n\nPrinter jammed",
        "url": "https://tickets.example.com/t-0",
        "updated_at": "2024-05-01T10:00:00Z",
        "metadata": {"author": "user0"},
    }


async def test_without_a_mapping_the_webhook_body_is_unchanged(
    daemon: Daemon, receiver: Receiver
) -> None:
    async with SourceServer(records(1)) as server:
        c = await daemon.create_connector(
            {
                "name": "t",
                "source": http_source(server),
                "indexer": {"type": "webhook", "url": receiver.url, "batch_size": 10},
            }
        )
        await daemon.trigger_sync(c.id)
        await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 1)
    [body] = receiver.bodies
    assert set(body["documents"][0]) == {"connector_id", "external_id", "content_hash", "payload"}


async def test_a_batch_webhook_body_carries_each_shape(daemon: Daemon, receiver: Receiver) -> None:
    async with SourceServer(records(2)) as server:
        c = await daemon.create_connector(
            {
                "name": "t",
                "source": http_source(server),
                "indexer": {"type": "webhook", "url": receiver.url, "batch_size": 10},
                "document": {"title": "title", "metadata": {"id": "id"}},
            }
        )
        await daemon.trigger_sync(c.id)
        await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 2)
    shapes = {d["external_id"]: d["document"] for b in receiver.bodies for d in b["documents"]}
    assert shapes["t-1"] == {
        "title": "Ticket 1",
        "text": None,
        "url": None,
        "updated_at": None,
        "metadata": {"id": "t-1"},
    }


async def test_a_preview_shows_each_documents_shape(daemon: Daemon) -> None:
    async with SourceServer(records(2)) as server:
        found = await daemon.preview(
            {"connector": {"name": "t", "source": http_source(server), "document": MAPPING}}
        )
        plain = await daemon.preview({"connector": {"name": "t", "source": http_source(server)}})
    [page] = found.pages
    assert page.ids == ("t-0", "t-1")
    assert page.documents is not None
    assert [d.title for d in page.documents] == ["t-0: Ticket 0", "t-1: Ticket 1"]
    assert page.documents[1].text == "Ticket 1\n\nPrinter jammed"
    assert plain.pages[0].documents is None


class Collecting:
    """A plugin indexer that keeps the documents it is given."""

    def __init__(self) -> None:
        self.seen: list[Document] = []

    async def index(self, document: Document) -> None:
        self.seen.append(document)

    async def index_batch(self, documents: Sequence[Document]) -> None:
        self.seen.extend(documents)


async def test_a_plugin_gets_the_shape_on_the_document(daemon: Daemon) -> None:
    plugin = Collecting()
    # It reads no payload: the mapping has the workers load it anyway.
    kind = IndexerKind("collect", lambda config, context: plugin, needs_payload=False)
    daemon.register_indexer("collect", kind)
    async with SourceServer(records(2, body="plain text")) as server:
        c = await daemon.create_connector(
            {
                "name": "t",
                "source": http_source(server),
                "indexer": {"type": "collect"},
                "document": {"text": "body", "url": "/author/name"},
            }
        )
        await daemon.trigger_sync(c.id)
        await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 2)
    fields = {d.external_id: d.fields for d in plugin.seen}
    assert fields["t-0"] is not None
    assert (fields["t-0"].text, fields["t-0"].url) == ("plain text", "user0")
