"""Synchronous source plugins (a plain ``def fetch_page`` run in a worker thread) and
``hash_fields`` (the content hash limited to some fields), on both backend pairs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from syncd.api.views import connector_json
from syncd.daemon import Daemon
from syncd.errors import ValidationError
from syncd.indexers.base import IndexerContext
from syncd.jsontext import canonical_json, content_hash
from syncd.models import DocStatus, Document, Page, Run, RunOutcome
from syncd.paths import MSG_PATH
from syncd.rules.records import document_inputs, hash_paths, hashed_part
from syncd.sources.base import SourceContext, StatefulSource
from syncd.sources.threaded import ThreadedSource, as_async
from tests.integration.conftest import DaemonFactory
from tests.integration.plugins.blocking_source import (
    Catalogue,
    CatalogueSource,
    catalogue_source,
)

ABORT_BUDGET_SECONDS = 0.1
"""How soon a run blocked in a plugin's thread ends once the abort returns."""


def items(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"i{n}", "title": f"item {n}", **extra} for n in range(count)]


async def started(make: DaemonFactory, client: Catalogue, **sections: dict[str, Any]) -> Daemon:
    daemon = make(**sections)
    daemon.register_source("catalogue", catalogue_source(client))
    await daemon.start()
    return daemon


async def sync(daemon: Daemon, connector_id: str) -> None:
    await daemon.trigger_sync(connector_id)
    await daemon.wait_run(connector_id)


async def latest_run(daemon: Daemon, connector_id: str, run_id: str) -> Run:
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    assert runs[0].id == run_id
    return runs[0]


async def wait_thread_event(event: threading.Event) -> None:
    """Wait for an event set by a plugin's thread (bounded: a test never hangs)."""
    assert await asyncio.to_thread(event.wait, 5.0), "the plugin's thread did not get there"


# --- synchronous sources ---------------------------------------------------------------


async def test_blocking_source_syncs_end_to_end(make_any_daemon: DaemonFactory) -> None:
    client = Catalogue(items(5), page_size=2, delay=0.001)
    daemon = await started(make_any_daemon, client)
    c = await daemon.create_connector({"name": "sdk", "source": {"type": "catalogue"}})
    await sync(daemon, c.id)
    runs, _ = await daemon.list_runs(c.id)
    assert (runs[0].outcome, runs[0].pages, runs[0].documents_seen) == (RunOutcome.SUCCEEDED, 3, 5)
    assert (await daemon.document_counts(c.id))[DocStatus.INDEXED] == 5
    doc = await daemon.get_document(c.id, "i4")
    assert doc.payload == {"id": "i4", "title": "item 4"}
    # The blocking calls ran in worker threads, never on the event loop's.
    assert client.threads and threading.current_thread().name not in client.threads


async def test_abort_abandons_a_blocked_thread_at_once(make_any_daemon: DaemonFactory) -> None:
    client = Catalogue(items(6), page_size=2)
    client.hold_page = 1  # the second page's call blocks until released
    daemon = await started(make_any_daemon, client)
    try:
        c = await daemon.create_connector({"name": "stuck", "source": {"type": "catalogue"}})
        run_id = await daemon.trigger_sync(c.id)
        await wait_thread_event(client.entered)
        await daemon.wait_connector(c.id, lambda x: x.progress.pages == 1)

        began = time.monotonic()
        assert await daemon.abort_sync(c.id) == run_id
        await asyncio.wait_for(daemon.wait_run(c.id), 2.0)
        elapsed = time.monotonic() - began
        assert not client.returned.is_set(), "the thread was still blocked"
        assert elapsed < ABORT_BUDGET_SECONDS, f"the run took {elapsed:.3f} s to end"

        run = await latest_run(daemon, c.id, run_id)
        assert (run.outcome, run.pages, run.documents_seen) == (RunOutcome.ABORTED, 1, 2)
        before = await daemon.list_documents(c.id)
    finally:
        client.release.set()
    # The thread's late page is discarded: nothing is written after the abort.
    await wait_thread_event(client.returned)
    assert await daemon.list_documents(c.id) == before
    assert [d.external_id for d in before[0]] == ["i0", "i1"]
    run = await latest_run(daemon, c.id, run_id)
    assert (run.outcome, run.pages, run.documents_seen) == (RunOutcome.ABORTED, 1, 2)
    # The next run resumes from the committed cursor and gets everything.
    client.hold_page = None
    await sync(daemon, c.id)
    assert (await daemon.document_counts(c.id))[DocStatus.INDEXED] == 6


