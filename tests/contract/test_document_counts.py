"""Document counts are counters (kept by the store in the transactions that write documents):
after any sequence of store operations they equal a recount of the documents, per connector
and in total, on every backend; reads with counts agree with them; the migration counts the
documents already stored."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from syncd.errors import Fenced
from syncd.models import (
    Connector,
    ConnectorStatus,
    Crawl,
    DocStatus,
    PruneAction,
    PruneCounts,
    PrunePlan,
    SyncStatus,
    Transition,
    new_id,
)
from syncd.store.base import Store
from syncd.store.codec import encode_dt
from syncd.store.postgres import PostgresStore
from syncd.store.postgres import migrations as postgres_migrations
from syncd.store.postgres import sql as postgres_sql
from syncd.store.sqlite import SQLiteStore
from syncd.store.sqlite import migrations as sqlite_migrations

from .factories import T0, at, make_connector, make_doc, start_run

ZERO = dict.fromkeys(DocStatus, 0)
RECOUNT = "SELECT connector_id, status, count(*) FROM documents GROUP BY connector_id, status"


async def recount(store: Store) -> dict[str, dict[DocStatus, int]]:
    """Every connector's documents counted from the documents table itself."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(Path(store.path)) as db:
            rows: list[Any] = db.execute(RECOUNT).fetchall()
    else:
        assert isinstance(store, PostgresStore)
        async with store._db.acquire() as conn:
            rows = await conn.fetch(RECOUNT)
    out: dict[str, dict[DocStatus, int]] = {}
    for connector_id, status, n in rows:
        out.setdefault(connector_id, dict(ZERO))[DocStatus(status)] = int(n)
    return out


async def assert_counts_exact(store: Store, connector_ids: list[str]) -> None:
    """The counters of each connector (alive or deleted), their reads with the connector,
    and the totals equal a recount."""
    truth = await recount(store)
    for cid in connector_ids:
        assert await store.document_counts(cid) == truth.get(cid, ZERO), cid
        found = await store.get_connector_with_counts(cid)
        if found is not None:
            assert found[1] == truth.get(cid, ZERO), cid
    for c, counts in await store.list_connectors_with_counts(limit=1000):
        assert counts == truth.get(c.id, ZERO), c.id
    total: Counter[DocStatus] = Counter()
    for counts in truth.values():
        total.update(counts)
    assert await store.document_totals() == {s: total[s] for s in DocStatus}


@dataclass
class Live:
    """What the random walk knows of one connector."""

    connector: Connector
    run_id: str | None = None
    crawl: Crawl | None = None
    leases: dict[str, list[str]] = field(default_factory=dict)
    """Lease tokens and the external ids claimed under each."""


IDS = [f"e{i:02d}" for i in range(24)]


