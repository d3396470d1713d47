"""The ``opensearch`` indexer in a running daemon, on both backend pairs, against the local
engine of :mod:`tests.integration.searchserver`: a sync fills the index, a re-sync updates what
changed, a full crawl deletes what is gone at the source (DESIGN.md §11), partial ``_bulk``
failures fail exactly their documents, the credentials are sent and never shown or logged,
and an index of the wrong shape fails the documents with the reason."""

from __future__ import annotations

import base64
import functools
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from syncd.api import views
from syncd.daemon import Daemon
from syncd.indexers.base import IndexerKind
from syncd.indexers.opensearch import OpenSearchIndexer, OpenSearchIndexerConfig, opensearch_secrets
from syncd.indexers.opensearch.bulk import INDEX_MAPPINGS, document_id
from syncd.models import DocStatus
from syncd.observability.logs import configure_logging
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.indexing import settled, statuses, sync
from tests.integration.searchmapping import shown
from tests.integration.searchserver import SearchServer
from tests.integration.sourceserver import SourceServer, make_records

pytestmark = pytest.mark.usefixtures("logging_state")

TIMEOUT = 15.0
USER, PASSWORD = "syncd-writer", "os-canary-password-7f3a9c"


@pytest.fixture
async def engine() -> AsyncIterator[SearchServer]:
    async with SearchServer(users={USER: PASSWORD}) as server:
        yield server


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    async with SourceServer(25, page_size=10) as server:
        yield server


def indexer_config(engine: SearchServer, **extra: Any) -> dict[str, Any]:
    auth = {"type": "basic", "username": USER, "password": "${env:OS_TEST_PASSWORD}"}
    return {"type": "opensearch", "url": engine.url, "index": "syncd-docs", "auth": auth, **extra}


async def started(make_any_daemon: DaemonFactory, sleeps: list[float] | None = None) -> Daemon:
    daemon = make_any_daemon()
    if sleeps is not None:
        # The kind as built in, with a sleep that records its waits instead of waiting.
        async def sleep(delay: float) -> None:
            sleeps.append(delay)

        factory = functools.partial(OpenSearchIndexer, sleep=sleep)
        kind = IndexerKind(
            "opensearch",
            factory,
            config_model=OpenSearchIndexerConfig,
            secrets=opensearch_secrets,
            supports_delete=True,
        )
        daemon.register_indexer("opensearch", kind)
    await daemon.start()
    return daemon


async def test_sync_update_and_delete_mirror_the_source(
    make_any_daemon: DaemonFactory,
    engine: SearchServer,
    source: SourceServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OS_TEST_PASSWORD", PASSWORD)
    out = io.StringIO()
    configure_logging("debug", "json", stream=out)
    daemon = await started(make_any_daemon)
    body = {"name": "tickets", "source": http_source(source), "indexer": indexer_config(engine)}
    cid = (await daemon.create_connector(body)).id

    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=25), TIMEOUT)

    # The index was created with the documented mapping; one document per record.
    assert engine.mapping("syncd-docs") == shown(INDEX_MAPPINGS)
    records = {r["id"]: r for r in source.records}
    stored = engine.documents("syncd-docs")
    assert (
        set(stored)
        == {document_id(cid, eid) for eid in records}
        == {f"{cid}:{eid}" for eid in records}
    )
    for eid, record in records.items():
        got = stored[f"{cid}:{eid}"]
        kept = await daemon.get_document(cid, eid)
        assert got["payload"] == record
        assert (got["connector_id"], got["external_id"]) == (cid, eid)
        assert got["content_hash"] == kept.content_hash
        assert set(got) == {
            "connector_id",
            "external_id",
            "content_hash",
            "title",
            "text",
            "url",
            "updated_at",
            "metadata",
            "payload",
            "indexed_at",
        }
    # Every request carried the credentials.
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert {r.headers.get("Authorization") for r in engine.requests} == {basic}

    # A changed record is written again; the others are not sent again.
    changed = make_records(25)
    changed[3] = {**changed[3], "title": "Changed at the source"}
    source.set_records(changed)
    bulks_before = len(engine.bulk_requests())
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=25), TIMEOUT)
    again = [
        json.loads(line)
        for r in engine.bulk_requests()[bulks_before:]
        for line in r.body.splitlines()
    ]
    assert [a["index"]["_id"] for a in again[::2]] == [f"{cid}:item-00003"]
    assert engine.document("syncd-docs", f"{cid}:item-00003")["payload"]["title"] == (
        "Changed at the source"
    )
    assert engine.version("syncd-docs", f"{cid}:item-00003") == 2

    # Gone at the source: the completed full crawl deletes them from the index.
    source.set_records(changed[:20])
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=20, deleted=5), TIMEOUT)
    assert set(engine.documents("syncd-docs")) == {f"{cid}:{r['id']}" for r in changed[:20]}
    found = await statuses(daemon, cid)
    assert {eid for eid, (s, _) in found.items() if s is DocStatus.DELETED} == {
        f"item-{i:05d}" for i in range(20, 25)
    }

    # The credentials are shown as a mask and never logged.
    connector = await daemon.get_connector(cid)
    answer = views.connector_json(connector, await daemon.document_counts(cid))
    assert answer["indexer"] == {**indexer_config(engine), "auth": "***"}
    text = views.connector_text(connector, await daemon.document_counts(cid))
    await daemon.stop()
    logged = out.getvalue()
    assert "opensearch.index_created" in logged
    for secret in (PASSWORD, basic.split(" ", 1)[1]):
        assert secret not in text and secret not in logged