class _Marks:
    """A blocking source with a checkpoint: the highest id number seen so far."""

    def __init__(self, config: Mapping[str, Any], context: SourceContext) -> None:
        self.mark = int(context.state.get("mark", -1))

    def fetch_page(self, cursor: str | None) -> Page:
        records = [{"id": self.mark + 1}, {"id": self.mark + 2}]
        self.mark += 2
        return Page(records, "1" if cursor is None else None)

    def checkpoint(self) -> Mapping[str, Any]:
        return {"mark": self.mark}


async def test_blocking_source_keeps_its_checkpoint(make_any_daemon: DaemonFactory) -> None:
    daemon = make_any_daemon()
    daemon.register_source("marks", _Marks)
    await daemon.start()
    c = await daemon.create_connector({"name": "marks", "source": {"type": "marks"}})
    await sync(daemon, c.id)
    await sync(daemon, c.id)  # starts from the mark the first crawl completed with
    docs, _ = await daemon.list_documents(c.id)
    assert sorted(int(d.external_id) for d in docs) == list(range(8))


def test_as_async_wraps_only_plain_fetch_page() -> None:
    context = SourceContext(connector_id="c", transport=None)  # type: ignore[arg-type]
    wrapped = as_async(_Marks({}, context))
    assert isinstance(wrapped, ThreadedSource)
    assert isinstance(wrapped, StatefulSource)
    plain = as_async(CatalogueSource({}, context, Catalogue([])))  # not stateful
    assert isinstance(plain, ThreadedSource) and not isinstance(plain, StatefulSource)

    class Native:
        async def fetch_page(self, cursor: str | None) -> Page:
            return Page([])

    native = Native()
    assert as_async(native) is native


async def test_preview_of_a_blocking_source(make_daemon: DaemonFactory) -> None:
    client = Catalogue(items(5), page_size=2)
    daemon = await started(make_daemon, client)
    preview = await daemon.preview(
        {"connector": {"name": "p", "source": {"type": "catalogue"}}, "pages": 2}
    )
    assert preview.error is None
    assert [p.ids for p in preview.pages] == [("i0", "i1"), ("i2", "i3")]


# --- hash_fields -----------------------------------------------------------------------


class _Counting:
    """A queued plugin indexer that counts its calls per external id."""

    calls: Counter[str]

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        pass

    async def index(self, document: Document) -> None:
        self.calls[document.external_id] += 1


def counting_indexer() -> tuple[type[_Counting], Counter[str]]:
    calls: Counter[str] = Counter()
    return type("Counting", (_Counting,), {"calls": calls}), calls


async def test_hash_fields_ignore_volatile_fields(make_any_daemon: DaemonFactory) -> None:
    records: list[dict[str, Any]] = [
        {"id": "a", "title": "A", "author": {"name": "x", "views": 1}, "fetched_at": "t1"},
        {"id": "b", "title": "B", "author": {"name": "y", "views": 1}, "fetched_at": "t1"},
        {"id": "c", "title": "C", "fetched_at": "t1"},  # no author: author.name is absent
    ]
    client = Catalogue(records, page_size=10)
    indexer, calls = counting_indexer()
    daemon = make_any_daemon()
    daemon.register_source("catalogue", catalogue_source(client))
    daemon.register_indexer("counting", indexer)
    await daemon.start()
    c = await daemon.create_connector(
        {
            "name": "volatile",
            "source": {"type": "catalogue"},
            "indexer": {"type": "counting"},
            "hash_fields": ["title", "author.name", "title"],
        }
    )
    assert c.hash_fields == ("title", "author.name")  # duplicates dropped, order kept
    assert (await daemon.get_connector(c.id)).hash_fields == ("title", "author.name")
    assert connector_json(c, {})["hash_fields"] == ["title", "author.name"]

    await sync(daemon, c.id)
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 3)
    assert calls == {"a": 1, "b": 1, "c": 1}

    # Volatile fields change everywhere; b's title too, and c's author.name (absent, then
    # null). A null author would leave author.name absent: the hash would not change.
    client.items = [
        {**records[0], "author": {"name": "x", "views": 9}, "fetched_at": "t2"},
        {**records[1], "title": "B2", "author": {"name": "y", "views": 9}, "fetched_at": "t2"},
        {**records[2], "author": {"name": None}, "fetched_at": "t2"},
    ]
    await sync(daemon, c.id)
    runs, _ = await daemon.list_runs(c.id)
    assert (runs[0].outcome, runs[0].documents_seen) == (RunOutcome.SUCCEEDED, 3)
    assert runs[0].documents_enqueued == 2
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 3)
    assert calls == {"a": 1, "b": 2, "c": 2}
    # A document whose hash did not change keeps the payload it was indexed with.
    assert (await daemon.get_document(c.id, "a")).payload == records[0]
    assert (await daemon.get_document(c.id, "b")).payload == client.items[1]


