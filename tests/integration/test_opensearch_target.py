"""The ``opensearch`` indexer against the local engine of :mod:`tests.integration.searchserver`
(both flavors), through a real transport: the index it creates, the ``_bulk`` bodies it sends,
how each item's answer becomes a document's result, the retries of rejected items and of whole
requests, authentication, and the refusal of an index of the wrong shape."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from syncd.http.transport import Transport
from syncd.indexers.base import IndexerContext
from syncd.indexers.opensearch import OpenSearchError, OpenSearchIndexer
from syncd.indexers.opensearch.bulk import INDEX_MAPPINGS, document_id
from syncd.models import DocStatus, Document, DocumentFields
from tests.integration.searchmapping import shown
from tests.integration.searchserver import SearchServer

CID = "0190a1b2c3d4e5f60718293a4b"
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
FLAVORS = ["opensearch", "elasticsearch"]


class Sleeps:
    """A sleep that records its delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
async def transport_sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def transport(transport_sleeps: Sleeps) -> AsyncIterator[Transport]:
    async with Transport(sleep=transport_sleeps) as t:
        yield t


@pytest.fixture(params=FLAVORS)
async def server(request: pytest.FixtureRequest) -> AsyncIterator[SearchServer]:
    async with SearchServer(flavor=request.param) as s:
        yield s


def doc(external_id: str, payload: Any = None, **kw: Any) -> Document:
    payload = {"id": external_id} if payload is None else payload
    return Document(CID, external_id, DocStatus.RUNNING, "c" * 64, NOW, NOW, payload=payload, **kw)


def indexer(
    server: SearchServer, transport: Transport, sleeps: Sleeps | None = None, **config: Any
) -> OpenSearchIndexer:
    full = {"type": "opensearch", "url": server.url, "index": "docs", **config}
    return OpenSearchIndexer(full, IndexerContext(CID, transport), sleep=sleeps or Sleeps())


def _id(external_id: str) -> str:
    return document_id(CID, external_id)


# --- the index and the documents ----------------------------------------------------------


async def test_a_missing_index_is_created_with_the_mapping(
    server: SearchServer, transport: Transport
) -> None:
    target = indexer(server, transport)
    long_id = "L" * 600
    failures = await target.index_batch(
        [doc("a"), doc("b", {"id": "b", "n": 10**30}), doc(long_id)]
    )
    assert failures == {}
    assert server.mapping("docs") == shown(INDEX_MAPPINGS)
    puts = [r for r in server.requests if r.method == "PUT"]
    assert [(r.path, json.loads(r.body)) for r in puts] == [
        ("/docs", {"mappings": json.loads(json.dumps(INDEX_MAPPINGS))})
    ]
    assert set(server.documents("docs")) == {_id("a"), _id("b"), _id(long_id)}
    assert _id(long_id).startswith(f"{CID}#sha256:")
    source = server.document("docs", _id("b"))
    assert source["payload"] == {"id": "b", "n": 10**30}
    assert (source["connector_id"], source["external_id"], source["content_hash"]) == (
        CID,
        "b",
        "c" * 64,
    )
    assert server.document("docs", _id(long_id))["external_id"] == long_id
    (bulk,) = server.bulk_requests()
    assert bulk.headers["Content-Type"] == "application/x-ndjson"
    assert bulk.body.endswith(b"\n") and len(bulk.body.splitlines()) == 6
    # The index is looked at once: later calls go straight to _bulk.
    await target.index_batch([doc("c")])
    assert [r.path for r in server.requests].count("/docs/_mapping") == 1


async def test_the_document_shape_is_written_and_searchable_fields_are_typed(
    server: SearchServer, transport: Transport
) -> None:
    fields = DocumentFields(
        title="Printer on fire",
        text="It burns.",
        url="https://t.example.com/1",
        updated_at="2024-04-30T08:00:00Z",
        metadata={"status": "open", "priority": 2, "when": "2024-01-01"},
    )
    assert await indexer(server, transport).index_batch([doc("1", fields=fields)]) == {}
    source = server.document("docs", _id("1"))
    assert source["title"] == "Printer on fire" and source["metadata"]["priority"] == 2
    meta = server.mapping("docs")["properties"]["metadata"]["properties"]
    # Strings of metadata are keywords, dates are not detected, numbers stay numbers.
    assert meta == {
        "status": {"type": "keyword", "ignore_above": 1024},
        "priority": {"type": "long"},
        "when": {"type": "keyword", "ignore_above": 1024},
    }


