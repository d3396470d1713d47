"""The ``pgvector`` indexer: the ``postgres`` indexer's documents table, plus each document's
text in chunks with their embeddings, in PostgreSQL with pgvector.

Its config is :class:`~syncd.indexers.pgvector.config.PgvectorIndexerConfig`: the ``postgres``
indexer's (``dsn``, ``table``, ``schema``, ``full_text``, ``text_search_config``,
``create_table``; ``batch_size`` defaults to 100 here), ``embeddings`` (``url``, ``model``,
``dimensions``, ``api_key``, ``batch_size``: :mod:`syncd.indexers.pgvector.embeddings`) and the
splitter's ``chunk_size``, ``chunk_overlap``, ``chunk_unit`` and ``tokenizer``
(:mod:`syncd.indexers.pgvector.chunking`). The chunks table and its statements:
:mod:`syncd.indexers.pgvector.chunks`.

A call (a worker batch of up to ``batch_size`` documents):

1. The rows of the documents are made as the ``postgres`` indexer makes them (what PostgreSQL
   would refuse fails its document before anything is sent).
2. The content hash and text kept in the table for those documents are read. A document
   whose hash and text are both unchanged keeps its chunks: it is not split or embedded
   again (its row is still written, so ``indexed_at`` moves).
3. The others' ``text`` is split, and all their chunks are embedded together, in requests of
   ``embeddings.batch_size`` chunks. When a request fails for good (after the transport's
   retries and waits), the documents with a chunk in it or in a later one fail with the
   reason and nothing of theirs is written; the documents embedded before it go on.
4. One transaction upserts the rows, deletes the changed documents' old chunks and inserts
   their new ones: a reader sees a document's old chunks or its new ones, never a mix, and
   a failure leaves the old ones in place. When PostgreSQL refuses the transaction for its
   data, each document is written again in a transaction of its own (without embedding
   again), and only those refused fail.

What is split is the document's ``text``; a connector without a ``document`` mapping has
its records split as :func:`~syncd.indexers.pgvector.chunking.record_text` renders them (one ``path:
value`` line per value). A document with an empty ``text`` gets its row and no chunks. A
deletion removes the rows and their chunks in one transaction (the chunks' foreign key would
remove them too).

Before its first write the indexer checks that the ``vector`` extension is installed, then
the documents table as the ``postgres`` indexer does, then the chunks table: missing, it is
created with its HNSW index (``create_table: true``, under an advisory lock); of the wrong
shape — a ``vector`` of another dimension above all — it is refused, never altered.

:meth:`PgvectorIndexer.check` (``syncd validate --connect``) inspects both tables without
creating anything and sends one embeddings request for a one-word input, to prove the URL, the
key, the model and the dimensions. That probe writes nothing to the database; it is a request
the provider counts (a few tokens).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from syncd.config.secrets import resolve_refs
from syncd.errors import SyncdError
from syncd.indexers.base import BatchFailures, IndexerContext
from syncd.indexers.pgvector.chunking import DEFAULT_TOKENIZER, Chunker, record_text, tokenizer_for
from syncd.indexers.pgvector.chunks import (
    EXTENSION_SQL,
    ChunkRow,
    ChunkSpec,
    chunk_arrays,
    chunk_shape_problems,
    clear_sql,
    create_statements,
    insert_sql,
    stored_sql,
)
from syncd.indexers.pgvector.embeddings import DEFAULT_BATCH_SIZE as EMBEDDINGS_BATCH_SIZE
from syncd.indexers.pgvector.embeddings import EmbeddingsClient
from syncd.indexers.postgres.indexer import (
    PostgresIndexer,
    PostgresIndexerError,
    _describe,
    postgres_secrets,
)
from syncd.indexers.postgres.table import (
    MAX_ERROR,
    PRIVILEGES_SQL,
    SHAPE_SQL,
    Row,
    RowError,
    TableShape,
    TableSpec,
    document_row,
    lock_key,
    row_arrays,
)
from syncd.jsontext import PayloadError
from syncd.models import Document
from syncd.observability.logs import register_secret

if TYPE_CHECKING:
    import asyncpg

__all__ = ["DEFAULT_BATCH_SIZE", "PROBE_TEXT", "PgvectorIndexer", "pgvector_secrets"]

log = structlog.get_logger("syncd.indexers.pgvector")

DEFAULT_BATCH_SIZE = 100
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 100
#: What ``check`` embeds to prove the endpoint.
PROBE_TEXT = "syncd"

Key = tuple[str, str]


def pgvector_secrets(config: Mapping[str, Any]) -> set[str]:
    """The secrets of a ``pgvector`` config for the log redaction: the ``postgres`` indexer's
    (the DSN and what is in it, every value under a key named like a secret — the
    ``embeddings.api_key`` as written included) and the API key resolved, when it resolves
    now."""
    found = postgres_secrets(config)
    embeddings = config.get("embeddings")
    key = embeddings.get("api_key") if isinstance(embeddings, Mapping) else None
    if isinstance(key, str):
        found.add(key)
        with contextlib.suppress(SyncdError):
            found.add(resolve_refs(key))
    return {v for v in found if v.strip()}


def embeddings_client(config: Mapping[str, Any], context: IndexerContext) -> EmbeddingsClient:
    """The client of ``config["embeddings"]`` on the daemon's transport."""
    endpoint = config["embeddings"]
    key = endpoint.get("api_key")
    return EmbeddingsClient(
        context.transport,
        url=str(endpoint["url"]),
        model=str(endpoint["model"]),
        dimensions=int(endpoint["dimensions"]),
        api_key=str(key) if key is not None else None,
        batch_size=int(endpoint.get("batch_size", EMBEDDINGS_BATCH_SIZE)),
    )


