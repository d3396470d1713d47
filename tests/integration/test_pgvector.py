"""The ``pgvector`` indexer in a running daemon, on both backend pairs, against a real
PostgreSQL with pgvector (:mod:`tests.integration.pgvector_server`) and the local
OpenAI-compatible embeddings server (:mod:`tests.integration.embeddingserver`): a sync writes
rows and embedded chunks that a similarity query finds, a changed record has its chunks
replaced while the others are not embedded again, a record gone at the source loses its row
and chunks, a failing embeddings endpoint fails documents without writing half of them, a
chunks table of another dimension is refused, and the API key never shows."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from syncd.api import views
from syncd.http.transport import Transport
from syncd.indexers.base import IndexerContext
from syncd.indexers.pgvector import PgvectorIndexer
from syncd.indexers.pgvector.chunking import Chunker, record_text
from syncd.models import DocStatus
from syncd.observability.logs import configure_logging
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.embeddingserver import EmbeddingServer, embed_text
from tests.integration.indexing import settled, statuses, sync
from tests.integration.sourceserver import SourceServer

pytestmark = pytest.mark.usefixtures("logging_state")

TIMEOUT = 30.0
KEY = "sk-pgvector-canary-9d2e61"
DIMENSIONS = 64
CHUNK_SIZE = 90

TOPICS = {
    "refunds": "Refunds are issued within five days. The card used for the purchase is credited "
    "with the full amount, shipping excluded.",
    "shipping": "Shipping to Europe takes two weeks. Tracking numbers arrive by mail once the "
    "parcel leaves the warehouse.",
    "passwords": "Forgot your password? Reset the password from the login page: the reset link "
    "expires after one hour.",
    "invoices": "Invoices are sent as PDF at the end of each month. Download past invoices from "
    "the billing page.",
    "accounts": "Close an account from the settings page. Closed accounts keep their data for "
    "thirty days before deletion.",
    "api": "The API accepts a bearer token. Rate limits allow one hundred requests per minute "
    "per token.",
}


def records(**changes: str) -> list[dict[str, Any]]:
    return [
        {"id": f"kb-{name}", "title": name.capitalize(), "body": changes.get(name, body)}
        for name, body in TOPICS.items()
    ]


def expected_chunks(record: dict[str, Any]) -> list[str]:
    """The record's chunks as the indexer cuts them (syncd stores JSON with its keys sorted,
    and the indexer reads the stored payload)."""
    return Chunker(size=CHUNK_SIZE).split(record_text(dict(sorted(record.items()))))


@pytest.fixture
async def embeddings(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[EmbeddingServer]:
    monkeypatch.setenv("PGV_TEST_KEY", KEY)
    async with EmbeddingServer(api_key=KEY) as server:
        yield server


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    async with SourceServer(records(), page_size=4) as server:
        yield server


@pytest.fixture
async def db(pgvector_dsn: str) -> AsyncIterator[asyncpg.Connection[Any]]:
    conn = await asyncpg.connect(pgvector_dsn)
    yield conn
    await conn.close()


def indexer_config(dsn: str, server: EmbeddingServer, **extra: Any) -> dict[str, Any]:
    return {
        "type": "pgvector",
        "dsn": dsn,
        "table": "kb",
        "embeddings": {
            "url": server.url,
            "model": "text-embedding-3-small",
            "dimensions": DIMENSIONS,
            "api_key": "${env:PGV_TEST_KEY}",
            "batch_size": 5,
        },
        "chunk_size": CHUNK_SIZE,
        "chunk_overlap": 0,
        **extra,
    }


async def chunks_of(db: asyncpg.Connection[Any]) -> dict[str, list[str]]:
    rows = await db.fetch("SELECT external_id, text FROM kb_chunks ORDER BY 1, chunk_index")
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["external_id"], []).append(row["text"])
    return found


async def nearest(db: asyncpg.Connection[Any], query: str, limit: int = 3) -> list[str]:
    """The README's similarity query: the chunks nearest to the query's embedding."""
    vector = "[" + ",".join(repr(v) for v in embed_text(query, DIMENSIONS)) + "]"
    rows = await db.fetch(
        "SELECT c.external_id, c.text, c.embedding <=> $1::vector AS distance"
        "  FROM kb_chunks c JOIN kb d USING (connector_id, external_id)"
        " ORDER BY c.embedding <=> $1::vector LIMIT $2",
        vector,
        limit,
    )
    return [r["external_id"] for r in rows]


async def test_sync_query_change_and_delete_mirror_the_source(
    pgvector_dsn: str,
    make_any_daemon: DaemonFactory,
    db: asyncpg.Connection[Any],
    embeddings: EmbeddingServer,
    source: SourceServer,
) -> None:
    out = io.StringIO()
    configure_logging("debug", "json", stream=out)
    daemon = make_any_daemon()
    await daemon.start()
    config = indexer_config(pgvector_dsn, embeddings)
    body = {"name": "kb", "source": http_source(source), "indexer": config}
    cid = (await daemon.create_connector(body)).id

    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS)), TIMEOUT)

    # One row per record, its chunks as the splitter cuts the record, each embedded once.
    first = records()
    assert {r["external_id"] for r in await db.fetch("SELECT external_id FROM kb")} == {
        r["id"] for r in first
    }
    want = {r["id"]: expected_chunks(r) for r in first}
    assert all(len(texts) >= 2 for texts in want.values())
    assert await chunks_of(db) == want
    assert sorted(embeddings.embedded) == sorted(t for texts in want.values() for t in texts)
    assert all(len(r.body["input"]) <= 5 for r in embeddings.requests)
    assert {r.headers["Authorization"] for r in embeddings.requests} == {f"Bearer {KEY}"}
    # The HNSW index serves the cosine distance; the table has the configured dimension.
    index = await db.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'kb_chunks'"
        " AND indexname = 'kb_chunks_embedding'"
    )
    assert "USING hnsw (embedding vector_cosine_ops)" in index
    assert (
        await db.fetchval(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'kb_chunks'::regclass AND attname = 'embedding'"
        )
        == f"vector({DIMENSIONS})"
    )

    # Similarity: the nearest chunks to a question are those of the record about it.
    assert (await nearest(db, "how do I reset my password from the login page"))[0] == (
        "kb-passwords"
    )
    assert (await nearest(db, "when are invoices sent as PDF"))[0] == "kb-invoices"

    # A changed record: its chunks are replaced; nothing else is embedded again.
    changed = records(
        shipping="Shipping is free above fifty euros. Parcels to Norway travel by "
        "ferry and arrive within ten days of the order."
    )
    source.set_records(changed)
    embeddings.embedded.clear()
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS)), TIMEOUT)
    new_shipping = expected_chunks(changed[1])
    assert embeddings.embedded == new_shipping
    assert await chunks_of(db) == {**want, "kb-shipping": new_shipping}
    assert (await nearest(db, "ferry to Norway"))[0] == "kb-shipping"

    # A document sent again with the same content (retried through the API) is not
    # embedded again either.
    embeddings.embedded.clear()
    indexer = PgvectorIndexer(config, IndexerContext(cid, daemon.transport))
    try:
        doc = await daemon.get_document(cid, "kb-refunds")
        assert await indexer.index_batch([doc]) == {}
    finally:
        await indexer.aclose()
    assert embeddings.embedded == []

    # Gone at the source: the full crawl deletes their rows and chunks.
    source.set_records(changed[2:])
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS) - 2, deleted=2), TIMEOUT)
    left = {r["external_id"] for r in await db.fetch("SELECT external_id FROM kb")}
    assert left == {r["id"] for r in changed[2:]}
    assert set(await chunks_of(db)) == left

    # The API key is shown as a mask and never logged.
    connector = await daemon.get_connector(cid)
    answer = views.connector_json(connector, await daemon.document_counts(cid))
    assert answer["indexer"]["embeddings"]["api_key"] == "***"
    assert answer["indexer"]["dsn"] == "***"
    assert KEY not in str(answer)
    await daemon.stop()
    assert KEY not in out.getvalue()
    assert "pgvector.chunks_table_ready" in out.getvalue()


async def test_a_mapped_text_is_what_is_split_and_embedded(
    pgvector_dsn: str,
    make_daemon: DaemonFactory,
    db: asyncpg.Connection[Any],
    embeddings: EmbeddingServer,
    source: SourceServer,
) -> None:
    daemon = make_daemon()
    await daemon.start()
    body = {
        "name": "kb",
        "source": http_source(source),
        "indexer": indexer_config(pgvector_dsn, embeddings),
        "document": {"title": "title", "text": "body", "url": {"template": "/kb/{id}"}},
    }
    cid = (await daemon.create_connector(body)).id
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS)), TIMEOUT)
    chunker = Chunker(size=CHUNK_SIZE)
    assert await chunks_of(db) == {
        f"kb-{name}": chunker.split(text) for name, text in TOPICS.items()
    }
    row = await db.fetchrow("SELECT title, text, url FROM kb WHERE external_id = 'kb-api'")
    assert dict(row) == {"title": "Api", "text": TOPICS["api"], "url": "/kb/kb-api"}


async def test_a_rate_limited_endpoint_is_waited_out_and_a_failing_one_writes_nothing(
    pgvector_dsn: str,
    make_any_daemon: DaemonFactory,
    db: asyncpg.Connection[Any],
    embeddings: EmbeddingServer,
    source: SourceServer,
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    body = {
        "name": "kb",
        "source": http_source(source),
        "indexer": indexer_config(pgvector_dsn, embeddings),
    }
    cid = (await daemon.create_connector(body)).id

    # 429 with Retry-After: the transport waits and sends again; every document is indexed.
    embeddings.fail_next(429, retry_after="1")
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS)), TIMEOUT)
    assert [r for r in embeddings.requests if r.body is not None]
    before = await chunks_of(db)
    assert set(before) == {f"kb-{t}" for t in TOPICS}

    # A 500 is not retried: the changed documents fail, their old rows and chunks stay whole.
    changed = records(
        refunds="Refunds now take ten days and go back to the original card.",
        api="The API now accepts OAuth tokens and allows two hundred requests per minute.",
    )
    source.set_records(changed)
    embeddings.fail_next(500, times=10)
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS) - 2, failed=2), TIMEOUT)
    found = await statuses(daemon, cid)
    for eid in ("kb-refunds", "kb-api"):
        status, error = found[eid]
        assert status is DocStatus.FAILED
        assert error is not None and error.startswith("embeddings: embeddings endpoint http://")
        assert "HTTP 500 server_error" in error and KEY not in error
    assert await chunks_of(db) == before
    hashes = {
        r["external_id"]: r["content_hash"]
        for r in await db.fetch("SELECT external_id, content_hash FROM kb")
    }
    for eid in ("kb-refunds", "kb-api"):
        assert hashes[eid] != (await daemon.get_document(cid, eid)).content_hash

    # Retried through the API once the endpoint answers, they are written whole.
    embeddings._failures.clear()
    assert await daemon.retry_failed(cid) == 2
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS)), TIMEOUT)
    after = await chunks_of(db)
    assert after["kb-refunds"] == expected_chunks(changed[0])
    assert after["kb-api"] == expected_chunks(changed[5])


async def test_a_chunks_table_of_another_dimension_is_refused_never_altered(
    pgvector_dsn: str,
    make_daemon: DaemonFactory,
    db: asyncpg.Connection[Any],
    embeddings: EmbeddingServer,
    source: SourceServer,
) -> None:
    daemon = make_daemon()
    await daemon.start()
    config = indexer_config(pgvector_dsn, embeddings)
    body = {"name": "kb", "source": http_source(source), "indexer": config}
    cid = (await daemon.create_connector(body)).id
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS)), TIMEOUT)

    # The same tables, asked for vectors of another size.
    other = indexer_config(pgvector_dsn, embeddings)
    other["embeddings"]["dimensions"] = 32
    context = IndexerContext(cid, daemon.transport)
    problems = await PgvectorIndexer.check(other, context)
    assert problems == [
        "table public.kb at 127.0.0.1:"
        f"{pgvector_dsn.split(':')[-1].split('/')[0]}/{pgvector_dsn.rsplit('/', 1)[1]}: "
        "chunks table public.kb_chunks has the wrong shape (an existing table is never "
        "altered; another dimension needs another table): column embedding is vector(64) "
        "(needs vector(32))"
    ]
    embedded = len(embeddings.embedded)
    await daemon.update_connector(cid, {"indexer": other})
    source.set_records(records(api="The API changed."))
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=len(TOPICS) - 1, failed=1), TIMEOUT)
    status, error = (await statuses(daemon, cid))["kb-api"]
    assert status is DocStatus.FAILED and error is not None
    assert "column embedding is vector(64) (needs vector(32))" in error
    assert len(embeddings.embedded) == embedded  # refused before anything was embedded
    assert (
        await db.fetchval(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'kb_chunks'::regclass AND attname = 'embedding'"
        )
        == f"vector({DIMENSIONS})"
    )


async def test_check_reaches_the_database_and_the_endpoint_writing_nothing(
    pgvector_dsn: str,
    db: asyncpg.Connection[Any],
    embeddings: EmbeddingServer,
) -> None:
    async with Transport() as transport:
        context = IndexerContext("c1", transport)
        assert await PgvectorIndexer.check(indexer_config(pgvector_dsn, embeddings), context) == []
        assert embeddings.embedded == ["syncd"]  # the probe
        # Nothing was created: the tables come at the first write.
        assert await db.fetchval("SELECT count(*) FROM pg_class WHERE relname LIKE 'kb%'") == 0

        wrong = indexer_config(pgvector_dsn, embeddings)
        wrong["embeddings"]["api_key"] = "sk-wrong-key-canary"
        problems = await PgvectorIndexer.check(wrong, context)
        assert len(problems) == 1
        assert problems[0].startswith(f"embeddings endpoint {embeddings.url}/embeddings")
        assert "HTTP 401 invalid_api_key" in problems[0]
        assert "sk-wrong-key-canary" not in problems[0]

        await db.execute("DROP EXTENSION vector")
        problems = await PgvectorIndexer.check(indexer_config(pgvector_dsn, embeddings), context)
        assert any("the vector extension is not installed" in p for p in problems)