class Walk:
    """A seeded random sequence of every store operation that changes document statuses."""

    def __init__(self, store: Store, seed: int) -> None:
        self.store = store
        self.rng = random.Random(seed)
        self.t = 0.0
        self.live: list[Live] = []
        self.every: list[str] = []

    def now(self) -> Any:
        self.t += 1
        return at(self.t)

    async def add_connector(self) -> None:
        c = await self.store.create_connector(make_connector())
        self.live.append(Live(c))
        self.every.append(c.id)

    async def running(self, live: Live) -> str:
        if live.run_id is None:
            live.run_id = await start_run(self.store, live.connector.id, now=self.now())
        return live.run_id

    async def step(self) -> None:
        rng = self.rng
        live = rng.choice(self.live)
        cid = live.connector.id
        op = rng.choice(
            ["page"] * 6
            + ["claim"] * 4
            + ["finish"] * 4
            + ["prune", "purge"] * 2
            + ["release", "fail", "requeue", "abort", "extend", "delete"]
        )
        if op == "page":
            run_id = await self.running(live)
            if live.crawl is None or rng.random() < 0.2:
                live.crawl = Crawl(new_id(), rng.random() < 0.7)
            docs = [make_doc(e, rng.randint(1, 3)) for e in rng.sample(IDS, rng.randint(0, 10))]
            tombstones = rng.sample(IDS, rng.randint(0, 3)) if rng.random() < 0.4 else []
            await self.store.commit_page(
                cid,
                run_id,
                docs,
                next_cursor=None,
                source_state={},
                now=self.now(),
                indexed=rng.random() < 0.2,
                crawl=live.crawl,
                deletions=tombstones,
                delete_at_once=rng.random() < 0.5,
            )
        elif op == "claim":
            token = new_id()
            now = self.now()
            claimed = (
                await self.store.claim_for_delivery(
                    cid,
                    rng.sample(IDS, rng.randint(1, 12)),
                    lease_token=token,
                    lease_until=at(self.t + rng.randint(1, 20)),
                    now=now,
                    with_payload=rng.random() < 0.5,
                )
            ).documents
            live.leases[token] = [d.external_id for d in claimed]
            if rng.random() < 0.5:  # a worker that finishes at once
                await self.finish(live, token)
        elif op == "finish" and live.leases:
            # Mostly the latest lease (its documents are likelier to be running still).
            tokens = list(live.leases)
            await self.finish(live, tokens[-1] if rng.random() < 0.7 else rng.choice(tokens))
        elif op == "release":
            await self.store.release_expired_leases(self.now())
        elif op == "fail":
            await self.fail(live)
        elif op == "requeue":
            run_id = live.run_id if rng.random() < 0.5 else None
            error = rng.choice([None, "Aborted", "HTTP 500"])
            try:
                await self.store.requeue_documents(cid, error=error, now=self.now(), run_id=run_id)
            except Fenced:
                pytest.fail("the walk's run is current")
        elif op == "abort":
            await self.abort(live)
        elif op == "prune":
            await self.prune(live)
        elif op == "purge":
            await self.store.purge_deleted(self.now())
        elif op == "extend" and live.leases:
            await self.store.extend_leases(cid, rng.choice(sorted(live.leases)), at(self.t + 30))
        elif op == "delete" and rng.random() < 0.3:
            await self.store.delete_connector(cid)
            self.live.remove(live)
            await self.add_connector()

    async def finish(self, live: Live, token: str) -> None:
        """Finish what was claimed under ``token`` (and an id or two that was not)."""
        statuses = [DocStatus.INDEXED, DocStatus.FAILED, DocStatus.DELETED]
        ids = live.leases[token] + self.rng.sample(IDS, self.rng.randint(0, 2))
        results = [(e, self.rng.choice(statuses), "HTTP 500") for e in ids]
        await self.store.finish_documents(live.connector.id, token, results, now=self.now())

    async def fail(self, live: Live) -> None:
        """``mutate_connector`` with ``fail_documents`` that keeps the run: its pending and
        running documents fail, and its later pages go on."""
        now = self.now()

        def touch(c: Connector) -> Transition:
            return Transition(replace(c, updated_at=now))

        await self.store.mutate_connector(live.connector.id, touch, fail_documents="Aborted")

    async def abort(self, live: Live) -> None:
        """``mutate_connector`` with ``fail_documents``: the run ends, its documents fail."""
        now = self.now()

        def abort(c: Connector) -> Transition:
            return Transition(replace(c, sync_status=SyncStatus.IDLE, run_id=None, updated_at=now))

        await self.store.mutate_connector(live.connector.id, abort, fail_documents="Aborted")
        live.run_id = None

    async def prune(self, live: Live) -> None:
        """A crawl's completion with a random prune plan, deleting or holding documents."""
        now = self.now()
        action = self.rng.choice(list(PruneAction))
        crawl_id = live.crawl.id if live.crawl is not None else None
        plan = PrunePlan(action, crawl_id=crawl_id, delete_at_once=self.rng.random() < 0.5)

        def change(c: Connector, counts: PruneCounts | None) -> Transition:
            return Transition(replace(c, updated_at=now), prune=plan)

        if action is not PruneAction.DELETE_HELD and crawl_id is None:
            return
        await self.store.mutate_with_prune(live.connector.id, change, unseen_by=crawl_id)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_counters_equal_a_recount_after_random_operations(store: Store, seed: int) -> None:
    walk = Walk(store, seed)
    for _ in range(3):
        await walk.add_connector()
    for i in range(150):
        await walk.step()
        if i % 10 == 9:
            await assert_counts_exact(store, walk.every)
    await assert_counts_exact(store, walk.every)
    # Something happened: documents exist in several statuses.
    statuses = {s for counts in (await recount(store)).values() for s, n in counts.items() if n}
    assert len(statuses) >= 3


async def test_a_connector_deleted_midway_leaves_no_counts(store: Store) -> None:
    gone, kept = make_connector(), make_connector()
    for c in (gone, kept):
        await store.create_connector(c)
        run_id = await start_run(store, c.id)
        docs = [make_doc(e) for e in IDS]
        await store.commit_page(c.id, run_id, docs, next_cursor=None, source_state={}, now=T0)
        await store.claim_for_delivery(c.id, IDS[:5], lease_token="L", lease_until=at(60), now=T0)
    await store.delete_connector(gone.id)
    assert await store.document_counts(gone.id) == ZERO
    assert await store.get_connector_with_counts(gone.id) is None
    assert await store.document_counts(kept.id) == {
        **ZERO,
        DocStatus.PENDING: 19,
        DocStatus.RUNNING: 5,
    }
    assert await store.document_totals() == {**ZERO, DocStatus.PENDING: 19, DocStatus.RUNNING: 5}
    # A connector created again under the same name starts from zero.
    again = await store.create_connector(replace(make_connector(gone.name), id=new_id()))
    assert await store.document_counts(again.id) == ZERO