@dataclass
class _Pending:
    """A document of the call on its way to the table: its row and, when it changed, its
    chunks' texts and (once embedded) their vectors."""

    row: Row
    changed: bool
    texts: list[str] = field(default_factory=list)
    vectors: list[list[float]] = field(default_factory=list)

    def chunks(self) -> list[ChunkRow]:
        row = self.row
        return [
            ChunkRow(row.connector_id, row.external_id, i, text, vector)
            for i, (text, vector) in enumerate(zip(self.texts, self.vectors, strict=True))
        ]


def _text_of(document: Document) -> str:
    """What is split: the document's ``text``, or its record as :func:`record_text` renders
    it when the connector has no ``document`` mapping."""
    if document.fields is not None:
        return document.fields.text or ""
    return record_text(document.payload)


class PgvectorIndexer(PostgresIndexer):
    """Writes a connector's documents and their embedded chunks (see the module
    docstring)."""

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        super().__init__(config, context)
        self.batch_size = int(config.get("batch_size", DEFAULT_BATCH_SIZE))
        self.embeddings = embeddings_client(config, context)
        self.chunk_spec = ChunkSpec(self.spec, self.embeddings.dimensions)
        unit = str(config.get("chunk_unit", "characters"))
        tokenizer = config.get("tokenizer")
        size = int(config.get("chunk_size", DEFAULT_CHUNK_SIZE))
        self.chunker = Chunker(
            size=size,
            # At most size - 1 (the config's description says so).
            overlap=min(int(config.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP)), size - 1),
            unit="tokens" if unit == "tokens" else "characters",
            tokenizer=(
                tokenizer_for(self.embeddings.model, tokenizer)
                if unit == "tokens"
                else DEFAULT_TOKENIZER
            ),
        )
        self._stored = stored_sql(self.spec)
        self._clear = clear_sql(self.chunk_spec)
        self._insert = insert_sql(self.chunk_spec)
        for value in pgvector_secrets(config):
            register_secret(value)

    # --- the indexer protocol ---------------------------------------------------------------

    async def index_batch(self, documents: Sequence[Document]) -> BatchFailures:
        """Write the documents' rows and their chunks (embedding only what changed); the
        failed ones, with their errors."""
        if not documents:
            return None
        await self._ensure_table()
        failures: dict[str, str] = {}
        rows: dict[Key, tuple[Row, str]] = {}
        for doc in documents:
            try:
                rows[(doc.connector_id, doc.external_id)] = (document_row(doc), _text_of(doc))
            except (RowError, PayloadError) as exc:
                failures[doc.external_id] = f"cannot be stored in PostgreSQL: {exc}"[:MAX_ERROR]
        if not rows:
            return failures
        pending = await self._pending(rows)
        failures.update(await self._embed(pending))
        ready = [p for p in pending if p.row.external_id not in failures]
        if ready:
            failures.update(await self._write(ready))
        return failures

    async def delete_batch(self, documents: Sequence[Document]) -> BatchFailures:
        """Delete the documents' rows and chunks in one transaction (already gone: deleted
        as well)."""
        if not documents:
            return None
        cids = [d.connector_id for d in documents]
        eids = [d.external_id for d in documents]
        async with self._connection() as conn, conn.transaction():
            await conn.execute(self._clear, cids, eids)
            await conn.execute(self._delete, cids, eids)
        return None

    # --- validate --connect ---------------------------------------------------------------

    @classmethod
    async def check(cls, config: Mapping[str, Any], context: IndexerContext) -> list[str]:
        """What keeps ``config`` from working (``[]``: nothing): the database checks of the
        ``postgres`` indexer, the ``vector`` extension, the chunks table's shape and
        dimension, and one embeddings request (it writes nothing to the database)."""
        problems = await super().check(config, context)
        try:
            client = embeddings_client(config, context)
        except (SyncdError, ValueError) as exc:
            return [*problems, f"embeddings: {exc}"]
        try:
            await client.embed([PROBE_TEXT])
        except SyncdError as exc:
            text = str(exc)
            if not text.startswith("embeddings endpoint"):
                text = f"{client.target()}: {text}"
            problems.append(text)
        return problems

    # --- the tables -----------------------------------------------------------------------

    async def _inspect(self, *, create: bool) -> list[str]:
        """The problems of the two tables (after creating them when missing, if ``create``
        and ``create_table``), and of the ``vector`` extension."""
        async with self._connection() as conn:
            if await conn.fetchval(EXTENSION_SQL) is None:
                return [
                    "the vector extension is not installed in this database "
                    "(CREATE EXTENSION vector, as a user allowed to)"
                ]
        problems = await super()._inspect(create=create)
        if problems:
            return problems
        spec = self.chunk_spec
        where = f"chunks table {spec.display}"
        async with self._connection() as conn:
            shape = TableShape.from_rows(
                await conn.fetch(SHAPE_SQL, spec.documents.schema, spec.table)
            )
            if shape is None:
                if not self._create:
                    return [f"{where} does not exist and create_table is false"]
                if not create:
                    return []  # created at first use
                chunks_lock = lock_key(TableSpec(table=spec.table, schema=spec.documents.schema))
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", chunks_lock)
                    for statement in create_statements(spec):
                        await conn.execute(statement)
                log.info(
                    "pgvector.chunks_table_ready", table=spec.display, dimensions=spec.dimensions
                )
                shape = TableShape.from_rows(
                    await conn.fetch(SHAPE_SQL, spec.documents.schema, spec.table)
                )
                if shape is None:  # pragma: no cover - dropped meanwhile
                    return [f"{where} could not be created"]
            problems = chunk_shape_problems(shape, spec)
            if problems:
                return [
                    f"{where} has the wrong shape (an existing table is never altered; "
                    f"another dimension needs another table): {'; '.join(problems)}"
                ]
            missing = [r[0] for r in await conn.fetch(PRIVILEGES_SQL, spec.qualified)]
            if missing:
                return [f"this user lacks the {', '.join(missing)} privilege on {where}"]
        return []

    # --- one call -------------------------------------------------------------------------

    async def _pending(self, rows: Mapping[Key, tuple[Row, str]]) -> list[_Pending]:
        """The documents of the call, each marked changed (to embed) or not, its chunks'
        texts split when it changed."""
        cids = [cid for cid, _ in rows]
        eids = [eid for _, eid in rows]
        async with self._connection() as conn:
            stored = {
                (r["connector_id"], r["external_id"]): (r["content_hash"], r["text"])
                for r in await conn.fetch(self._stored, cids, eids)
            }
        pending = []
        for key, (row, text) in rows.items():
            changed = stored.get(key) != (row.content_hash, row.text)
            texts = self.chunker.split(text) if changed else []
            pending.append(_Pending(row, changed, texts))
        return pending

    async def _embed(self, pending: Sequence[_Pending]) -> dict[str, str]:
        """Embed the changed documents' chunks, request by request; the documents left
        without their vectors by a failed request, with its reason."""
        texts: list[str] = []
        owners: list[_Pending] = []
        for item in pending:
            texts.extend(item.texts)
            owners.extend([item] * len(item.texts))
        size = self.embeddings.batch_size
        for start in range(0, len(texts), size):
            try:
                vectors = await self.embeddings.embed(texts[start : start + size])
            except SyncdError as exc:
                reason = f"embeddings: {exc}"[:MAX_ERROR]
                failed = {o.row.external_id for o in owners[start:]}
                log.info(
                    "pgvector.embeddings_failed",
                    table=self.spec.display,
                    documents=len(failed),
                    error=reason,
                )
                return dict.fromkeys(failed, reason)
            for owner, vector in zip(owners[start : start + size], vectors, strict=True):
                owner.vectors.append(vector)
        return {}

    async def _write(self, pending: Sequence[_Pending]) -> dict[str, str]:
        """Write the documents in one transaction, or one transaction each when their data
        is refused; the failures, external id → error."""
        import asyncpg

        refused = (
            asyncpg.DataError,
            asyncpg.IntegrityConstraintViolationError,
            asyncpg.ProgramLimitExceededError,
        )
        async with self._connection() as conn:
            try:
                return await self._write_in(conn, pending)
            except refused as exc:
                if len(pending) == 1:
                    return {pending[0].row.external_id: _describe(exc)}
                log.info(
                    "pgvector.rows_refused",
                    table=self.spec.display,
                    documents=len(pending),
                    error=_describe(exc),
                )
            failures: dict[str, str] = {}
            for item in pending:
                try:
                    failures.update(await self._write_in(conn, [item]))
                except refused as exc:
                    failures[item.row.external_id] = _describe(exc)
            return failures

    async def _write_in(
        self, conn: asyncpg.pool.PoolConnectionProxy[Any], pending: Sequence[_Pending]
    ) -> dict[str, str]:
        """One transaction: the rows upserted, the changed documents' chunks replaced."""
        changed = [p for p in pending if p.changed]
        chunks = [chunk for p in changed for chunk in p.chunks()]
        async with conn.transaction():
            written = await conn.fetch(self._upsert, *row_arrays([p.row for p in pending]))
            if changed:
                await conn.execute(
                    self._clear,
                    [p.row.connector_id for p in changed],
                    [p.row.external_id for p in changed],
                )
            if chunks:
                await conn.execute(self._insert, *chunk_arrays(chunks))
            done = {r[0] for r in written}
            missing = [p.row.external_id for p in pending if p.row.external_id not in done]
            if missing:
                # Nothing of the call is kept when a row did not come back.
                raise PostgresIndexerError(
                    f"{self._target()}: rows not written: {', '.join(missing[:5])}"
                )
        return {}