async def test_reindexing_replaces_and_deleting_removes(
    server: SearchServer, transport: Transport
) -> None:
    target = indexer(server, transport)
    await target.index_batch([doc("a"), doc("b")])
    assert await target.index_batch([doc("a", {"id": "a", "v": 2})]) == {}
    assert server.version("docs", _id("a")) == 2
    assert server.document("docs", _id("a"))["payload"] == {"id": "a", "v": 2}
    # "never-indexed" is answered 404 not_found: deleted all the same.
    assert await target.delete_batch([doc("a"), doc("never-indexed")]) == {}
    assert set(server.documents("docs")) == {_id("b")}
    await target.delete(doc("b"))
    assert server.documents("docs") == {}


# --- per-item results ---------------------------------------------------------------------


async def test_item_failures_fail_their_documents_only(
    server: SearchServer, transport: Transport
) -> None:
    sleeps = Sleeps()
    target = indexer(server, transport, sleeps)
    server.fail_items([_id("bad")], status=400, reason="failed to parse field [payload]")
    server.fail_items([_id("busy-1"), _id("busy-2")], status=429, times=1)
    batch = [
        doc("ok"),
        doc("bad"),
        doc("busy-1"),
        doc("busy-2"),
        doc("date", fields=DocumentFields(updated_at="last tuesday")),
    ]
    failures = await target.index_batch(batch)
    assert failures is not None and set(failures) == {"bad", "date"}
    assert failures["bad"] == "400 mapper_parsing_exception: failed to parse field [payload]"
    assert failures["date"].startswith(
        "400 mapper_parsing_exception: failed to parse field [updated_at] of type [date]"
    )
    assert (
        "caused by illegal_argument_exception: failed to parse date field [last tuesday]"
        in (failures["date"])
    )
    assert set(server.documents("docs")) == {_id("ok"), _id("busy-1"), _id("busy-2")}
    # The rejected items, and only they, went again after one wait.
    assert sleeps.delays == [1.0]
    first, second = server.bulk_requests()
    assert len(first.body.splitlines()) == 10
    sent_again = [json.loads(line) for line in second.body.splitlines()[::2]]
    assert [a["index"]["_id"] for a in sent_again] == [_id("busy-1"), _id("busy-2")]


async def test_rejections_are_retried_a_bounded_number_of_times(
    server: SearchServer, transport: Transport
) -> None:
    sleeps = Sleeps()
    target = indexer(server, transport, sleeps)
    server.fail_items([_id("busy")], status=429, times=100)
    failures = await target.index_batch([doc("busy"), doc("fine")])
    rejected = (
        "es_rejected_execution_exception"
        if server.flavor == "elasticsearch"
        else "rejected_execution_exception"
    )
    assert failures == {
        "busy": f"still rejected after 3 retries: 429 {rejected}: rejected execution of "
        "coordinating operation"
    }
    assert sleeps.delays == [1.0, 2.0, 4.0]
    assert len(server.bulk_requests()) == 4
    assert set(server.documents("docs")) == {_id("fine")}


async def test_a_503_rejection_is_retried_other_503_items_fail(
    server: SearchServer, transport: Transport
) -> None:
    target = indexer(server, transport)
    server.fail_items([_id("queue")], status=503, error_type="es_rejected_execution_exception")
    server.fail_items(
        [_id("shard")],
        status=503,
        error_type="unavailable_shards_exception",
        reason="primary shard is not active",
    )
    failures = await target.index_batch([doc("queue"), doc("shard")])
    assert failures == {"shard": "503 unavailable_shards_exception: primary shard is not active"}
    assert set(server.documents("docs")) == {_id("queue")}


async def test_a_delete_that_fails_is_reported(server: SearchServer, transport: Transport) -> None:
    target = indexer(server, transport)
    await target.index_batch([doc("a")])
    server.fail_items(
        [_id("a")],
        status=403,
        error_type="security_exception",
        reason="action [indices:data/write/bulk[s]] is unauthorized",
    )
    failures = await target.delete_batch([doc("a")])
    assert failures == {
        "a": "403 security_exception: action [indices:data/write/bulk[s]] is unauthorized"
    }
    server.fail_items([_id("a")], status=403, error_type="security_exception", reason="no")
    with pytest.raises(OpenSearchError, match="403 security_exception"):
        await target.delete(doc("a"))


