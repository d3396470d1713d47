"""Row locks of the PostgreSQL store's document writers: lock order, and rows rewritten meanwhile.

A prune holds the connector's row; a worker's finish does not, so only the order in which
each locks documents keeps them from deadlocking. Each test makes the worst interleaving
happen: a third connection holds document ``a``, the finish of ``a`` and ``z`` queues for it
first, the prune second; then ``a`` is released. A prune that had already locked ``z``
(in a statement before, or out of key order) would then wait for the finish, which waits
for it: PostgreSQL aborts one of them with ``deadlock_detected`` (as each test did before
the prune locked in key order). So does the count of the complete crawls in a row that missed
each document, which a completed crawl writes with its prune.

The tombstone purge takes no connector lock either: a test races it the same way with a
page commit that turns its tombstones live again. Deleting a connector holds its row, but a
finish does not: a test races the two.

A claim or a finish that waited for a row rewritten meanwhile (the worker's own lease
renewal, a page commit) writes its latest version: the last two tests rewrite a document
under a claim and a finish waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import timedelta

import asyncpg
import pytest

from syncd.models import (
    Connector,
    Crawl,
    DocStatus,
    PruneAction,
    PruneCounts,
    PrunePlan,
    Transition,
)
from syncd.store.base import PruneRule
from syncd.store.postgres import PostgresStore

from .factories import at, make_connector, make_doc, start_run


@pytest.fixture
def store(postgres_store: PostgresStore) -> PostgresStore:
    return postgres_store  # this module's tests are PostgreSQL's alone


@pytest.fixture
async def holder(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection[asyncpg.Record]]:
    """The connection that holds a document's row lock (not ``admin``, which watches:
    a transaction sees the activity statistics as they were at its first look)."""
    conn: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(postgres_dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def wait_until(predicate: Callable[[], Awaitable[bool]]) -> None:
    """Wait for server-side state that has no event to await (a backend blocked on a lock)."""
    async with asyncio.timeout(10):
        # Polled: the state lives in other backends (pg_stat_activity).
        while not await predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def blocked(admin: asyncpg.Connection[asyncpg.Record], n: int) -> Callable[[], Awaitable[bool]]:
    """Whether ``n`` of the store's backends are waiting for a lock."""

    async def check() -> bool:
        found = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'syncd' AND wait_event_type = 'Lock'"
        )
        return int(found) == n

    return check


async def crawl(store: PostgresStore, c: Connector, crawl_id: str, *ids: str) -> None:
    """A full crawl ``crawl_id`` of one page of ``ids`` (unindexed: pending documents)."""
    run_id = await start_run(store, c.id, now=at(1))
    await store.commit_page(
        c.id,
        run_id,
        [make_doc(e) for e in ids],
        next_cursor=None,
        source_state={},
        now=at(2),
        crawl=Crawl(crawl_id, True),
    )


def prune(plan: PrunePlan | None, *, deletions_held: int | None = None) -> PruneRule:
    """A prune change applying ``plan`` (and setting ``deletions_held`` when given)."""

    def change(c: Connector, counts: PruneCounts | None) -> Transition:
        held = c.deletions_held if deletions_held is None else deletions_held
        return Transition(replace(c, deletions_held=held, updated_at=at(10)), prune=plan)

    return change


async def states(
    admin: asyncpg.Connection[asyncpg.Record], c: Connector
) -> dict[str, tuple[DocStatus, bool]]:
    rows = await admin.fetch(
        "SELECT external_id, status, held FROM documents WHERE connector_id = $1", c.id
    )
    return {r["external_id"]: (DocStatus(r["status"]), r["held"]) for r in rows}


async def race_finish_with_prune(
    store: PostgresStore,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
    c: Connector,
    plan: PrunePlan | None,
    *,
    unseen_by: str | None = None,
) -> int:
    """Claim ``a`` and ``z``, then run their finish and the prune in the order described
    above; how many documents the finish wrote."""
    now = at(3)
    claimed = (
        await store.claim_for_delivery(
            c.id, ["a", "z"], lease_token="w", lease_until=now + timedelta(minutes=5), now=now
        )
    ).documents
    assert sorted(d.external_id for d in claimed) == ["a", "z"]
    tx = holder.transaction()
    await tx.start()
    try:
        await holder.execute(
            "SELECT 1 FROM documents WHERE connector_id = $1 AND external_id = 'a' FOR UPDATE",
            c.id,
        )
        results = [("a", DocStatus.INDEXED, None), ("z", DocStatus.INDEXED, None)]
        finishing = asyncio.create_task(store.finish_documents(c.id, "w", results, now=now))
        await wait_until(blocked(admin, 1))
        pruning = asyncio.create_task(
            store.mutate_with_prune(c.id, prune(plan), unseen_by=unseen_by)
        )
        await wait_until(blocked(admin, 2))
    finally:
        await tx.rollback()
    finished, _ = await asyncio.gather(finishing, pruning)
    return finished