async def test_partial_bulk_failures_fail_exactly_their_documents(
    make_any_daemon: DaemonFactory,
    engine: SearchServer,
    source: SourceServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OS_TEST_PASSWORD", PASSWORD)
    sleeps: list[float] = []
    daemon = await started(make_any_daemon, sleeps)
    body = {"name": "tickets", "source": http_source(source), "indexer": indexer_config(engine)}
    cid = (await daemon.create_connector(body)).id
    bad, busy = "item-00004", ["item-00007", "item-00015"]
    engine.fail_items(
        [f"{cid}:{bad}"], status=400, reason="failed to parse field [payload.title] of type [long]"
    )
    engine.fail_items([f"{cid}:{eid}" for eid in busy], status=429, times=1)

    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=24, failed=1), TIMEOUT)

    found = await statuses(daemon, cid)
    assert found[bad] == (
        DocStatus.FAILED,
        "400 mapper_parsing_exception: failed to parse field [payload.title] of type [long]",
    )
    assert all(found[eid] == (DocStatus.INDEXED, None) for eid in busy)
    assert set(engine.documents("syncd-docs")) == {f"{cid}:{eid}" for eid in found if eid != bad}
    assert sleeps and set(sleeps) == {1.0}  # each rejected batch waited once, then went through

    # Retried through the API once the cause is gone, the failed document is indexed.
    assert await daemon.retry_failed(cid) == 1
    await daemon.wait_documents(cid, settled(indexed=25), TIMEOUT)
    assert f"{cid}:{bad}" in engine.documents("syncd-docs")


async def test_an_index_of_the_wrong_shape_fails_the_documents(
    make_daemon: DaemonFactory,
    engine: SearchServer,
    source: SourceServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OS_TEST_PASSWORD", PASSWORD)
    mappings = json.loads(json.dumps(INDEX_MAPPINGS))
    mappings["properties"]["text"] = {"type": "keyword"}
    engine.create_index("syncd-docs", mappings)
    daemon = make_daemon()
    await daemon.start()
    body = {"name": "tickets", "source": http_source(source), "indexer": indexer_config(engine)}
    cid = (await daemon.create_connector(body)).id

    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(failed=25), TIMEOUT)

    errors = {error for _, error in (await statuses(daemon, cid)).values()}
    assert errors == {
        f"index 'syncd-docs' at {engine.url} cannot be used: wrong shape (an existing index is "
        "never altered): 'text' is mapped as keyword (needs text)"
    }
    assert engine.mapping("syncd-docs") == shown(mappings)
    assert engine.documents("syncd-docs") == {} and not engine.bulk_requests()