# --- whole requests go through the transport ----------------------------------------------


async def test_a_bulk_answered_503_is_retried_by_the_transport(
    server: SearchServer, transport: Transport, transport_sleeps: Sleeps
) -> None:
    target = indexer(server, transport)
    await target.index_batch([doc("a")])
    server.fail_requests(503, times=2)
    assert await target.index_batch([doc("b")]) == {}
    assert transport_sleeps.delays == [0.0, 4.0]  # the transport's schedule: 0, 4, 8 s
    assert _id("b") in server.documents("docs")


async def test_a_bulk_answered_429_waits_for_retry_after(
    server: SearchServer, transport: Transport, transport_sleeps: Sleeps
) -> None:
    target = indexer(server, transport)
    await target.index_batch([doc("a")])
    server.fail_requests(429, headers={"Retry-After": "7"})
    assert await target.index_batch([doc("b")]) == {}
    assert transport_sleeps.delays == [7.0]


async def test_a_refused_bulk_fails_every_document_it_carried(
    server: SearchServer, transport: Transport, transport_sleeps: Sleeps
) -> None:
    target = indexer(server, transport)
    await target.index_batch([doc("a")])
    server.fail_requests(413, times=1)
    failures = await target.index_batch([doc("b"), doc("c")])
    assert failures == {
        "b": "HTTP 413 status_exception: scripted 413",
        "c": "HTTP 413 status_exception: scripted 413",
    }
    assert transport_sleeps.delays == []


async def test_large_batches_are_split_by_bytes(server: SearchServer, transport: Transport) -> None:
    full = {"type": "opensearch", "url": server.url, "index": "docs"}
    target = OpenSearchIndexer(full, IndexerContext(CID, transport), max_request_bytes=2000)
    docs = [doc(f"d{i}", {"id": f"d{i}", "blob": "x" * 300}) for i in range(12)]
    assert await target.index_batch(docs) == {}
    assert len(server.documents("docs")) == 12
    assert len(server.bulk_requests()) > 2
    assert all(len(r.body) <= 2000 for r in server.bulk_requests())


# --- the index: created, raced, refused ---------------------------------------------------


async def test_an_index_created_meanwhile_is_used(
    server: SearchServer, transport: Transport
) -> None:
    server.race_create("docs")
    assert await indexer(server, transport).index_batch([doc("a")]) == {}
    assert [r.path for r in server.requests] == [
        "/docs/_mapping",
        "/docs",
        "/docs/_mapping",
        "/_bulk",
    ]
    assert _id("a") in server.documents("docs")


async def test_an_index_of_the_wrong_shape_is_refused_and_left_alone(
    server: SearchServer, transport: Transport
) -> None:
    mappings = json.loads(json.dumps(INDEX_MAPPINGS))
    mappings["properties"]["text"] = {"type": "keyword"}
    del mappings["properties"]["payload"]
    server.create_index("docs", mappings)
    before = server.mapping("docs")
    target = indexer(server, transport)
    expected = (
        f"index 'docs' at {server.url} cannot be used: wrong shape (an existing index is never "
        "altered): 'text' is mapped as keyword (needs text); 'payload' is not mapped (needs "
        "object with enabled: false)"
    )
    with pytest.raises(OpenSearchError) as info:
        await target.index_batch([doc("a")])
    assert str(info.value) == expected
    config = {"type": "opensearch", "url": server.url, "index": "docs"}
    problems = await OpenSearchIndexer.check(config, IndexerContext(CID, transport))
    assert problems == [expected.split("cannot be used: ", 1)[1]]
    assert server.mapping("docs") == before and server.documents("docs") == {}
    assert not server.bulk_requests()
    assert {r.method for r in server.requests} == {"GET"}