async def test_applying_held_deletions_does_not_deadlock_with_a_finish(
    store: PostgresStore,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
) -> None:
    # Held: a and z. A later crawl saw a again (unchanged, so still held), so applying the
    # held deletions deletes z and then unmarks a: two statements, z before a.
    c = await store.create_connector(make_connector())
    await crawl(store, c, "c1", "a", "m", "z")
    await crawl(store, c, "c2", "m")
    hold = PrunePlan(PruneAction.HOLD_UNSEEN, crawl_id="c2")
    _, _, held = await store.mutate_with_prune(c.id, prune(hold, deletions_held=2), unseen_by="c2")
    assert held.held == 2
    await crawl(store, c, "c3", "a")

    apply = PrunePlan(PruneAction.DELETE_HELD, delete_at_once=True)
    assert await race_finish_with_prune(store, admin, holder, c, apply) == 2

    found = await states(admin, c)
    assert found["a"] == (DocStatus.INDEXED, False)
    assert found["z"] == (DocStatus.DELETED, False)


async def test_a_completed_crawl_with_held_deletions_does_not_deadlock_with_a_finish(
    store: PostgresStore,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
) -> None:
    # Held: z. The next crawl sees neither a nor z: its completion unmarks z, then deletes
    # a and z: two statements, z before a.
    c = await store.create_connector(make_connector())
    await crawl(store, c, "c1", "a", "m", "z")
    await crawl(store, c, "c2", "a", "m")
    hold = PrunePlan(PruneAction.HOLD_UNSEEN, crawl_id="c2")
    _, _, held = await store.mutate_with_prune(c.id, prune(hold, deletions_held=1), unseen_by="c2")
    assert held.held == 1
    await crawl(store, c, "c3", "m")

    delete = PrunePlan(PruneAction.DELETE_UNSEEN, crawl_id="c3", delete_at_once=True)
    assert await race_finish_with_prune(store, admin, holder, c, delete, unseen_by="c3") == 2

    found = await states(admin, c)
    assert found["a"] == (DocStatus.DELETED, False)
    assert found["z"] == (DocStatus.DELETED, False)
    assert found["m"] == (DocStatus.PENDING, False)


async def test_unmarking_held_deletions_locks_in_id_order_whatever_the_plan(
    postgres_dsn: str,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
) -> None:
    # Held: a and z. The next crawl sees neither, and its completion only unmarks them: one
    # statement, which must lock in id order even when its plan meets the rows in another
    # (a sequential scan, with a's latest version stored after z's).
    database = await admin.fetchval("SELECT current_database()")
    for setting in ("enable_indexscan", "enable_bitmapscan"):
        await admin.execute(f'ALTER DATABASE "{database}" SET {setting} = off')
    store = PostgresStore(postgres_dsn)
    await store.open()
    try:
        c = await store.create_connector(make_connector())
        await crawl(store, c, "c1", "a", "m", "z")
        await crawl(store, c, "c2", "m")
        hold = PrunePlan(PruneAction.HOLD_UNSEEN, crawl_id="c2")
        _, _, held = await store.mutate_with_prune(
            c.id, prune(hold, deletions_held=2), unseen_by="c2"
        )
        assert held.held == 2
        await crawl(store, c, "c3", "m")
        moved = await admin.execute(
            "UPDATE documents SET updated_at = updated_at"
            " WHERE connector_id = $1 AND external_id = 'a'",
            c.id,
        )
        assert moved == "UPDATE 1"
        assert await race_finish_with_prune(store, admin, holder, c, None, unseen_by="c3") == 2
        found = await states(admin, c)
        assert found["a"] == (DocStatus.INDEXED, False)
        assert found["z"] == (DocStatus.INDEXED, False)
    finally:
        await store.close()