async def test_without_hash_fields_any_change_reindexes(make_any_daemon: DaemonFactory) -> None:
    client = Catalogue(items(2, views=1), page_size=10)
    daemon = await started(make_any_daemon, client)
    c = await daemon.create_connector({"name": "whole", "source": {"type": "catalogue"}})
    assert c.hash_fields is None
    assert connector_json(c, {})["hash_fields"] is None
    await sync(daemon, c.id)
    client.items = items(2, views=2)
    await sync(daemon, c.id)
    runs, _ = await daemon.list_runs(c.id)
    assert runs[0].documents_enqueued == 2


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ([], "Must be null or a non-empty list of paths"),
        ("title", "Must be null or a non-empty list of paths"),
        (["x"] * 101, "Must list at most 100 paths"),
    ],
)
async def test_hash_fields_are_validated(daemon: Daemon, value: Any, error: str) -> None:
    with pytest.raises(ValidationError) as info:
        await daemon.create_connector(
            {"name": "x", "source": {"url": "http://h/x"}, "hash_fields": value}
        )
    assert info.value.errors == {"hash_fields": error}


async def test_hash_fields_paths_are_validated(daemon: Daemon) -> None:
    body = {"name": "x", "source": {"url": "http://h/x"}, "hash_fields": ["ok", "", "a..b", 3]}
    with pytest.raises(ValidationError) as info:
        await daemon.create_connector(body)
    message = MSG_PATH
    assert info.value.errors == {f"hash_fields.{i}": message for i in (1, 2, 3)}


def test_the_hashed_sub_document() -> None:
    record = {"id": 1, "t": "x", "a": {"b": 1, "c": [1]}, "n": None, "s": "text"}
    paths = hash_paths(["a.b", "t", "a.b", "missing", "n", "s.deeper", "a.c"])
    assert paths == (("a", "b"), ("a", "c"), ("missing",), ("n",), ("s", "deeper"), ("t",))
    # Missing paths and paths through a non-object are absent; a present null is kept.
    assert hashed_part(record, paths) == {"a": {"b": 1, "c": [1]}, "n": None, "t": "x"}
    # A path covers the longer ones under it, whatever the order they are listed in.
    assert hash_paths(["a.b", "a", "a.b.c"]) == (("a",),)
    assert hashed_part(record, hash_paths(["a.b", "a"])) == {"a": {"b": 1, "c": [1]}}
    # The order of hash_fields does not matter; paths covering the whole record give its hash.
    docs, _ = document_inputs([record], "id", ["t", "a"])
    same, _ = document_inputs([record], "id", ["a", "t"])
    assert (
        docs[0].content_hash == same[0].content_hash == content_hash({"t": "x", "a": record["a"]})
    )
    assert docs[0].payload_json == canonical_json(record).decode()
    whole, _ = document_inputs([record], "id", list(record))
    assert whole[0].content_hash == content_hash(record)


async def test_patching_hash_fields_rehashes_on_the_next_run(
    make_any_daemon: DaemonFactory,
) -> None:
    """A PATCH of `hash_fields` takes effect on the next run (documents whose hash changes
    are re-indexed once), and clearing it hashes whole records again."""
    daemon = make_any_daemon()
    await daemon.start()
    c = await daemon.create_connector(
        {"name": "h", "source": {"type": "http", "url": "http://127.0.0.1:9/x"}}
    )
    patched = await daemon.update_connector(c.id, {"hash_fields": ["title"]})
    assert patched.hash_fields == ("title",)
    assert (await daemon.get_connector(c.id)).hash_fields == ("title",)
    cleared = await daemon.update_connector(c.id, {"hash_fields": None})
    assert cleared.hash_fields is None