async def test_without_create_index_a_missing_index_is_refused(
    server: SearchServer, transport: Transport
) -> None:
    target = indexer(server, transport, create_index=False)
    with pytest.raises(OpenSearchError, match="it does not exist and create_index is false"):
        await target.index_batch([doc("a")])
    config = {"type": "opensearch", "url": server.url, "index": "docs", "create_index": False}
    context = IndexerContext(CID, transport)
    assert await OpenSearchIndexer.check(config, context) == [
        "it does not exist and create_index is false"
    ]
    # With create_index (the default) a missing index is no problem: it is made at first use.
    assert await OpenSearchIndexer.check({**config, "create_index": True}, context) == []
    assert server.indices == {}


async def test_an_index_deleted_meanwhile_is_created_again(transport: Transport) -> None:
    async with SearchServer(auto_create_index=False) as server:
        target = indexer(server, transport)
        await target.index_batch([doc("a")])
        del server.indices["docs"]
        failures = await target.index_batch([doc("b")])
        assert failures == {"b": "404 index_not_found_exception: no such index [docs]"}
        assert await target.index_batch([doc("b")]) == {}
        assert server.mapping("docs") == shown(INDEX_MAPPINGS)


async def test_check_reports_an_unreachable_cluster(transport: Transport) -> None:
    config = {"type": "opensearch", "url": "http://127.0.0.1:9", "index": "docs"}
    (problem,) = await OpenSearchIndexer.check(config, IndexerContext(CID, transport))
    assert problem.startswith("index 'docs' at http://127.0.0.1:9: ")


# --- authentication -----------------------------------------------------------------------


async def test_basic_auth_with_a_file_secret_resolved_per_request(
    transport: Transport, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("first-password\n")
    async with SearchServer(users={"syncd": "first-password"}) as server:
        auth = {"type": "basic", "username": "syncd", "password": f"${{file:{secret}}}"}
        target = indexer(server, transport, auth=auth)
        assert await target.index_batch([doc("a")]) == {}
        sent = {r.headers["Authorization"] for r in server.requests}
        assert sent == {"Basic " + base64.b64encode(b"syncd:first-password").decode()}
        # Rotated: the next request reads the file again.
        server.users["syncd"] = "second-password"
        secret.write_text("second-password\n")
        assert await target.index_batch([doc("b")]) == {}
        assert server.requests[-1].headers["Authorization"] == (
            "Basic " + base64.b64encode(b"syncd:second-password").decode()
        )


@pytest.mark.parametrize(
    "auth",
    [
        {"type": "api_key", "id": "VuaCfGcBCdbkQm-e5aOx", "api_key": "ui2lp2axTNmsyakw9tvNnw"},
        {
            "type": "api_key",
            "encoded": "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==",
        },
        {"type": "bearer", "token": "dGhpcyBpcyBub3QgYSByZWFsIHRva2Vu"},
    ],
    ids=["api_key-id", "api_key-encoded", "bearer"],
)
async def test_api_key_and_bearer_auth(transport: Transport, auth: dict[str, str]) -> None:
    key = {"VuaCfGcBCdbkQm-e5aOx": "ui2lp2axTNmsyakw9tvNnw"}
    async with SearchServer(
        flavor="elasticsearch", api_keys=key, tokens={"dGhpcyBpcyBub3QgYSByZWFsIHRva2Vu"}
    ) as server:
        assert await indexer(server, transport, auth=auth).index_batch([doc("a")]) == {}
        expected = (
            "Bearer dGhpcyBpcyBub3QgYSByZWFsIHRva2Vu"
            if auth["type"] == "bearer"
            else "ApiKey VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw=="
        )
        assert {r.headers["Authorization"] for r in server.requests} == {expected}


async def test_refused_credentials_fail_the_documents(transport: Transport) -> None:
    # A password is a secret for the whole process's log redaction: one that is also a
    # common word ("wrong") would mask that word in every later test's messages.
    auth = {"type": "basic", "username": "syncd", "password": "not-the-password-5c1e"}
    async with SearchServer(flavor="elasticsearch", users={"syncd": "right"}) as server:
        with pytest.raises(OpenSearchError) as info:
            await indexer(server, transport, auth=auth).index_batch([doc("a")])
        assert "HTTP 401 security_exception: unable to authenticate user [syncd]" in str(info.value)
    async with SearchServer(flavor="opensearch", users={"syncd": "right"}) as server:
        with pytest.raises(OpenSearchError, match=r"its mapping could not be read: HTTP 401$"):
            await indexer(server, transport, auth=auth).index_batch([doc("a")])