async def test_counting_missed_crawls_does_not_deadlock_with_a_finish(
    store: PostgresStore,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
) -> None:
    # Two confirmations asked. a and z were missed once; the next crawl sees z, not a: its
    # completion sets z's count back to 0, counts a's second miss and deletes a. Written in
    # separate statements (z reset before a counted) it would lock z before a.
    c = await store.create_connector(make_connector(prune_confirmations=2))
    await crawl(store, c, "c1", "a", "m", "z")
    await crawl(store, c, "c2", "m")
    once = PrunePlan(PruneAction.DELETE_UNSEEN, crawl_id="c2", confirmations=2, awaiting=2)
    _, _, first = await store.mutate_with_prune(c.id, prune(once), unseen_by="c2")
    assert (first.deleting, first.awaiting) == (0, 2)
    await crawl(store, c, "c3", "m", "z")

    twice = replace(once, crawl_id="c3", delete_at_once=True, awaiting=0)
    assert await race_finish_with_prune(store, admin, holder, c, twice, unseen_by="c3") == 2

    found = await states(admin, c)
    assert found["a"] == (DocStatus.DELETED, False)
    assert found["z"] == (DocStatus.INDEXED, False)
    counts = await admin.fetch(
        "SELECT external_id, missed FROM documents WHERE connector_id = $1", c.id
    )
    assert {r["external_id"]: r["missed"] for r in counts} == {"a": 0, "m": 0, "z": 0}


async def test_a_purge_does_not_deadlock_with_a_page_seeing_its_tombstones_again(
    postgres_dsn: str,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
) -> None:
    # Tombstones: z (deleted first) and a. A page sees both again and turns them live in id
    # order, a then z; the purge (no connector lock) must lock them in that order too,
    # whatever its plan meets first: a sequential scan, with z's tombstone stored before
    # a's (as the partial index on deletion times would also order them).
    database = await admin.fetchval("SELECT current_database()")
    for setting in ("enable_indexscan", "enable_bitmapscan"):
        await admin.execute(f'ALTER DATABASE "{database}" SET {setting} = off')
    store = PostgresStore(postgres_dsn)
    await store.open()
    try:
        c = await store.create_connector(make_connector())
        run_id = await start_run(store, c.id, now=at(1))

        async def page(docs: list[str], deletions: list[str], seconds: float) -> list[str]:
            return await store.commit_page(
                c.id,
                run_id,
                [make_doc(e) for e in docs],
                next_cursor=None,
                source_state={},
                now=at(seconds),
                deletions=deletions,
                delete_at_once=True,
            )

        await page(["a", "z"], [], 2)
        await page([], ["z"], 3)
        await page([], ["a"], 4)
        rows = await admin.fetch(
            "SELECT external_id FROM documents WHERE connector_id = $1 ORDER BY ctid", c.id
        )
        assert [r["external_id"] for r in rows] == ["z", "a"]

        tx = holder.transaction()
        await tx.start()
        try:
            await holder.execute(
                "SELECT 1 FROM documents WHERE connector_id = $1 AND external_id = 'a' FOR UPDATE",
                c.id,
            )
            committing = asyncio.create_task(page(["a", "z"], [], 5))
            await wait_until(blocked(admin, 1))
            purging = asyncio.create_task(store.purge_deleted(at(5)))
            await wait_until(blocked(admin, 2))
        finally:
            await tx.rollback()
        enqueued, purged = await asyncio.gather(committing, purging)
        assert enqueued == ["a", "z"]
        assert purged == 0
        found = await states(admin, c)
        assert found == {"a": (DocStatus.PENDING, False), "z": (DocStatus.PENDING, False)}
    finally:
        await store.close()


