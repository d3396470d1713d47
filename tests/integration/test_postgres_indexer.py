"""The ``postgres`` indexer in a running daemon, on both backend pairs, writing to a real
PostgreSQL database of the test's own: a sync fills the table and full-text search finds the
documents at once, a re-sync rewrites only what changed, a full crawl deletes what is gone at
the source, connectors share a table, a document PostgreSQL refuses fails alone, a table of
the wrong shape is refused and left as it was, and the DSN's password is never shown or
logged.

Each connector maps its records to a document shape (``title``, ``body`` as text, ``link``
as url, ``updated_at``, ``kind`` in the metadata).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from syncd.api import views
from syncd.daemon import Daemon
from syncd.indexers.base import IndexerContext
from syncd.indexers.postgres import PostgresIndexer
from syncd.models import DocStatus, Document, DocumentFields
from syncd.observability.logs import configure_logging
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.indexing import settled, statuses, sync
from tests.integration.sourceserver import SourceServer, make_records

pytestmark = pytest.mark.usefixtures("logging_state")

TIMEOUT = 20.0
PASSWORD = "pg-canary-password-41d7e2"


@pytest.fixture
async def target(fresh_postgres_dsn: str) -> str:
    """The target database's DSN, with a password (the test server trusts local clients, so
    it is sent and ignored: what matters is that syncd never shows it)."""
    return fresh_postgres_dsn.replace(
        "postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@"
    )


@pytest.fixture
async def db(target: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(target)
    yield conn
    await conn.close()


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    async with SourceServer(25, page_size=10) as server:
        yield server


MAPPING = {
    "title": "title",
    "text": "body",
    "url": "link",
    "updated_at": "updated_at",
    "metadata": {"kind": "kind"},
}


def indexer_config(**extra: Any) -> dict[str, Any]:
    return {"type": "postgres", "dsn": "${env:PG_TARGET_DSN}", "table": "docs", **extra}


async def started(make_any_daemon: DaemonFactory) -> Daemon:
    daemon = make_any_daemon()
    await daemon.start()
    return daemon


def connector_body(name: str, server: SourceServer, **indexer: Any) -> dict[str, Any]:
    return {
        "name": name,
        "source": http_source(server),
        "document": MAPPING,
        "indexer": indexer_config(**indexer),
    }


async def search(db: asyncpg.Connection, words: str) -> list[str]:
    rows = await db.fetch(
        "SELECT external_id FROM docs WHERE search @@ websearch_to_tsquery('simple', $1)"
        " ORDER BY ts_rank(search, websearch_to_tsquery('simple', $1)) DESC, external_id",
        words,
    )
    return [r[0] for r in rows]


async def test_sync_search_update_and_delete_mirror_the_source(
    target: str,
    make_any_daemon: DaemonFactory,
    source: SourceServer,
    db: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PG_TARGET_DSN", target)
    out = io.StringIO()
    configure_logging("debug", "json", stream=out)
    records = make_records(25)
    records[7] = {**records[7], "body": "The quick brown fox jumps", "kind": "note"}
    source.set_records(records)
    daemon = await started(make_any_daemon)
    body = connector_body("tickets", source)
    cid = (await daemon.create_connector(body)).id

    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=25), TIMEOUT)

    # One row per record, the shape in its columns, the payload as jsonb.
    rows = {r["external_id"]: r for r in await db.fetch("SELECT * FROM docs")}
    assert set(rows) == {r["id"] for r in records}
    seven = rows["item-00007"]
    kept = await daemon.get_document(cid, "item-00007")
    assert seven["connector_id"] == cid and seven["content_hash"] == kept.content_hash
    assert (seven["title"], seven["text"], seven["url"]) == ("Item 7", records[7]["body"], None)
    assert seven["updated_at"].isoformat() == "2024-01-01T00:07:00+00:00"
    assert (
        await db.fetchval("SELECT metadata->>'kind' FROM docs WHERE external_id = 'item-00007'")
        == "note"
    )
    assert await db.fetchval(
        "SELECT payload = $1::jsonb FROM docs WHERE external_id = 'item-00007'",
        '{"id": "item-00007", "title": "Item 7", "updated_at": "2024-01-01T00:07:00Z",'
        ' "body": "The quick brown fox jumps", "kind": "note"}',
    )
    # Full-text search works on the table at once: title (weight A) and text (B).
    assert await search(db, "quick fox") == ["item-00007"]
    assert await search(db, "fox -quick") == []
    assert (await search(db, '"Item 12"')) == ["item-00012"]

    # A changed record is written again; the rows of the others are not touched.
    before = {r["external_id"]: r["indexed_at"] for r in await db.fetch("SELECT * FROM docs")}
    changed = [dict(r) for r in records]
    changed[3] = {**changed[3], "title": "Changed at the source"}
    source.set_records(changed)
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=25), TIMEOUT)
    after = {r["external_id"]: r for r in await db.fetch("SELECT * FROM docs")}
    assert after["item-00003"]["title"] == "Changed at the source"
    assert after["item-00003"]["indexed_at"] > before["item-00003"]
    assert {e for e in after if after[e]["indexed_at"] != before[e]} == {"item-00003"}
    assert await search(db, "changed source") == ["item-00003"]

    # Gone at the source: the completed full crawl deletes their rows.
    source.set_records(changed[:20])
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=20, deleted=5), TIMEOUT)
    left = {r[0] for r in await db.fetch("SELECT external_id FROM docs")}
    assert left == {r["id"] for r in changed[:20]}

    # The DSN is shown as a mask and its password never logged; the pool is closed at stop.
    connector = await daemon.get_connector(cid)
    answer = views.connector_json(connector, await daemon.document_counts(cid))
    assert answer["indexer"] == {**indexer_config(), "dsn": "***"}
    text = views.connector_text(connector, await daemon.document_counts(cid))
    assert daemon.pools.open_count == 1
    await daemon.stop()
    assert daemon.pools.open_count == 0
    logged = out.getvalue()
    assert "postgres.table_ready" in logged
    assert PASSWORD not in text and PASSWORD not in logged
    idle = await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()"
    )
    assert idle == 0


async def test_a_literal_dsn_is_masked_and_its_password_never_logged(
    target: str, make_daemon: DaemonFactory, source: SourceServer
) -> None:
    out = io.StringIO()
    configure_logging("debug", "json", stream=out)
    daemon = make_daemon()
    await daemon.start()
    # A wrong database in the same DSN: the error names the server, never the password.
    broken = target.rsplit("/", 1)[0] + "/no_such_database"
    body = connector_body("t", source, dsn=broken)
    cid = (await daemon.create_connector(body)).id
    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(failed=25), TIMEOUT)
    errors = {e for _, e in (await statuses(daemon, cid)).values()}
    assert len(errors) == 1
    (error,) = errors
    assert "table public.docs at 127.0.0.1:5432/no_such_database: cannot connect" in error
    assert 'database "no_such_database" does not exist' in error
    connector = await daemon.get_connector(cid)
    shown = views.connector_text(connector, await daemon.document_counts(cid))
    await daemon.stop()
    for text in (shown, error, out.getvalue()):
        assert PASSWORD not in text


async def test_two_connectors_share_a_table_and_a_pool(
    target: str,
    make_any_daemon: DaemonFactory,
    db: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PG_TARGET_DSN", target)
    daemon = await started(make_any_daemon)
    async with SourceServer(12, page_size=5) as one, SourceServer(8, page_size=5) as two:
        # The same external ids at both sources: rows are told apart by connector.
        cid1 = (await daemon.create_connector(connector_body("one", one))).id
        cid2 = (await daemon.create_connector(connector_body("two", two))).id
        await asyncio.gather(sync(daemon, cid1, TIMEOUT), sync(daemon, cid2, TIMEOUT))
        await daemon.wait_documents(cid1, settled(indexed=12), TIMEOUT)
        await daemon.wait_documents(cid2, settled(indexed=8), TIMEOUT)
        counts = dict(await db.fetch("SELECT connector_id, count(*) FROM docs GROUP BY 1"))
        assert counts == {cid1: 12, cid2: 8}
        assert daemon.pools.open_count == 1

        # One connector's deletions leave the other's rows alone.
        two.set_records(make_records(3))
        await sync(daemon, cid2, TIMEOUT)
        await daemon.wait_documents(cid2, settled(indexed=3, deleted=5), TIMEOUT)
        counts = dict(await db.fetch("SELECT connector_id, count(*) FROM docs GROUP BY 1"))
        assert counts == {cid1: 12, cid2: 3}

        # A deleted connector's indexer is closed; the other still holds the pool.
        await daemon.delete_connector(cid2)
        await daemon.indexers.aclose()
        assert daemon.pools.open_count == 0  # every cached indexer released it
        one.set_records(make_records(13))
        await sync(daemon, cid1, TIMEOUT)
        await daemon.wait_documents(cid1, settled(indexed=13), TIMEOUT)
        assert daemon.pools.open_count == 1  # opened again by the next write


async def test_a_document_postgres_refuses_fails_alone(
    target: str,
    make_any_daemon: DaemonFactory,
    source: SourceServer,
    db: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PG_TARGET_DSN", target)
    records = make_records(25)
    records[4] = {**records[4], "note": "a\u0000b"}  # jsonb cannot hold \u0000
    # Past the 1 MB a tsvector holds: refused by the server, found by writing row by row.
    words = " ".join(f"w{i:07d}" for i in range(200_000))
    records[9] = {**records[9], "body": words}
    source.set_records(records)
    daemon = await started(make_any_daemon)
    body = connector_body("tickets", source)
    cid = (await daemon.create_connector(body)).id

    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(indexed=23, failed=2), TIMEOUT)

    found = await statuses(daemon, cid)
    assert found["item-00004"] == (
        DocStatus.FAILED,
        "cannot be stored in PostgreSQL: payload contains \\u0000, which PostgreSQL jsonb "
        "cannot hold (unsupported Unicode escape sequence)",
    )
    status, error = found["item-00009"]
    assert status is DocStatus.FAILED and error is not None
    assert error.startswith("54000 string is too long for tsvector"), error
    left = {r[0] for r in await db.fetch("SELECT external_id FROM docs")}
    assert left == {r["id"] for r in records} - {"item-00004", "item-00009"}
    # The store kept the record as it came.
    kept = await daemon.get_document(cid, "item-00004")
    assert kept.payload["note"] == "a\u0000b"


async def test_a_table_of_the_wrong_shape_is_refused_and_left_as_it_was(
    target: str,
    make_daemon: DaemonFactory,
    source: SourceServer,
    db: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PG_TARGET_DSN", target)
    await db.execute(
        "CREATE TABLE docs (connector_id text, external_id varchar(200), content_hash text,"
        " title text, text text, url text, updated_at timestamptz, metadata json,"
        " payload jsonb, indexed_at timestamptz, tenant int NOT NULL,"
        " search tsvector GENERATED ALWAYS AS (to_tsvector('english', coalesce(title, '')))"
        " STORED)"
    )
    shape = "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
    shape += " WHERE attrelid = 'docs'::regclass AND attnum > 0 ORDER BY attnum"
    columns = await db.fetch(shape)
    daemon = make_daemon()
    await daemon.start()
    body = connector_body("tickets", source)
    cid = (await daemon.create_connector(body)).id

    await sync(daemon, cid, TIMEOUT)
    await daemon.wait_documents(cid, settled(failed=25), TIMEOUT)

    errors = {error for _, error in (await statuses(daemon, cid)).values()}
    where = target.split("@", 1)[1]
    assert errors == {
        f"table public.docs at {where} cannot be used: wrong shape (an existing table is never "
        "altered): column external_id is character varying(200) (needs text); column metadata "
        "is json (needs jsonb); no primary key or unique index on (connector_id, external_id); "
        "column search uses text search configuration english (needs simple); column tenant is "
        "NOT NULL without a default"
    }
    assert await db.fetch(shape) == columns
    assert await db.fetchval("SELECT count(*) FROM docs") == 0

    # validate --connect says the same, and writes nothing.
    context = IndexerContext(cid, daemon.transport)
    problems = await PostgresIndexer.check(indexer_config(), context)
    assert len(problems) == 1 and "column metadata is json (needs jsonb)" in problems[0]
    await daemon.stop()


async def test_check_reads_the_target_without_writing(
    target: str, db: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PG_TARGET_DSN", target)
    context = IndexerContext("c1", transport=None)  # type: ignore[arg-type]
    exists = "SELECT to_regclass('public.docs') IS NOT NULL"
    where = target.split("@", 1)[1]

    # Missing: fine (created at first use) unless create_table is false. Nothing is created.
    assert await PostgresIndexer.check(indexer_config(), context) == []
    assert await PostgresIndexer.check(indexer_config(create_table=False), context) == [
        f"table public.docs at {where}: it does not exist and create_table is false"
    ]
    assert not await db.fetchval(exists)
    assert await PostgresIndexer.check(indexer_config(text_search_config="klingon"), context) == [
        f"table public.docs at {where}: text search configuration 'klingon' does not exist on "
        "the server"
    ]

    # Created by a first write, a table passes; one of another configuration does not.
    indexer = PostgresIndexer(indexer_config(), context)
    doc = Document("c1", "e1", DocStatus.RUNNING, "h", created_at=_now(), updated_at=_now())
    assert not await indexer.index_batch([dataclasses.replace(doc, payload={"a": 1})])
    await indexer.aclose()
    assert await db.fetchval(exists)
    assert await PostgresIndexer.check(indexer_config(), context) == []
    assert await PostgresIndexer.check(indexer_config(text_search_config="english"), context) == [
        f"table public.docs at {where}: wrong shape (an existing table is never altered): "
        "column search uses text search configuration simple (needs english)"
    ]
    # Without full text the search column is no concern of syncd's.
    assert await PostgresIndexer.check(indexer_config(full_text=False), context) == []
    # Unreachable: said, with the server and without the password.
    monkeypatch.setenv("PG_TARGET_DSN", f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/x")
    (problem,) = await PostgresIndexer.check(indexer_config(), context)
    assert problem.startswith("table public.docs at 127.0.0.1:1/x: cannot connect")
    assert PASSWORD not in problem


async def test_rows_carry_the_shape_and_duplicates_are_written_once(
    target: str, db: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PG_TARGET_DSN", target)
    context = IndexerContext("c1", transport=None)  # type: ignore[arg-type]
    indexer = PostgresIndexer(indexer_config(schema="Search Space", table="My Docs"), context)
    base = Document("c1", "e1", DocStatus.RUNNING, "h1", created_at=_now(), updated_at=_now())
    fields = DocumentFields(
        title="Überschrift",
        text="Körper",
        url="https://x.test/1",
        updated_at="2024-05-01T10:00:00+02:00",
        metadata={"tags": ["a", "b"], "n": 10**30},
    )
    docs = [
        dataclasses.replace(base, payload={"v": 1}),
        dataclasses.replace(base, content_hash="h2", payload={"v": 2}, fields=fields),
        dataclasses.replace(
            base, external_id="e2", payload={"v": 3}, fields=DocumentFields(updated_at="not a date")
        ),
    ]
    assert not await indexer.index_batch(docs)
    rows = {r["external_id"]: r for r in await db.fetch('SELECT * FROM "Search Space"."My Docs"')}
    assert rows["e1"]["content_hash"] == "h2" and rows["e1"]["title"] == "Überschrift"
    assert rows["e1"]["updated_at"].isoformat() == "2024-05-01T08:00:00+00:00"
    assert (
        await db.fetchval(
            """SELECT metadata::text FROM "Search Space"."My Docs" WHERE external_id = 'e1'"""
        )
        == '{"n": 1000000000000000000000000000000, "tags": ["a", "b"]}'
    )
    assert rows["e2"]["updated_at"] is None and rows["e2"]["title"] is None
    assert (
        await indexer.delete_batch([docs[0], dataclasses.replace(base, external_id="gone")]) is None
    )
    left = await db.fetch('SELECT external_id FROM "Search Space"."My Docs"')
    assert [r[0] for r in left] == ["e2"]
    await indexer.aclose()


def _now() -> Any:
    from syncd.models import utcnow

    return utcnow()