async def test_reads_with_counts_match_the_plain_reads(store: Store) -> None:
    empty, full = make_connector("a-empty"), make_connector("b-full")
    for c in (empty, full):
        await store.create_connector(c)
    run_id = await start_run(store, full.id)
    docs = [make_doc(e) for e in IDS[:3]]
    await store.commit_page(full.id, run_id, docs, next_cursor=None, source_state={}, now=T0)
    assert await store.get_connector_with_counts("missing") is None
    found = await store.get_connector_with_counts(full.id)
    assert found == (await store.get_connector(full.id), {**ZERO, DocStatus.PENDING: 3})
    found = await store.get_connector_with_counts(empty.id)
    assert found == (await store.get_connector(empty.id), ZERO)
    for options in ({}, {"limit": 1}, {"after": empty.id}, {"status": ConnectorStatus.ACTIVE}):
        plain = await store.list_connectors(**options)
        counted = await store.list_connectors_with_counts(**options)
        assert [c for c, _ in counted] == plain
        assert [n for _, n in counted] == [await store.document_counts(c.id) for c in plain]


# --- the migration counts the documents already stored ------------------------------------

_OLD_DOCUMENTS = [("c1", "a", "indexed"), ("c1", "b", "pending"), ("c1", "c", "pending")] + [
    ("c2", f"x{i}", "failed") for i in range(4)
]


async def test_migration_counts_existing_documents_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        for step in sqlite_migrations.MIGRATIONS:
            if step.version <= 6:
                for statement in step.statements:
                    db.execute(statement)
        db.execute("PRAGMA user_version = 6")
        for cid in ("c1", "c2"):
            db.execute(
                "INSERT INTO connectors (id, name, source, indexer, created_at, updated_at, "
                "page_retries, page_retry_backoff, throttle_seconds, retry_on_status, status, "
                "sync_status) VALUES (?, ?, '{}', '{}', ?, ?, 3, 2.0, 0.0, '[]', 'active', "
                "'idle')",
                (cid, cid, encode_dt(T0), encode_dt(T0)),
            )
        db.executemany(
            "INSERT INTO documents (connector_id, external_id, status, content_hash, "
            "created_at, updated_at, payload) VALUES (?, ?, ?, 'h', 't', 't', '{}')",
            _OLD_DOCUMENTS,
        )
    store = SQLiteStore(path)
    await store.open()
    try:
        await assert_counts_exact(store, ["c1", "c2"])
        assert (await store.document_counts("c2"))[DocStatus.FAILED] == 4
    finally:
        await store.close()


async def test_migration_counts_existing_documents_on_postgres(fresh_postgres_dsn: str) -> None:
    conn = await asyncpg.connect(fresh_postgres_dsn)
    try:
        await conn.execute(postgres_migrations.CREATE_VERSION_TABLE)
        for version, statements in postgres_migrations.MIGRATIONS:
            if version <= 6:
                await conn.execute(statements)
                await conn.execute(postgres_migrations.RECORD_VERSION, version)
        for cid in ("c1", "c2"):
            await conn.execute(
                "INSERT INTO connectors (id, name, source, indexer, created_at, updated_at, "
                "page_retries, page_retry_backoff, throttle_seconds, retry_on_status, status, "
                "sync_status) VALUES ($1, $1, '{}', '{}', now(), now(), 3, 2.0, 0.0, '{}', "
                "'active', 'idle')",
                cid,
            )
        await conn.executemany(
            "INSERT INTO documents (connector_id, external_id, status, content_hash, "
            "created_at, updated_at, payload) VALUES ($1, $2, $3, 'h', now(), now(), '{}')",
            _OLD_DOCUMENTS,
        )
    finally:
        await conn.close()
    store = PostgresStore(fresh_postgres_dsn)
    await store.open()
    try:
        await assert_counts_exact(store, ["c1", "c2"])
        assert (await store.document_counts("c2"))[DocStatus.FAILED] == 4
    finally:
        await store.close()


# --- PostgreSQL: counts as deltas, written concurrently ----------------------------------


async def _delta_rows(store: PostgresStore, connector_id: str) -> int:
    async with store._db.acquire() as conn:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM document_count_deltas WHERE connector_id = $1", connector_id
        )
    return n


