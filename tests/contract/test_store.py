"""The store contract: the same assertions for every backend (``store`` is parametrised).

Time is fixed (``T0`` and offsets from it); nothing sleeps. The last section holds the few
checks that only make sense for the SQLite file store (URLs, files, several connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sqlite3
from dataclasses import replace
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from syncd.errors import ConfigError, Conflict, Fenced, NameConflict, NotFound, StoreError
from syncd.models import (
    ABORTED_ERROR,
    MAX_REJECTIONS,
    Connector,
    ConnectorStatus,
    DocStatus,
    Document,
    Progress,
    Rejection,
    RunEnd,
    RunOutcome,
    RunStart,
    RunTrigger,
    SyncStatus,
    Transition,
    Waiting,
    WaitReason,
    new_id,
)
from syncd.rules import NotDue
from syncd.rules.records import document_inputs
from syncd.store.base import StateRule, Store
from syncd.store.sqlite import SQLiteStore
from syncd.store.sqlite.migrations import MIGRATIONS

from .factories import T0, at, make_connector, make_doc, start_run

ALL_ZERO = dict.fromkeys(DocStatus, 0)


async def add_connector(store: Store, **fields: Any) -> Connector:
    return await store.create_connector(make_connector(**fields))


async def get_doc(store: Store, connector_id: str, external_id: str) -> Document:
    doc = await store.get_document(connector_id, external_id)
    assert doc is not None, external_id
    return doc


async def commit(
    store: Store,
    c: Connector,
    run_id: str,
    *versions: tuple[str, int],
    cursor: str | None = None,
    now_s: float = 1,
) -> list[str]:
    """Commit one page of ``(external_id, version)`` documents."""
    return await store.commit_page(
        c.id,
        run_id,
        [make_doc(e, v) for e, v in versions],
        next_cursor=cursor,
        source_state={},
        now=at(now_s),
    )


async def statuses(store: Store, connector_id: str) -> dict[str, DocStatus]:
    return {d.external_id: d.status for d in await store.list_documents(connector_id)}


async def fail_open_documents(
    store: Store, connector_id: str, *, now_s: float, error: str = ABORTED_ERROR
) -> None:
    """Fail the connector's pending and running documents as an abort does (a connector
    change with ``fail_documents``), changing nothing else but ``updated_at``."""
    await store.mutate_connector(
        connector_id,
        lambda cur: Transition(replace(cur, updated_at=at(now_s))),
        fail_documents=error,
    )


# --- connectors -----------------------------------------------------------------------


async def test_ping(store: Store) -> None:
    await store.ping()


async def test_open_is_idempotent(store: Store) -> None:
    c = await add_connector(store)
    await store.open()
    assert await store.get_connector(c.id) == c


async def test_create_and_get_round_trip_every_field(store: Store) -> None:
    c = make_connector(
        "tickets",
        source={"type": "http", "url": "http://x/items", "params": {"limit": 100, "ü": "∑"}},
        indexer={"type": "webhook", "url": "http://x/hook", "headers": {"A": "b"}},
        created_at=T0,
        updated_at=at(1),
        sync_schedule="*/15 * * * *",
        sync_timezone="Europe/Paris",
        page_retries=5,
        page_retry_backoff=0.5,
        throttle_seconds=0.25,
        retry_on_status=(429, 503),
        status=ConnectorStatus.ERROR,
        sync_status=SyncStatus.RUNNING,
        last_error="boom",
        run_id="run-1",
        sync_started_at=at(2),
        last_synced_at=at(-3600),
        next_run_at=at(900),
        sync_owner="host-1:123",
        sync_heartbeat_at=at(3),
        progress=Progress(pages=7, documents=3500),
        waiting=Waiting(WaitReason.RETRY_AFTER, at(60)),
        resume_cursor="cursor-8",
        source_state={"high_water": "2024-04-30T00:00:00Z", "n": [1, 2]},
    )
    assert await store.create_connector(c) == c
    got = await store.get_connector(c.id)
    assert got == c
    assert got is not None
    assert got.waiting is not None
    for value in (got.created_at, got.updated_at, got.next_run_at, got.waiting.until):
        assert value is not None and value.utcoffset() == timedelta(0)


async def test_datetimes_come_back_as_utc(store: Store) -> None:
    plus2 = timezone(timedelta(hours=2))
    c = await add_connector(store, created_at=T0.astimezone(plus2), next_run_at=None)
    got = await store.get_connector(c.id)
    assert got is not None
    assert got.created_at == T0
    assert got.created_at.utcoffset() == timedelta(0)
    assert got.next_run_at is None
    assert got.waiting is None
    assert got.progress == Progress(0, 0)
    assert got.source_state == {}


async def test_get_missing_connector_is_none(store: Store) -> None:
    assert await store.get_connector("nope") is None


async def test_name_conflict(store: Store) -> None:
    first = await add_connector(store, name="tickets")
    with pytest.raises(NameConflict):
        await add_connector(store, name="tickets")
    assert await store.list_connectors() == [first]


async def test_list_connectors_keyset_by_id(store: Store) -> None:
    created = [await add_connector(store) for _ in range(5)]
    ids = sorted(c.id for c in created)
    assert [c.id for c in await store.list_connectors()] == ids
    assert [c.id for c in await store.list_connectors(limit=2)] == ids[:2]
    assert [c.id for c in await store.list_connectors(limit=2, after=ids[1])] == ids[2:4]
    assert [c.id for c in await store.list_connectors(after=ids[4])] == []


async def test_list_connectors_status_filter(store: Store) -> None:
    a = await add_connector(store, status=ConnectorStatus.ACTIVE)
    p1 = await add_connector(store, status=ConnectorStatus.PAUSED)
    p2 = await add_connector(store, status=ConnectorStatus.PAUSED)
    paused = sorted([p1.id, p2.id])
    got = await store.list_connectors(status=ConnectorStatus.PAUSED)
    assert [c.id for c in got] == paused
    assert [c.id for c in await store.list_connectors(status=ConnectorStatus.ACTIVE)] == [a.id]
    after_first = await store.list_connectors(status=ConnectorStatus.PAUSED, after=paused[0])
    assert [c.id for c in after_first] == paused[1:]
    assert await store.list_connectors(status=ConnectorStatus.DELETING) == []


async def test_mutate_connector_returns_before_and_after(store: Store) -> None:
    c = await add_connector(store)

    def pause(current: Connector) -> Transition:
        return Transition(replace(current, status=ConnectorStatus.PAUSED, updated_at=at(5)))

    before, after = await store.mutate_connector(c.id, pause)
    assert before == c
    assert after == replace(c, status=ConnectorStatus.PAUSED, updated_at=at(5))
    assert await store.get_connector(c.id) == after


async def test_mutate_connector_writes_every_field_but_id_and_created_at(store: Store) -> None:
    c = await add_connector(store)
    changed = replace(
        c,
        id="ignored",
        created_at=at(-100),
        name="renamed",
        source={"type": "http", "url": "http://y"},
        last_error="x",
        status=ConnectorStatus.ERROR,
        progress=Progress(1, 2),
        waiting=Waiting(WaitReason.BACKOFF, at(10)),
        retry_on_status=(500,),
        source_state={"k": 1},
        next_run_at=at(60),
        updated_at=at(1),
    )
    await store.mutate_connector(c.id, lambda _: Transition(changed))
    assert await store.get_connector(c.id) == replace(changed, id=c.id, created_at=c.created_at)
    assert await store.get_connector("ignored") is None


async def test_mutate_connector_inserts_run_start(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id, now=at(1), trigger=RunTrigger.SCHEDULE, owner="i-1")
    run = await store.get_run(run_id)
    assert run is not None
    assert (run.id, run.connector_id, run.trigger, run.outcome) == (
        run_id,
        c.id,
        RunTrigger.SCHEDULE,
        RunOutcome.RUNNING,
    )
    assert (run.started_at, run.finished_at, run.owner, run.error) == (at(1), None, "i-1", None)
    assert (run.pages, run.documents_seen, run.documents_enqueued) == (0, 0, 0)
    current = await store.get_connector(c.id)
    assert current is not None
    assert (current.sync_status, current.run_id) == (SyncStatus.RUNNING, run_id)


async def test_run_ends_apply_only_while_running(store: Store) -> None:
    c = await add_connector(store)
    first = await start_run(store, c.id)

    def end(run_id: str, outcome: RunOutcome, when: float, error: str | None = None) -> StateRule:
        def change(current: Connector) -> Transition:
            return Transition(current, ends=(RunEnd(run_id, outcome, at(when), error),))

        return change

    await store.mutate_connector(c.id, end(first, RunOutcome.FAILED, 10, "boom"))
    # A second end for a finished run changes nothing.
    await store.mutate_connector(c.id, end(first, RunOutcome.SUCCEEDED, 20))
    run = await store.get_run(first)
    assert run is not None
    assert (run.outcome, run.finished_at, run.error) == (RunOutcome.FAILED, at(10), "boom")


async def test_mutate_connector_end_and_start_in_one_transition(store: Store) -> None:
    c = await add_connector(store)
    old = await start_run(store, c.id)
    new = new_id()

    def takeover(current: Connector) -> Transition:
        return Transition(
            replace(current, run_id=new, updated_at=at(7)),
            start=RunStart(new, current.id, RunTrigger.STALE_LOCK, at(7), "i-2"),
            ends=(RunEnd(old, RunOutcome.INTERRUPTED, at(7)),),
        )

    await store.mutate_connector(c.id, takeover)
    old_run, new_run = await store.get_run(old), await store.get_run(new)
    assert old_run is not None and new_run is not None
    assert (old_run.outcome, old_run.finished_at) == (RunOutcome.INTERRUPTED, at(7))
    assert (new_run.outcome, new_run.trigger) == (RunOutcome.RUNNING, RunTrigger.STALE_LOCK)


async def test_mutate_connector_change_raises_nothing_written(store: Store) -> None:
    c = await add_connector(store)
    error = Conflict("Sync already in progress", run_id="r")
    calls: list[Connector] = []

    def refuse(current: Connector) -> Transition:
        calls.append(current)
        raise error

    with pytest.raises(Conflict) as raised:
        await store.mutate_connector(c.id, refuse)
    assert raised.value is error
    assert calls == [c]
    assert await store.get_connector(c.id) == c
    assert await store.list_runs(c.id) == []
    # The store is still usable after the rolled-back transaction.
    await store.mutate_connector(c.id, lambda cur: Transition(replace(cur, name="after")))
    got = await store.get_connector(c.id)
    assert got is not None and got.name == "after"


async def test_mutate_connector_fails_documents_in_the_same_transaction(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("p", 1), ("r", 1), ("i", 1))
    await store.claim_for_delivery(c.id, ["r", "i"], lease_token="L", lease_until=at(60), now=T0)
    await store.finish_documents(c.id, "L", [("i", DocStatus.INDEXED, None)], now=at(1))

    def stop(current: Connector) -> Transition:
        return Transition(replace(current, updated_at=at(5)))

    await store.mutate_connector(c.id, stop, fail_documents="Aborted")
    got = {d.external_id: (d.status, d.error) for d in await store.list_documents(c.id)}
    assert got == {
        "p": (DocStatus.FAILED, "Aborted"),
        "r": (DocStatus.FAILED, "Aborted"),
        "i": (DocStatus.INDEXED, None),
    }
    # A refused change fails nothing.
    await commit(store, c, run_id, ("q", 1), now_s=6)
    with pytest.raises(Conflict):
        await store.mutate_connector(
            c.id,
            lambda cur: (_ for _ in ()).throw(Conflict("No sync in progress")),
            fail_documents="Aborted",
        )
    q = await store.get_document(c.id, "q")
    assert q is not None and q.status is DocStatus.PENDING


async def test_mutate_connector_missing_is_not_found(store: Store) -> None:
    def never(current: Connector) -> Transition:
        raise AssertionError("the change must not be called")

    with pytest.raises(NotFound):
        await store.mutate_connector("missing", never)


async def test_mutate_connector_rename_collision(store: Store) -> None:
    await add_connector(store, name="taken")
    c = await add_connector(store, name="mine")
    run = new_id()

    def rename(current: Connector) -> Transition:
        return Transition(
            replace(current, name="taken"),
            start=RunStart(run, current.id, RunTrigger.MANUAL, at(1), None),
        )

    with pytest.raises(NameConflict):
        await store.mutate_connector(c.id, rename)
    assert await store.get_connector(c.id) == c
    assert await store.get_run(run) is None


async def test_concurrent_compare_and_set_exactly_one_wins(store: Store) -> None:
    c = await add_connector(store)

    async def claim() -> str:
        run_id = new_id()

        def change(current: Connector) -> Transition:
            if current.sync_status is SyncStatus.RUNNING:
                raise Conflict("Sync already in progress", run_id=current.run_id)
            return Transition(
                replace(current, sync_status=SyncStatus.RUNNING, run_id=run_id),
                start=RunStart(run_id, current.id, RunTrigger.MANUAL, T0, None),
            )

        await store.mutate_connector(c.id, change)
        return run_id

    results = await asyncio.gather(*(claim() for _ in range(50)), return_exceptions=True)
    won = [r for r in results if isinstance(r, str)]
    lost = [r for r in results if isinstance(r, Conflict)]
    assert len(won) == 1
    assert len(lost) == 49
    assert all(e.extra["run_id"] == won[0] for e in lost)
    current = await store.get_connector(c.id)
    assert current is not None and current.run_id == won[0]
    assert [r.id for r in await store.list_runs(c.id)] == won


async def test_delete_connector_cascades(store: Store) -> None:
    c = await add_connector(store)
    other = await add_connector(store)
    run_id = await start_run(store, c.id)
    other_run = await start_run(store, other.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1))
    await commit(store, other, other_run, ("a", 1))

    await store.delete_connector(c.id)

    assert await store.get_connector(c.id) is None
    assert await store.get_run(run_id) is None
    assert await store.list_runs(c.id) == []
    assert await store.get_document(c.id, "a") is None
    assert await store.document_counts(c.id) == ALL_ZERO
    assert await store.pending_documents() == [(other.id, "a")]
    assert await store.get_connector(other.id) is not None
    assert await store.get_run(other_run) is not None
    # Missing: a no-op.
    await store.delete_connector(c.id)
    await store.delete_connector("never-existed")


async def test_claim_due_reads_the_due_connectors(store: Store) -> None:
    now = at(0)
    late_error = await add_connector(store, next_run_at=at(-120), status=ConnectorStatus.ERROR)
    due_active = await add_connector(store, next_run_at=at(-60))
    exactly_now = await add_connector(store, next_run_at=now)
    running = await add_connector(store, next_run_at=at(-30), sync_status=SyncStatus.RUNNING)
    await add_connector(store, next_run_at=at(-90), status=ConnectorStatus.PAUSED)
    await add_connector(store, next_run_at=at(-90), status=ConnectorStatus.DELETING)
    await add_connector(store, next_run_at=at(1))
    await add_connector(store, next_run_at=None)

    def look(c: Connector) -> Transition:
        raise NotDue()  # read, and write nothing

    due = await store.claim_due(now, look, limit=100)
    assert [b.id for b, _ in due] == [late_error.id, due_active.id, running.id, exactly_now.id]
    assert due[0][0] == late_error
    assert all(a is b for b, a in due)
    assert [b.id for b, _ in await store.claim_due(now, look, limit=2)] == [
        late_error.id,
        due_active.id,
    ]
    assert await store.claim_due(at(-121), look, limit=100) == []


# --- commit_page and report -----------------------------------------------------------


async def test_commit_page_new_documents(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    docs = [make_doc("b"), make_doc("a"), make_doc("c")]

    ids = await store.commit_page(
        c.id, run_id, docs, next_cursor="p2", source_state={"hw": "x"}, now=at(5)
    )

    # The order of the returned ids is not part of the contract.
    assert sorted(ids) == ["a", "b", "c"]
    current = await store.get_connector(c.id)
    assert current is not None
    assert current.resume_cursor == "p2"
    assert current.source_state == {"hw": "x"}
    assert current.progress == Progress(pages=1, documents=3)
    assert current.sync_heartbeat_at == at(5)
    run = await store.get_run(run_id)
    assert run is not None
    assert (run.pages, run.documents_seen, run.documents_enqueued) == (1, 3, 3)
    doc = await store.get_document(c.id, "a")
    assert doc is not None
    assert doc.payload == docs[1].payload
    assert doc.content_hash == docs[1].content_hash
    assert (doc.status, doc.attempts, doc.error) == (DocStatus.PENDING, 0, None)
    assert (doc.created_at, doc.updated_at, doc.indexed_at) == (at(5), at(5), None)
    assert (doc.lease_token, doc.lease_until) == (None, None)


async def test_commit_page_semantics_of_existing_documents(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    names = ["indexed", "changed", "aborted", "failed", "pending", "running"]
    await commit(store, c, run_id, *((n, 1) for n in names), now_s=1)
    claimed = (
        await store.claim_for_delivery(
            c.id,
            ["indexed", "changed", "aborted", "failed", "running"],
            lease_token="L",
            lease_until=at(100),
            now=at(2),
        )
    ).documents
    assert len(claimed) == 5
    await store.finish_documents(
        c.id,
        "L",
        [
            ("indexed", DocStatus.INDEXED, None),
            ("changed", DocStatus.INDEXED, None),
            ("failed", DocStatus.FAILED, "HTTP 500"),
        ],
        now=at(3),
    )
    await store.finish_documents(
        c.id, "L", [("aborted", DocStatus.FAILED, ABORTED_ERROR)], now=at(3)
    )

    ids = await commit(
        store, c, run_id, *((n, 2 if n == "changed" else 1) for n in names), cursor=None, now_s=10
    )

    assert sorted(ids) == ["aborted", "changed"]
    assert await statuses(store, c.id) == {
        "indexed": DocStatus.INDEXED,
        "changed": DocStatus.PENDING,
        "aborted": DocStatus.PENDING,
        "failed": DocStatus.FAILED,
        "pending": DocStatus.PENDING,
        "running": DocStatus.RUNNING,
    }
    changed = await store.get_document(c.id, "changed")
    assert changed is not None
    assert changed.payload == make_doc("changed", 2).payload
    assert changed.content_hash == make_doc("changed", 2).content_hash
    assert (changed.attempts, changed.error, changed.created_at, changed.updated_at) == (
        0,
        None,
        at(1),
        at(10),
    )
    aborted = await store.get_document(c.id, "aborted")
    assert aborted is not None and (aborted.attempts, aborted.error) == (0, None)
    failed = await store.get_document(c.id, "failed")
    assert failed is not None and (failed.attempts, failed.error) == (1, "HTTP 500")
    indexed = await store.get_document(c.id, "indexed")
    assert indexed is not None
    assert (indexed.updated_at, indexed.indexed_at, indexed.attempts) == (at(3), at(3), 1)
    running = await store.get_document(c.id, "running")
    assert running is not None and (running.lease_token, running.attempts) == ("L", 1)

    current = await store.get_connector(c.id)
    assert current is not None
    assert current.progress == Progress(pages=2, documents=12)
    assert current.resume_cursor is None
    run = await store.get_run(run_id)
    assert run is not None
    assert (run.pages, run.documents_seen, run.documents_enqueued) == (2, 12, 8)


async def test_commit_page_changed_running_document_loses_its_lease(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1))
    await store.claim_for_delivery(c.id, ["a"], lease_token="L", lease_until=at(100), now=at(2))

    assert await commit(store, c, run_id, ("a", 2), now_s=3) == ["a"]

    doc = await store.get_document(c.id, "a")
    assert doc is not None
    assert (doc.status, doc.lease_token, doc.lease_until, doc.attempts) == (
        DocStatus.PENDING,
        None,
        None,
        0,
    )
    # The worker that indexed the old content cannot record its result.
    assert await store.finish_documents(c.id, "L", [("a", DocStatus.INDEXED, None)], now=at(4)) == 0


async def test_commit_page_indexed_on_commit(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    written = await store.commit_page(
        c.id,
        run_id,
        [make_doc("a"), make_doc("b")],
        next_cursor=None,
        source_state={},
        now=at(3),
        indexed=True,
    )
    assert sorted(written) == ["a", "b"]
    a = await store.get_document(c.id, "a")
    assert a is not None
    assert (a.status, a.indexed_at, a.attempts, a.error) == (DocStatus.INDEXED, at(3), 0, None)
    assert await store.pending_documents() == []
    # Unchanged: not written again, indexed_at kept. Changed: indexed again.
    again = await store.commit_page(
        c.id,
        run_id,
        [make_doc("a"), make_doc("b", 2)],
        next_cursor=None,
        source_state={},
        now=at(4),
        indexed=True,
    )
    assert again == ["b"]
    a2, b2 = await store.get_document(c.id, "a"), await store.get_document(c.id, "b")
    assert a2 is not None and b2 is not None
    assert (a2.indexed_at, b2.indexed_at, b2.payload) == (at(3), at(4), make_doc("b", 2).payload)


async def test_commit_page_duplicate_ids_last_wins(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)

    ids = await commit(store, c, run_id, ("a", 1), ("b", 1), ("a", 3))

    assert sorted(ids) == ["a", "b"]
    doc = await store.get_document(c.id, "a")
    assert doc is not None and doc.payload == make_doc("a", 3).payload
    run = await store.get_run(run_id)
    assert run is not None and (run.documents_seen, run.documents_enqueued) == (3, 2)


async def test_commit_page_empty_page(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    assert await commit(store, c, run_id, cursor="next") == []
    current = await store.get_connector(c.id)
    assert current is not None
    assert (current.progress, current.resume_cursor) == (Progress(1, 0), "next")


async def test_commit_page_fenced_writes_nothing(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), cursor="p2")
    before = await store.get_connector(c.id)

    with pytest.raises(Fenced):
        await commit(store, c, "another-run", ("a", 2), ("b", 1), cursor="p3", now_s=9)

    assert await store.get_connector(c.id) == before
    assert await statuses(store, c.id) == {"a": DocStatus.PENDING}
    doc = await store.get_document(c.id, "a")
    assert doc is not None and doc.payload == make_doc("a", 1).payload
    run = await store.get_run(run_id)
    assert run is not None and (run.pages, run.documents_seen) == (1, 1)


async def test_commit_page_fenced_after_run_cleared(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await store.mutate_connector(
        c.id, lambda cur: Transition(replace(cur, sync_status=SyncStatus.IDLE, run_id=None))
    )
    with pytest.raises(Fenced):
        await commit(store, c, run_id, ("a", 1))
    assert await store.list_documents(c.id) == []
    with pytest.raises(Fenced):
        await store.commit_page("missing", run_id, [], next_cursor=None, source_state={}, now=T0)


async def test_report_heartbeat_and_waiting(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    waiting = Waiting(WaitReason.BACKOFF, at(34))

    assert await store.report(c.id, run_id, now=at(30), waiting=waiting) is True
    current = await store.get_connector(c.id)
    assert current is not None
    assert (current.sync_heartbeat_at, current.waiting) == (at(30), waiting)

    assert await store.report(c.id, run_id, now=at(40), waiting=None) is True
    current = await store.get_connector(c.id)
    assert current is not None
    assert (current.sync_heartbeat_at, current.waiting) == (at(40), None)

    throttle = Waiting(WaitReason.THROTTLE, at(99))
    assert await store.report(c.id, "stale-run", now=at(50), waiting=throttle) is False
    assert await store.report("missing", run_id, now=at(50), waiting=None) is False
    assert await store.get_connector(c.id) == current


# --- records: exact payloads, rejections, notes ---------------------------------------

EXACT_RECORDS: list[dict[str, Any]] = [
    {"id": "big", "n": 2**80, "neg": -(2**100), "edge": [2**63, 2**64, -(2**63) - 1]},
    {"id": "nul", "text": "a\x00b", "\x00key": ["\x00"], "nested": {"deep": "\x00\x01\x1f"}},
    {
        "id": "unicode",
        "text": "é✓ 😀 \u05e9\u05dc\u05d5\u05dd e\u0301 \u2028\u2029 \ufeff \U0010ffff",
        "ключ": "значение",
    },
    {"id": "floats", "f": [0.1, -0.0, 1e16, 5e-324, 1.7976931348623157e308, 2.5e-7]},
    {"id": 12345678901234567890123, "mixed": [None, True, False, {}, [], "", 0]},
]


async def test_payloads_round_trip_exactly(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    docs, rejected = document_inputs(EXACT_RECORDS)
    assert rejected == []

    await store.commit_page(c.id, run_id, docs, next_cursor=None, source_state={}, now=at(1))

    for record, doc in zip(EXACT_RECORDS, docs, strict=True):
        got = await get_doc(store, c.id, doc.external_id)
        assert got.payload == record
        # Integers keep their type and every digit (no float on the way).
        assert json.loads(got.payload_json or "") == record
        assert got.payload_json == doc.payload_json
        assert got.content_hash == hashlib.sha256((doc.payload_json or "").encode()).hexdigest()
    big = await get_doc(store, c.id, "big")
    assert type(big.payload["n"]) is int
    assert '"n":1208925819614629174706176' in (big.payload_json or "")
    assert (await get_doc(store, c.id, "12345678901234567890123")).payload == EXACT_RECORDS[4]
    nul = await get_doc(store, c.id, "nul")
    assert '"a\\u0000b"' in (nul.payload_json or "")  # escaped, so any text column holds it
    claimed = (
        await store.claim_for_delivery(
            c.id, [d.external_id for d in docs], lease_token="L", lease_until=at(60), now=at(2)
        )
    ).documents
    assert {d.external_id: d.payload for d in claimed} == {
        d.external_id: r for d, r in zip(docs, EXACT_RECORDS, strict=True)
    }
    # Unchanged on the next crawl: same canonical text, same hash, nothing to enqueue.
    again, _ = document_inputs([dict(reversed(list(r.items()))) for r in EXACT_RECORDS])
    assert [d.content_hash for d in again] == [d.content_hash for d in docs]


async def test_commit_page_counts_rejected_records_and_keeps_a_sample(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    page1 = [Rejection(i, f"reason {i}") for i in range(4)]
    page3 = [Rejection(i, f"later {i}") for i in range(8)]

    await store.commit_page(
        c.id,
        run_id,
        [make_doc("a")],
        next_cursor="p2",
        source_state={},
        now=at(1),
        rejected=page1,
    )
    await commit(store, c, run_id, ("b", 1), cursor="p3", now_s=2)
    await store.commit_page(
        c.id, run_id, [], next_cursor=None, source_state={}, now=at(3), rejected=page3
    )

    run = await store.get_run(run_id)
    assert run is not None
    assert (run.pages, run.documents_seen, run.documents_enqueued) == (3, 2, 2)
    assert run.documents_rejected == 12
    assert run.rejections == tuple(
        [Rejection(i, f"reason {i}", page=1) for i in range(4)]
        + [Rejection(i, f"later {i}", page=3) for i in range(6)]
    )
    assert len(run.rejections) == MAX_REJECTIONS
    assert (await store.list_runs(c.id))[0] == run
    # Rejected records are counted on the run, never stored as documents.
    assert sorted(await statuses(store, c.id)) == ["a", "b"]
    current = await store.get_connector(c.id)
    assert current is not None and current.progress == Progress(pages=3, documents=2)
    # A full sample still counts.
    await store.commit_page(
        c.id,
        run_id,
        [],
        next_cursor=None,
        source_state={},
        now=at(4),
        rejected=[Rejection("x", "one more")],
    )
    run = await store.get_run(run_id)
    assert run is not None and run.documents_rejected == 13
    assert len(run.rejections) == MAX_REJECTIONS


async def test_reasons_of_any_text_are_kept(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    odd = Rejection("rec\x00\ud800", "bad \x00 \ud800 é✓")
    await store.commit_page(
        c.id, run_id, [], next_cursor=None, source_state={}, now=at(1), rejected=[odd]
    )
    run = await store.get_run(run_id)
    assert run is not None
    assert run.rejections == (replace(odd, page=1),)


async def test_new_runs_have_no_rejections_and_no_note(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    run = await store.get_run(run_id)
    assert run is not None
    assert (run.documents_rejected, run.rejections, run.note) == (0, (), None)


async def test_commit_page_sets_the_run_note(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await store.commit_page(
        c.id, run_id, [], next_cursor="p2", source_state={}, now=at(1), note="source changed"
    )
    await commit(store, c, run_id, ("a", 1), now_s=2)  # no note: the note stays
    run = await store.get_run(run_id)
    assert run is not None and run.note == "source changed"
    await store.commit_page(
        c.id, run_id, [], next_cursor=None, source_state={}, now=at(3), note="another"
    )
    run = await store.get_run(run_id)
    assert run is not None and run.note == "another"


async def test_commit_page_counts_the_records_its_source_filtered(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    assert (await store.get_run(run_id)).documents_filtered == 0  # type: ignore[union-attr]
    await store.commit_page(
        c.id, run_id, [make_doc("a")], next_cursor="p2", source_state={}, now=at(1), filtered=3
    )
    await commit(store, c, run_id, ("b", 1), cursor="p3", now_s=2)  # none filtered
    await store.commit_page(
        c.id, run_id, [], next_cursor=None, source_state={}, now=at(3), filtered=4
    )
    run = await store.get_run(run_id)
    assert run is not None
    assert (run.documents_filtered, run.documents_seen, run.documents_rejected) == (7, 2, 0)
    # Filtered records are counted on the run, never stored as documents.
    assert sorted(await statuses(store, c.id)) == ["a", "b"]
    assert (await store.list_runs(c.id))[0] == run


async def test_fenced_commit_records_no_rejections_or_note(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    with pytest.raises(Fenced):
        await store.commit_page(
            c.id,
            "another-run",
            [],
            next_cursor=None,
            source_state={},
            now=at(1),
            rejected=[Rejection(0, "id field 'id' is null")],
            note="source changed",
        )
    run = await store.get_run(run_id)
    assert run is not None
    assert (run.pages, run.documents_rejected, run.rejections, run.note) == (0, 0, (), None)


async def test_requeue_documents_fenced_by_run_id(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1))
    await fail_open_documents(store, c.id, now_s=2)

    with pytest.raises(Fenced):
        await store.requeue_documents(c.id, error=ABORTED_ERROR, now=at(3), run_id="old-run")
    with pytest.raises(Fenced):
        await store.requeue_documents("missing", error=ABORTED_ERROR, now=at(3), run_id=run_id)
    assert await statuses(store, c.id) == {"a": DocStatus.FAILED, "b": DocStatus.FAILED}

    assert await store.requeue_documents(c.id, error=ABORTED_ERROR, now=at(4), run_id=run_id) == [
        "a",
        "b",
    ]
    assert await statuses(store, c.id) == {"a": DocStatus.PENDING, "b": DocStatus.PENDING}

    # Once the run is no longer current (aborted), its requeue writes nothing.
    await fail_open_documents(store, c.id, now_s=5)
    await store.mutate_connector(
        c.id, lambda cur: Transition(replace(cur, sync_status=SyncStatus.IDLE, run_id=None))
    )
    with pytest.raises(Fenced):
        await store.requeue_documents(c.id, error=ABORTED_ERROR, now=at(6), run_id=run_id)
    assert await statuses(store, c.id) == {"a": DocStatus.FAILED, "b": DocStatus.FAILED}
    # Without a run id the requeue is not fenced (the API's retry-failed).
    assert await store.requeue_documents(c.id, now=at(7)) == ["a", "b"]


# --- runs -----------------------------------------------------------------------------


async def test_list_runs_newest_first(store: Store) -> None:
    c = await add_connector(store)
    other = await add_connector(store)
    runs = []
    for i in range(4):
        runs.append(await start_run(store, c.id, now=at(i)))
    await start_run(store, other.id)
    newest_first = sorted(runs, reverse=True)

    assert [r.id for r in await store.list_runs(c.id)] == newest_first
    assert [r.id for r in await store.list_runs(c.id, limit=2)] == newest_first[:2]
    page2 = await store.list_runs(c.id, limit=2, before=newest_first[1])
    assert [r.id for r in page2] == newest_first[2:]
    assert await store.list_runs(c.id, before=newest_first[3]) == []
    assert await store.list_runs("missing") == []


async def test_get_missing_run_is_none(store: Store) -> None:
    assert await store.get_run("missing") is None


# --- documents ------------------------------------------------------------------------


async def test_list_and_get_documents(store: Store) -> None:
    c = await add_connector(store)
    other = await add_connector(store)
    run_id = await start_run(store, c.id)
    other_run = await start_run(store, other.id)
    await commit(store, c, run_id, ("d", 1), ("b", 1), ("a", 1), ("c", 1), ("e", 1))
    await commit(store, other, other_run, ("z", 1))
    await store.claim_for_delivery(c.id, ["b", "d"], lease_token="L", lease_until=at(9), now=at(2))

    listed = await store.list_documents(c.id)
    assert [d.external_id for d in listed] == ["a", "b", "c", "d", "e"]
    assert all(d.payload is None and d.connector_id == c.id for d in listed)
    assert [d.external_id for d in await store.list_documents(c.id, limit=2, after="b")] == [
        "c",
        "d",
    ]
    running = await store.list_documents(c.id, status=DocStatus.RUNNING)
    assert [(d.external_id, d.status, d.lease_token) for d in running] == [
        ("b", DocStatus.RUNNING, "L"),
        ("d", DocStatus.RUNNING, "L"),
    ]
    pending = await store.list_documents(c.id, status=DocStatus.PENDING, after="a", limit=1)
    assert [d.external_id for d in pending] == ["c"]
    assert await store.list_documents(c.id, status=DocStatus.INDEXED) == []

    doc = await store.get_document(c.id, "b")
    assert doc is not None
    assert doc.payload == make_doc("b").payload
    assert doc == replace(
        listed[1],
        payload=make_doc("b").payload,
        status=DocStatus.RUNNING,
        attempts=1,
        lease_token="L",
        lease_until=at(9),
        updated_at=at(2),
    )
    assert await store.get_document(c.id, "z") is None
    assert await store.get_document(other.id, "z") is not None


async def test_document_counts(store: Store) -> None:
    c = await add_connector(store)
    assert await store.document_counts(c.id) == ALL_ZERO
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1), ("c", 1), ("d", 1))
    await store.claim_for_delivery(
        c.id, ["a", "b", "c"], lease_token="L", lease_until=at(9), now=T0
    )
    await store.finish_documents(c.id, "L", [("a", DocStatus.INDEXED, None)], now=at(1))

    assert await store.document_counts(c.id) == {
        DocStatus.PENDING: 1,
        DocStatus.RUNNING: 2,
        DocStatus.INDEXED: 1,
        DocStatus.FAILED: 0,
        DocStatus.DELETED: 0,
    }
    assert await store.document_counts("missing") == ALL_ZERO


async def test_pending_documents_paging(store: Store) -> None:
    c1 = await add_connector(store)
    c2 = await add_connector(store)
    r1 = await start_run(store, c1.id)
    r2 = await start_run(store, c2.id)
    await commit(store, c1, r1, ("b", 1), ("a", 1), ("c", 1))
    await commit(store, c2, r2, ("a", 1), ("b", 1))
    await store.claim_for_delivery(c1.id, ["b"], lease_token="L", lease_until=at(9), now=T0)
    expected = sorted([(c1.id, "a"), (c1.id, "c"), (c2.id, "a"), (c2.id, "b")])

    assert await store.pending_documents() == expected
    got: list[tuple[str, str]] = []
    after = None
    while page := await store.pending_documents(after=after, limit=3):
        got.extend(page)
        after = page[-1]
    assert got == expected
    assert await store.pending_documents(after=expected[1], limit=1) == [expected[2]]


async def test_claim_for_delivery_leases_pending_documents(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1), ("c", 1))

    claimed = (
        await store.claim_for_delivery(
            c.id, ["c", "a", "missing"], lease_token="L1", lease_until=at(60), now=at(5)
        )
    ).documents
    assert sorted(d.external_id for d in claimed) == ["a", "c"]
    by_id = {d.external_id: d for d in claimed}
    a = by_id["a"]
    assert a.payload == make_doc("a").payload
    assert (a.status, a.attempts, a.lease_token, a.lease_until, a.updated_at) == (
        DocStatus.RUNNING,
        1,
        "L1",
        at(60),
        at(5),
    )
    assert await store.get_document(c.id, "a") == a

    # Only pending documents can be claimed: a second claim gets nothing.
    again = (
        await store.claim_for_delivery(
            c.id, ["a", "b"], lease_token="L2", lease_until=at(60), now=at(6)
        )
    ).documents
    assert [d.external_id for d in again] == ["b"]
    assert (
        await store.claim_for_delivery(c.id, [], lease_token="L3", lease_until=at(1), now=T0)
    ).documents == []
    # Another connector's ids are not claimed through this one.
    other = await add_connector(store)
    assert (
        await store.claim_for_delivery(other.id, ["c"], lease_token="L4", lease_until=at(1), now=T0)
    ).documents == []

    # After the lease expires the document is pending again, and a new claim counts.
    await store.release_expired_leases(at(61))
    reclaimed = (
        await store.claim_for_delivery(
            c.id, ["a"], lease_token="L5", lease_until=at(120), now=at(62)
        )
    ).documents
    assert [(d.external_id, d.attempts, d.lease_token) for d in reclaimed] == [("a", 2, "L5")]


async def test_a_claim_for_delivery_reads_the_connectors_stamp(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1), ("c", 1))
    current = await store.get_connector(c.id)
    assert current is not None

    claim = await store.claim_for_delivery(
        c.id, ["a"], lease_token="L1", lease_until=at(60), now=at(1), with_payload=False
    )
    assert [d.external_id for d in claim.documents] == ["a"]
    assert claim.stamp == (current.status, current.updated_at)

    # A change of the connector moves the stamp the next claim reads.
    def rename(x: Connector) -> Transition:
        return Transition(replace(x, name="renamed", updated_at=at(30)))

    await store.mutate_connector(c.id, rename)
    claim = await store.claim_for_delivery(
        c.id, ["b"], lease_token="L2", lease_until=at(60), now=at(31)
    )
    assert claim.stamp == (current.status, at(30))
    assert claim.documents[0].payload == make_doc("b").payload

    # Nothing claimed, nothing read.
    nothing = await store.claim_for_delivery(
        c.id, ["a", "missing"], lease_token="L3", lease_until=at(60), now=at(32)
    )
    assert nothing.documents == [] and nothing.stamp is None


async def test_claim_for_delivery_without_payload(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1))
    claimed = (
        await store.claim_for_delivery(
            c.id, ["a", "b"], lease_token="L", lease_until=at(60), now=at(1), with_payload=False
        )
    ).documents
    assert sorted((d.external_id, d.payload, d.status) for d in claimed) == [
        ("a", None, DocStatus.RUNNING),
        ("b", None, DocStatus.RUNNING),
    ]
    stored = await store.get_document(c.id, "a")
    assert stored is not None and stored.payload == make_doc("a").payload


async def test_finish_documents_only_under_the_lease(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1), ("c", 1), ("d", 1))
    await store.claim_for_delivery(
        c.id, ["a", "b", "c"], lease_token="L", lease_until=at(60), now=T0
    )

    wrong = await store.finish_documents(c.id, "other", [("a", DocStatus.INDEXED, None)], now=at(1))
    assert wrong == 0
    written = await store.finish_documents(
        c.id,
        "L",
        [
            ("a", DocStatus.INDEXED, None),
            ("b", DocStatus.FAILED, "HTTP 502"),
            ("d", DocStatus.INDEXED, None),  # pending, not running: left alone
            ("missing", DocStatus.INDEXED, None),
        ],
        now=at(2),
    )
    assert written == 2

    a = await store.get_document(c.id, "a")
    assert a is not None
    assert (a.status, a.error, a.indexed_at, a.updated_at, a.lease_token, a.lease_until) == (
        DocStatus.INDEXED,
        None,
        at(2),
        at(2),
        None,
        None,
    )
    b = await store.get_document(c.id, "b")
    assert b is not None
    assert (b.status, b.error, b.indexed_at, b.lease_token, b.attempts) == (
        DocStatus.FAILED,
        "HTTP 502",
        None,
        None,
        1,
    )
    assert (await get_doc(store, c.id, "d")).status is DocStatus.PENDING
    # Finished documents cannot be finished twice.
    assert await store.finish_documents(c.id, "L", [("a", DocStatus.FAILED, "x")], now=at(3)) == 0

    # An aborted (failed) document is not overwritten by its worker's late result.
    await fail_open_documents(store, c.id, now_s=4)
    late = await store.finish_documents(c.id, "L", [("c", DocStatus.INDEXED, None)], now=at(5))
    assert late == 0
    cdoc = await store.get_document(c.id, "c")
    assert cdoc is not None and (cdoc.status, cdoc.error) == (DocStatus.FAILED, ABORTED_ERROR)


async def test_retry_documents_wait_then_come_back_to_be_queued(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1), ("c", 1))
    await store.claim_for_delivery(
        c.id, ["a", "b", "c"], lease_token="L", lease_until=at(60), now=T0
    )

    assert await store.retry_documents(c.id, "other", [("a", "HTTP 503", at(10))], now=at(1)) == 0
    written = await store.retry_documents(
        c.id,
        "L",
        [("a", "HTTP 503 (attempt 1 of 5; retrying)", at(10)), ("b", "timeout", at(20))],
        now=at(1),
    )
    assert written == 2
    a = await get_doc(store, c.id, "a")
    assert (a.status, a.error, a.lease_token, a.lease_until, a.attempts) == (
        DocStatus.PENDING,
        "HTTP 503 (attempt 1 of 5; retrying)",
        None,
        at(10),
        1,
    )
    counts = await store.document_counts(c.id)
    assert (counts[DocStatus.PENDING], counts[DocStatus.RUNNING]) == (2, 1)
    # Waiting: not claimed before its time, even when a queue entry asks for it.
    assert (
        await store.claim_for_delivery(c.id, ["a"], lease_token="M", lease_until=at(60), now=at(5))
    ).documents == []
    # A retried document is no longer held by its old lease.
    assert await store.finish_documents(c.id, "L", [("a", DocStatus.INDEXED, None)], now=at(6)) == 0

    # The sweep ends the waits whose time has come (and only those), to be queued again.
    assert await store.release_expired_leases(at(10)) == [(c.id, "a")]
    assert (await get_doc(store, c.id, "a")).lease_until is None
    assert await store.release_expired_leases(at(11)) == []
    again = (
        await store.claim_for_delivery(
            c.id, ["a", "b"], lease_token="M", lease_until=at(90), now=at(12)
        )
    ).documents
    assert [(d.external_id, d.attempts) for d in again] == [("a", 2)]
    # A crawl that sees the document changed ends its wait: it is queued with the page.
    await commit(store, c, run_id, ("b", 2))
    b = await get_doc(store, c.id, "b")
    assert (b.status, b.lease_until, b.attempts, b.error) == (DocStatus.PENDING, None, 0, None)


async def test_finish_documents_batch_in_any_order_last_result_wins(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, *((f"d{i:02d}", 1) for i in range(20)))
    ids = [f"d{i:02d}" for i in range(20)]
    await store.claim_for_delivery(c.id, ids, lease_token="L", lease_until=at(60), now=T0)
    results: list[tuple[str, DocStatus, str | None]] = [
        (e, DocStatus.INDEXED, None) for e in reversed(ids)
    ]
    # A second result for d03: the last one given is the one recorded.
    results.append(("d03", DocStatus.FAILED, "HTTP 500"))
    results.append(("d05", DocStatus.FAILED, "HTTP 502"))
    assert await store.finish_documents(c.id, "L", results, now=at(1)) == 20
    counts = await store.document_counts(c.id)
    assert (counts[DocStatus.INDEXED], counts[DocStatus.FAILED]) == (18, 2)
    d03 = await get_doc(store, c.id, "d03")
    assert (d03.status, d03.error, d03.lease_token) == (DocStatus.FAILED, "HTTP 500", None)
    d05 = await get_doc(store, c.id, "d05")
    assert (d05.status, d05.error, d05.indexed_at) == (DocStatus.FAILED, "HTTP 502", None)
    d00 = await get_doc(store, c.id, "d00")
    assert (d00.status, d00.error, d00.indexed_at) == (DocStatus.INDEXED, None, at(1))
    # Nothing is left to finish under the lease.
    assert await store.finish_documents(c.id, "L", results, now=at(2)) == 0
    assert await store.finish_documents(c.id, "L", [], now=at(2)) == 0
    # The payload is kept by an index result, exactly.
    d07 = await store.get_document(c.id, "d07")
    assert d07 is not None and d07.payload is not None and d07.payload_json is not None


async def test_indexed_at_is_kept_until_next_indexing(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1))
    await store.claim_for_delivery(c.id, ["a"], lease_token="L", lease_until=at(60), now=T0)
    await store.finish_documents(c.id, "L", [("a", DocStatus.INDEXED, None)], now=at(1))
    await commit(store, c, run_id, ("a", 2), now_s=2)
    await store.claim_for_delivery(c.id, ["a"], lease_token="M", lease_until=at(60), now=at(3))
    await store.finish_documents(c.id, "M", [("a", DocStatus.FAILED, "HTTP 500")], now=at(4))
    a = await store.get_document(c.id, "a")
    assert a is not None and (a.status, a.indexed_at) == (DocStatus.FAILED, at(1))


async def test_extend_leases(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1), ("c", 1))
    await store.claim_for_delivery(c.id, ["a", "b"], lease_token="L", lease_until=at(30), now=T0)
    await store.claim_for_delivery(c.id, ["c"], lease_token="M", lease_until=at(30), now=T0)

    assert await store.extend_leases(c.id, "L", at(90)) == 2
    assert await store.extend_leases(c.id, "nobody", at(90)) == 0
    leases = {d.external_id: d.lease_until for d in await store.list_documents(c.id)}
    assert leases == {"a": at(90), "b": at(90), "c": at(30)}
    # Extended leases survive a sweep that expires the others.
    assert await store.release_expired_leases(at(60)) == [(c.id, "c")]


async def test_release_expired_leases(store: Store) -> None:
    c1 = await add_connector(store)
    c2 = await add_connector(store)
    r1 = await start_run(store, c1.id)
    r2 = await start_run(store, c2.id)
    await commit(store, c1, r1, ("a", 1), ("b", 1), ("c", 1))
    await commit(store, c2, r2, ("a", 1))
    await store.claim_for_delivery(c1.id, ["a", "b"], lease_token="old", lease_until=at(10), now=T0)
    await store.claim_for_delivery(c1.id, ["c"], lease_token="new", lease_until=at(100), now=T0)
    await store.claim_for_delivery(c2.id, ["a"], lease_token="old2", lease_until=at(20), now=T0)

    assert await store.release_expired_leases(at(5)) == []
    released = await store.release_expired_leases(at(50))
    assert sorted(released) == sorted([(c1.id, "a"), (c1.id, "b"), (c2.id, "a")])
    a = await store.get_document(c1.id, "a")
    assert a is not None
    assert (a.status, a.lease_token, a.lease_until, a.attempts) == (
        DocStatus.PENDING,
        None,
        None,
        1,
    )
    assert (await get_doc(store, c1.id, "c")).status is DocStatus.RUNNING
    assert await store.release_expired_leases(at(50)) == []
    # The dead worker's late result is refused.
    assert (
        await store.finish_documents(c1.id, "old", [("a", DocStatus.INDEXED, None)], now=at(51))
        == 0
    )


async def test_failed_documents_lose_their_lease_in_their_connector_only(store: Store) -> None:
    c = await add_connector(store)
    other = await add_connector(store)
    run_id = await start_run(store, c.id)
    other_run = await start_run(store, other.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1), ("c", 1), ("d", 1))
    await commit(store, other, other_run, ("a", 1))
    await store.claim_for_delivery(c.id, ["b", "c"], lease_token="L", lease_until=at(60), now=T0)
    await store.finish_documents(c.id, "L", [("c", DocStatus.INDEXED, None)], now=at(1))

    await fail_open_documents(store, c.id, now_s=2)

    assert (await store.document_counts(c.id))[DocStatus.FAILED] == 3
    assert await statuses(store, c.id) == {
        "a": DocStatus.FAILED,
        "b": DocStatus.FAILED,
        "c": DocStatus.INDEXED,
        "d": DocStatus.FAILED,
    }
    b = await store.get_document(c.id, "b")
    assert b is not None
    assert (b.error, b.updated_at, b.lease_token, b.lease_until) == (
        ABORTED_ERROR,
        at(2),
        None,
        None,
    )
    assert await statuses(store, other.id) == {"a": DocStatus.PENDING}
    assert await store.pending_documents() == [(other.id, "a")]
    # Nothing pending or running is left: failing again writes no document.
    await fail_open_documents(store, c.id, now_s=3, error="x")
    assert await store.get_document(c.id, "b") == b


async def test_requeue_documents(store: Store) -> None:
    c = await add_connector(store)
    run_id = await start_run(store, c.id)
    await commit(store, c, run_id, ("a", 1), ("b", 1), ("c", 1), ("d", 1))
    await store.claim_for_delivery(
        c.id, ["a", "b", "c", "d"], lease_token="L", lease_until=at(60), now=T0
    )
    await store.finish_documents(
        c.id,
        "L",
        [
            ("a", DocStatus.FAILED, "HTTP 500"),
            ("b", DocStatus.FAILED, "timeout"),
            ("d", DocStatus.INDEXED, None),
        ],
        now=at(1),
    )
    await fail_open_documents(store, c.id, now_s=2)  # c
    await commit(store, c, run_id, ("e", 1), now_s=2)

    assert await store.requeue_documents(c.id, error=ABORTED_ERROR, now=at(3)) == ["c"]
    cdoc = await store.get_document(c.id, "c")
    assert cdoc is not None
    assert (cdoc.status, cdoc.attempts, cdoc.error, cdoc.updated_at) == (
        DocStatus.PENDING,
        0,
        None,
        at(3),
    )
    assert await statuses(store, c.id) == {
        "a": DocStatus.FAILED,
        "b": DocStatus.FAILED,
        "c": DocStatus.PENDING,
        "d": DocStatus.INDEXED,
        "e": DocStatus.PENDING,
    }

    assert sorted(await store.requeue_documents(c.id, now=at(4))) == ["a", "b"]
    a = await store.get_document(c.id, "a")
    assert a is not None and (a.status, a.attempts, a.error) == (DocStatus.PENDING, 0, None)
    assert await store.requeue_documents(c.id, now=at(5)) == []
    assert await store.document_counts(c.id) == {
        DocStatus.PENDING: 4,
        DocStatus.RUNNING: 0,
        DocStatus.INDEXED: 1,
        DocStatus.FAILED: 0,
        DocStatus.DELETED: 0,
    }


# --- SQLite only ----------------------------------------------------------------------


async def test_sqlite_from_url_relative_and_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = SQLiteStore.from_url("sqlite:///var/syncd.db")
    absolute = SQLiteStore.from_url(f"sqlite:///{tmp_path}/abs/deeper/syncd.db")
    assert relative.path == Path("var/syncd.db")
    assert absolute.path == tmp_path / "abs" / "deeper" / "syncd.db"
    for s in (relative, absolute):
        await s.open()
        await s.close()
    # Parent directories are created.
    assert (tmp_path / "var" / "syncd.db").is_file()
    assert (tmp_path / "abs" / "deeper" / "syncd.db").is_file()


async def test_sqlite_memory_url() -> None:
    s = SQLiteStore.from_url("sqlite:///:memory:")
    await s.open()
    try:
        c = await s.create_connector(make_connector())
        assert await s.get_connector(c.id) == c
    finally:
        await s.close()


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///", "sqlite://host/x.db", "sqlite:///x.db?a=1"]
)
def test_sqlite_bad_url(url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        SQLiteStore.from_url(url)
    assert raised.value.key == "store.url"


async def test_sqlite_file_settings_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "syncd.db"
    s = SQLiteStore(path)
    await s.open()
    c = await s.create_connector(make_connector())
    await s.close()
    await s.close()  # idempotent

    # Reopening migrates nothing again and keeps the data.
    s2 = SQLiteStore(path)
    await s2.open()
    try:
        assert await s2.get_connector(c.id) == c
    finally:
        await s2.close()
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1].version
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"connectors_next_run_at", "runs_connector_id", "documents_status"} <= indexes
        plan = " ".join(
            r[3]
            for r in raw.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM connectors WHERE next_run_at <= ? "
                "AND status IN ('active', 'error') ORDER BY next_run_at, id LIMIT 10",
                ("2024",),
            )
        )
        assert "connectors_next_run_at" in plan


async def test_sqlite_not_open_is_store_error(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "syncd.db")
    with pytest.raises(StoreError, match="not open"):
        await s.get_connector("x")


async def test_sqlite_driver_error_is_store_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-db").write_bytes(b"this is not a SQLite database, just some bytes" * 100)
    s = SQLiteStore(tmp_path / "not-a-db")
    with pytest.raises(StoreError) as raised:
        await s.open()
    assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)


async def test_sqlite_several_processes_open_a_new_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    stores = [SQLiteStore(path) for _ in range(5)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        c = await stores[0].create_connector(make_connector())
        for s in stores:
            assert await s.get_connector(c.id) == c
    finally:
        for s in stores:
            await s.close()
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1].version


async def test_sqlite_compare_and_set_across_connections(tmp_path: Path) -> None:
    """Two stores on one file (as two processes would be): still exactly one winner."""
    path = tmp_path / "syncd.db"
    stores = [SQLiteStore(path), SQLiteStore(path)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        c = await stores[0].create_connector(make_connector())

        def change(current: Connector) -> Transition:
            if current.sync_status is SyncStatus.RUNNING:
                raise Conflict("Sync already in progress")
            return Transition(replace(current, sync_status=SyncStatus.RUNNING, run_id=new_id()))

        results = await asyncio.gather(
            *(stores[i % 2].mutate_connector(c.id, change) for i in range(40)),
            return_exceptions=True,
        )
        assert sum(isinstance(r, tuple) for r in results) == 1
        assert sum(isinstance(r, Conflict) for r in results) == 39
    finally:
        for s in stores:
            await s.close()


async def test_sqlite_cancelled_commit_is_all_or_nothing(tmp_path: Path) -> None:
    """A commit cancelled at any of its awaits is rolled back (or was committed) whole."""
    s = SQLiteStore(tmp_path / "syncd.db")
    await s.open()
    try:
        c = await s.create_connector(make_connector())
        run_id = await start_run(s, c.id)
        cancelled = 0
        for k in range(12):
            task = asyncio.create_task(
                s.commit_page(
                    c.id, run_id, [make_doc(f"d{k}")], next_cursor=None, source_state={}, now=T0
                ),
                name=f"commit-{k}",
            )
            for _ in range(k):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                cancelled += 1
            current = await s.get_connector(c.id)
            assert current is not None
            docs = await s.list_documents(c.id)
            assert current.progress.pages == len(docs)
        assert cancelled > 0
        assert await commit(s, c, run_id, ("last", 1)) == ["last"]
    finally:
        await s.close()


async def test_sqlite_write_lock_held_by_another_process(tmp_path: Path) -> None:
    """A writer elsewhere: reads go on (WAL); a write waits ``busy_timeout``, then fails."""
    path = tmp_path / "syncd.db"
    s = SQLiteStore(path, busy_timeout=0.05)
    await s.open()
    try:
        c = await s.create_connector(make_connector())
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match="locked"):
                await s.mutate_connector(c.id, lambda cur: Transition(replace(cur, name="x")))
            assert await s.get_connector(c.id) == c
            other.execute("ROLLBACK")
        _, after = await s.mutate_connector(c.id, lambda cur: Transition(replace(cur, name="x")))
        assert after.name == "x"
    finally:
        await s.close()


# --- hash_fields ----------------------------------------------------------------------


async def test_hash_fields_round_trip(store: Store) -> None:
    whole = await add_connector(store)
    assert whole.hash_fields is None
    assert await store.get_connector(whole.id) == whole
    c = await add_connector(store, hash_fields=("title", "author.name", "ü.∑"))
    assert await store.get_connector(c.id) == c
    for value in (("body",), None):
        _, after = await store.mutate_connector(
            c.id, lambda cur, v=value: Transition(replace(cur, hash_fields=v))
        )
        assert after.hash_fields == value
        assert await store.get_connector(c.id) == after


async def test_commit_page_with_hash_fields_skips_volatile_changes(store: Store) -> None:
    c = await add_connector(store, hash_fields=("title",))
    run_id = await start_run(store, c.id)

    async def crawl(record: dict[str, Any], now_s: float) -> list[str]:
        docs, _ = document_inputs([record], "id", c.hash_fields)
        return await store.commit_page(
            c.id, run_id, docs, next_cursor=None, source_state={}, now=at(now_s)
        )

    first = {"id": "a", "title": "A", "views": 1}
    assert await crawl(first, 1) == ["a"]
    assert await crawl({**first, "views": 2}, 2) == []
    # Unchanged: the payload stays the one its hash was taken with.
    assert (await get_doc(store, c.id, "a")).payload == first
    assert await crawl({**first, "title": "B", "views": 3}, 3) == ["a"]
    assert (await get_doc(store, c.id, "a")).payload == {**first, "title": "B", "views": 3}


# --- totals (metrics) -----------------------------------------------------------------


async def test_totals_of_an_empty_store_name_every_status_at_zero(store: Store) -> None:
    assert await store.document_totals() == ALL_ZERO
    assert await store.connector_totals() == {
        (s, y): 0 for s in ConnectorStatus for y in SyncStatus
    }


async def test_totals_count_every_connector_and_document(store: Store) -> None:
    # Several connectors, each with documents in several statuses: the totals are sums over
    # all of them, from one query each (no per-connector walk, no cap).
    connectors = [await add_connector(store) for _ in range(3)]
    for c in connectors:
        run_id = await start_run(store, c.id)
        await commit(store, c, run_id, ("p", 1), ("r", 1), ("i", 1), ("f", 1))
        await store.claim_for_delivery(
            c.id, ["r", "i", "f"], lease_token="L", lease_until=at(60), now=T0
        )
        await store.finish_documents(
            c.id, "L", [("i", DocStatus.INDEXED, None), ("f", DocStatus.FAILED, "x")], now=at(1)
        )
    await add_connector(store, status=ConnectorStatus.PAUSED)
    await add_connector(store, status=ConnectorStatus.ERROR)
    await add_connector(store, status=ConnectorStatus.ERROR)
    assert await store.document_totals() == {
        **ALL_ZERO,
        DocStatus.PENDING: 3,
        DocStatus.RUNNING: 3,
        DocStatus.INDEXED: 3,
        DocStatus.FAILED: 3,
    }
    totals = await store.connector_totals()
    assert totals[ConnectorStatus.ACTIVE, SyncStatus.RUNNING] == 3
    assert totals[ConnectorStatus.PAUSED, SyncStatus.IDLE] == 1
    assert totals[ConnectorStatus.ERROR, SyncStatus.IDLE] == 2
    assert sum(totals.values()) == 6
    assert set(totals) == {(s, y) for s in ConnectorStatus for y in SyncStatus}


# --- instances (GET /status) ------------------------------------------------------------


async def test_instance_heartbeats_are_upserted_and_listed_by_age(store: Store) -> None:
    info = {"version": "1.0", "instance_id": "a", "workers": {"concurrency": 4, "busy": 1}}
    await store.heartbeat_instance("a/1", info, at(10))
    await store.heartbeat_instance("b/2", {"version": "1.0"}, at(1))
    await store.heartbeat_instance("a/1", {**info, "running_syncs": 2}, at(20))  # upsert

    beats = await store.list_instances(at(5))
    assert [(b.owner, b.heartbeat_at) for b in beats] == [("a/1", at(20))]
    assert beats[0].info == {**info, "running_syncs": 2}
    # "newer than": a heartbeat exactly at `since` is too old.
    assert [b.owner for b in await store.list_instances(at(1))] == ["a/1"]
    assert [b.owner for b in await store.list_instances(at(0))] == ["a/1", "b/2"]


async def test_a_removed_instance_is_no_longer_listed(store: Store) -> None:
    await store.heartbeat_instance("a/1", {}, at(1))
    await store.heartbeat_instance("b/2", {}, at(1))
    await store.remove_instance("a/1")
    await store.remove_instance("unknown")  # no-op
    assert [b.owner for b in await store.list_instances(T0)] == ["b/2"]


async def test_secret_state_is_kept_apart_from_every_other_write(store: Store) -> None:
    """``save_secret_state`` sets and removes keys durably; mutations and page commits keep
    what it wrote; nothing happens for a connector that is gone."""
    c = await store.create_connector(make_connector())
    assert c.secret_state == {}
    await store.save_secret_state(c.id, "oauth2", {"refresh_token": "r2", "generation": 2})
    await store.save_secret_state(c.id, "other", {"k": 1})
    await store.mutate_connector(c.id, lambda x: Transition(replace(x, name="renamed")))
    got = await store.get_connector(c.id)
    assert got is not None and got.name == "renamed"
    assert got.secret_state == {
        "oauth2": {"refresh_token": "r2", "generation": 2},
        "other": {"k": 1},
    }
    await store.save_secret_state(c.id, "other", None)
    got = await store.get_connector(c.id)
    assert got is not None and got.secret_state == {
        "oauth2": {"refresh_token": "r2", "generation": 2}
    }
    await store.save_secret_state("missing", "oauth2", {"refresh_token": "x"})
    assert await store.get_connector("missing") is None