async def test_deleting_a_connector_does_not_deadlock_with_a_finish(
    postgres_dsn: str,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
) -> None:
    # The finish of a and z locks them in id order; the deletion of the connector's
    # documents must too, whatever its plan meets first: a sequential scan, with a's latest
    # version stored after z's.
    database = await admin.fetchval("SELECT current_database()")
    for setting in ("enable_indexscan", "enable_bitmapscan"):
        await admin.execute(f'ALTER DATABASE "{database}" SET {setting} = off')
    store = PostgresStore(postgres_dsn)
    await store.open()
    try:
        c = await store.create_connector(make_connector())
        await crawl(store, c, "c1", "a", "z")
        now = at(3)
        claimed = (
            await store.claim_for_delivery(
                c.id, ["a", "z"], lease_token="w", lease_until=now + timedelta(minutes=5), now=now
            )
        ).documents
        assert sorted(d.external_id for d in claimed) == ["a", "z"]
        moved = await admin.execute(
            "UPDATE documents SET updated_at = updated_at"
            " WHERE connector_id = $1 AND external_id = 'a'",
            c.id,
        )
        assert moved == "UPDATE 1"
        rows = await admin.fetch(
            "SELECT external_id FROM documents WHERE connector_id = $1 ORDER BY ctid", c.id
        )
        assert [r["external_id"] for r in rows] == ["z", "a"]

        tx = holder.transaction()
        await tx.start()
        try:
            await holder.execute(
                "SELECT 1 FROM documents WHERE connector_id = $1 AND external_id = 'a' FOR UPDATE",
                c.id,
            )
            results = [("a", DocStatus.INDEXED, None), ("z", DocStatus.INDEXED, None)]
            finishing = asyncio.create_task(store.finish_documents(c.id, "w", results, now=now))
            await wait_until(blocked(admin, 1))
            deleting = asyncio.create_task(store.delete_connector(c.id))
            await wait_until(blocked(admin, 2))
        finally:
            await tx.rollback()
        finished, _ = await asyncio.gather(finishing, deleting)
        # The deletion waited for the finish, then deleted the versions it wrote.
        assert finished == 2
        assert await store.get_connector(c.id) is None
        assert await states(admin, c) == {}
        left = await admin.fetchval(
            "SELECT count(*) FROM document_count_deltas WHERE connector_id = $1", c.id
        )
        assert left == 0
    finally:
        await store.close()


async def rewrite_while_held(
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
    c: Connector,
    setting: str,
    write: Callable[[], Awaitable[object]],
) -> object:
    """Rewrite document ``a`` (``SET setting``) in an open transaction, start ``write``,
    let it queue for ``a``, then commit the rewrite; ``write``'s result."""
    tx = holder.transaction()
    await tx.start()
    try:
        await holder.execute(
            f"UPDATE documents SET {setting} WHERE connector_id = $1 AND external_id = 'a'",
            c.id,
        )
        task = asyncio.create_task(write())
        await wait_until(blocked(admin, 1))
    except BaseException:
        await tx.rollback()
        raise
    await tx.commit()
    return await task


async def test_a_finish_records_a_document_rewritten_while_it_waited(
    store: PostgresStore,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
) -> None:
    # The worker's own lease renewal rewrites its documents: a finish that queued behind it
    # must write the new version, not skip the row (which would leave the document running
    # until its lease expired, then index it again).
    c = await store.create_connector(make_connector())
    await crawl(store, c, "c1", "a", "z")
    now = at(3)
    await store.claim_for_delivery(
        c.id, ["a", "z"], lease_token="w", lease_until=now + timedelta(minutes=5), now=now
    )
    results = [("a", DocStatus.INDEXED, None), ("z", DocStatus.INDEXED, None)]
    finished = await rewrite_while_held(
        admin,
        holder,
        c,
        "lease_until = lease_until + interval '1 minute'",
        lambda: store.finish_documents(c.id, "w", results, now=now),
    )
    assert finished == 2
    assert await states(admin, c) == {
        "a": (DocStatus.INDEXED, False),
        "z": (DocStatus.INDEXED, False),
    }


async def test_a_claim_takes_a_document_rewritten_while_it_waited(
    store: PostgresStore,
    admin: asyncpg.Connection[asyncpg.Record],
    holder: asyncpg.Connection[asyncpg.Record],
) -> None:
    # A pending document rewritten (still pending) while the claim waited for it is claimed,
    # not skipped: a skipped one would stay pending with its queue entry already taken.
    c = await store.create_connector(make_connector())
    await crawl(store, c, "c1", "a", "z")
    now = at(3)

    async def claim() -> list[str]:
        docs = (
            await store.claim_for_delivery(
                c.id, ["a", "z"], lease_token="w", lease_until=now + timedelta(minutes=5), now=now
            )
        ).documents
        return [d.external_id for d in docs]

    claimed = await rewrite_while_held(admin, holder, c, "updated_at = updated_at", claim)
    assert claimed == ["a", "z"]
    assert await states(admin, c) == {
        "a": (DocStatus.RUNNING, False),
        "z": (DocStatus.RUNNING, False),
    }