async def test_postgres_folds_the_deltas_of_a_connector(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)
    await store.open()
    try:
        c = await store.create_connector(make_connector())
        run_id = await start_run(store, c.id)
        for p in range(60):
            docs = [make_doc(f"d{p:02d}-{i}") for i in range(3)]
            await store.commit_page(c.id, run_id, docs, next_cursor=None, source_state={}, now=T0)
            ids = [d.external_id for d in docs]
            await store.claim_for_delivery(
                c.id, ids, lease_token=f"L{p}", lease_until=at(60), now=T0
            )
            done = [(e, DocStatus.INDEXED, None) for e in ids]
            await store.finish_documents(c.id, f"L{p}", done, now=at(1))
        # 180 statements wrote deltas; what is kept stays bounded and sums right.
        assert await _delta_rows(store, c.id) <= postgres_sql.COUNT_DELTAS_KEPT + 3
        assert await store.document_counts(c.id) == {**ZERO, DocStatus.INDEXED: 180}
        await store.delete_connector(c.id)
        assert await _delta_rows(store, c.id) == 0
    finally:
        await store.close()


async def test_postgres_concurrent_commits_and_finishes_keep_counts_exact(
    postgres_dsn: str,
) -> None:
    """Page commits, claims, finishes and requeues of one connector on several connections
    at once: no deadlock (nothing raises) and the counts equal a recount."""
    store = PostgresStore(postgres_dsn, max_size=10)
    await store.open()
    try:
        c = await store.create_connector(make_connector())
        run_id = await start_run(store, c.id)
        ids = [f"d{i:03d}" for i in range(150)]

        async def committer(k: int) -> None:
            rng = random.Random(k)
            for p in range(8):
                docs = [make_doc(e, rng.randint(1, 3)) for e in rng.sample(ids, 50)]
                await store.commit_page(
                    c.id,
                    run_id,
                    docs,
                    next_cursor=None,
                    source_state={},
                    now=at(p),
                    deletions=rng.sample(ids, 3),
                    delete_at_once=rng.random() < 0.5,
                )

        async def worker(k: int) -> None:
            rng = random.Random(100 + k)
            statuses = [DocStatus.INDEXED, DocStatus.FAILED, DocStatus.DELETED]
            for r in range(20):
                token = f"w{k}-{r}"
                claimed = (
                    await store.claim_for_delivery(
                        c.id, rng.sample(ids, 30), lease_token=token, lease_until=at(600), now=at(r)
                    )
                ).documents
                results = [(d.external_id, rng.choice(statuses), "x") for d in claimed]
                await store.finish_documents(c.id, token, results, now=at(r))

        async def requeuer() -> None:
            for r in range(10):
                await store.requeue_documents(c.id, now=at(r))
                await store.release_expired_leases(at(r))

        async with asyncio.timeout(120):
            await asyncio.gather(
                *(committer(k) for k in range(3)), *(worker(k) for k in range(5)), requeuer()
            )
        await assert_counts_exact(store, [c.id])
        assert sum((await store.document_counts(c.id)).values()) > 0
        assert await _delta_rows(store, c.id) <= postgres_sql.COUNT_DELTAS_KEPT + 50
    finally:
        await store.close()


async def test_reads_with_counts_are_fresh_after_every_change(store: Store) -> None:
    # Unchanged rows are decoded once and shared (codec.DecodedRows); any change of the row
    # (its counts, its state, its configuration) must be read anew.
    c = make_connector("fresh", source={"type": "http", "url": "http://x/a", "headers": {}})
    await store.create_connector(c)
    first = await store.get_connector_with_counts(c.id)
    again = await store.get_connector_with_counts(c.id)
    assert first is not None and again is not None
    assert again[0] is first[0] and again[1] is first[1]
    listed = await store.list_connectors_with_counts()
    assert listed == [first]

    run_id = await start_run(store, c.id)
    running = await store.get_connector_with_counts(c.id)
    assert running is not None and running[0].run_id == run_id and running[1] == ZERO
    await store.commit_page(
        c.id, run_id, [make_doc(e) for e in IDS[:2]], next_cursor="n", source_state={}, now=T0
    )
    paged = await store.get_connector_with_counts(c.id)
    assert paged is not None and paged[1] == {**ZERO, DocStatus.PENDING: 2}
    assert [n for _, n in await store.list_connectors_with_counts()] == [paged[1]]

    # A changed configuration.
    moved = {"type": "http", "url": "http://x/b", "headers": {}}
    await store.mutate_connector(c.id, lambda x: Transition(replace(x, source=moved)))
    updated = await store.get_connector_with_counts(c.id)
    assert updated is not None and updated[0].source["url"] == "http://x/b"
    assert [x.source["url"] for x, _ in await store.list_connectors_with_counts()] == ["http://x/b"]
