"""The store contract of deletions (DESIGN.md §11), for every backend: crawl stamps, the
prune counts and plans applied with a transition, tombstones in a page, deletes finished
under their lease, documents coming back, and the purge of old tombstones. Time is fixed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from syncd import rules
from syncd.errors import Conflict, Fenced
from syncd.models import (
    Connector,
    Crawl,
    DocOp,
    DocStatus,
    PruneAction,
    PruneCounts,
    PrunePlan,
    Transition,
    new_id,
)
from syncd.store.base import Store

from .factories import T0, at, make_connector, make_doc, start_run


async def page(
    store: Store,
    c: Connector,
    run_id: str,
    *versions: tuple[str, int],
    crawl: Crawl | None = None,
    now_s: float = 1,
    **options: Any,
) -> list[str]:
    return await store.commit_page(
        c.id,
        run_id,
        [make_doc(e, v) for e, v in versions],
        next_cursor=None,
        source_state={},
        now=at(now_s),
        crawl=crawl,
        **options,
    )


async def documents(store: Store, connector_id: str) -> dict[str, tuple[DocStatus, DocOp]]:
    return {d.external_id: (d.status, d.op) for d in await store.list_documents(connector_id)}


def keep(counts_seen: list[PruneCounts | None], plan: PrunePlan | None = None) -> Any:
    """A prune change that records the counts it is given and applies ``plan``."""

    def change(c: Connector, counts: PruneCounts | None) -> Transition:
        counts_seen.append(counts)
        return Transition(replace(c, updated_at=at(10)), prune=plan)

    return change


async def crawl(
    store: Store, c: Connector, *versions: tuple[str, int], indexed: bool = True
) -> Crawl:
    """A new full crawl of one page of ``versions`` (its run left running)."""
    run_id = await start_run(store, c.id, now=at(20))
    new = Crawl(new_id(), True)
    await page(store, c, run_id, *versions, crawl=new, now_s=21, indexed=indexed)
    return new


async def crawled(store: Store, indexed: bool = True) -> tuple[Connector, str, Crawl]:
    """A connector whose first crawl ``c1`` saw a, b, c, d; a second crawl ``c2`` (run
    returned) saw a and b only."""
    c = await store.create_connector(make_connector())
    first = await start_run(store, c.id)
    c1 = Crawl("c1", True)
    await page(store, c, first, ("a", 1), ("b", 1), ("c", 1), ("d", 1), crawl=c1, indexed=indexed)
    run_id = await start_run(store, c.id, now=at(5))
    c2 = Crawl("c2", True)
    await page(store, c, run_id, ("a", 1), ("b", 2), crawl=c2, now_s=6, indexed=indexed)
    return c, run_id, c2


async def test_commit_page_records_the_crawl_on_the_connector(store: Store) -> None:
    c, _, _ = await crawled(store)
    got = await store.get_connector(c.id)
    assert got is not None and (got.crawl_id, got.crawl_full) == ("c2", True)
    # A run without a crawl (begun before crawls were stamped) leaves it as it is.
    run_id = await start_run(store, c.id)
    await page(store, c, run_id, ("e", 1))
    got = await store.get_connector(c.id)
    assert got is not None and got.crawl_id == "c2"


async def test_prune_counts_see_the_documents_the_crawl_did_not_stamp(store: Store) -> None:
    c, _, c2 = await crawled(store)
    seen: list[PruneCounts | None] = []
    # Both the unchanged (a) and the rewritten (b) documents were stamped by crawl c2.
    await store.mutate_with_prune(c.id, keep(seen), unseen_by=c2.id)
    await store.mutate_with_prune(c.id, keep(seen))
    assert seen == [PruneCounts(live=4, unseen=2, due=2), None]


async def test_delete_unseen_at_once_drops_payloads(store: Store) -> None:
    c, run_id, c2 = await crawled(store)
    plan = PrunePlan(PruneAction.DELETE_UNSEEN, crawl_id=c2.id, delete_at_once=True, run_id=run_id)
    _, after, result = await store.mutate_with_prune(c.id, keep([], plan), unseen_by=c2.id)
    assert (result.queued, result.deleted, result.held, result.deleting) == ((), 2, 0, 2)
    assert after.updated_at == at(10)
    assert await documents(store, c.id) == {
        "a": (DocStatus.INDEXED, DocOp.INDEX),
        "b": (DocStatus.INDEXED, DocOp.INDEX),
        "c": (DocStatus.DELETED, DocOp.DELETE),
        "d": (DocStatus.DELETED, DocOp.DELETE),
    }
    gone = await store.get_document(c.id, "c")
    assert gone is not None and (gone.payload, gone.updated_at) == (None, at(10))
    run = await store.get_run(run_id)
    assert run is not None and (run.deleted, run.deletions_held) == (2, 0)
    counts = await store.document_counts(c.id)
    assert (counts[DocStatus.DELETED], counts[DocStatus.INDEXED]) == (2, 2)
    # Deleted documents are not live: the next crawl that sees the others finds nothing gone.
    c3 = await crawl(store, c, ("a", 1), ("b", 2))
    seen: list[PruneCounts | None] = []
    await store.mutate_with_prune(c.id, keep(seen), unseen_by=c3.id)
    assert seen == [PruneCounts(live=2, unseen=0, due=0)]


async def test_delete_unseen_through_the_queue(store: Store) -> None:
    c, run_id, c2 = await crawled(store, indexed=False)
    await store.claim_for_delivery(c.id, ["c"], lease_token="L", lease_until=at(60), now=at(7))
    plan = PrunePlan(PruneAction.DELETE_UNSEEN, crawl_id=c2.id, run_id=run_id)
    _, _, result = await store.mutate_with_prune(c.id, keep([], plan), unseen_by=c2.id)
    assert (result.queued, result.deleted) == (("c", "d"), 0)
    # The one being indexed lost its lease: its indexing result is refused.
    assert await store.finish_documents(c.id, "L", [("c", DocStatus.INDEXED, None)], now=T0) == 0
    assert (await documents(store, c.id))["c"] == (DocStatus.PENDING, DocOp.DELETE)
    assert (c.id, "c") in await store.pending_documents()
    # Pending deletes are not counted again, nor deleted twice.
    c3 = await crawl(store, c, ("a", 1), ("b", 2), indexed=False)
    plan3 = replace(plan, crawl_id=c3.id)
    seen: list[PruneCounts | None] = []
    _, _, again = await store.mutate_with_prune(c.id, keep(seen, plan3), unseen_by=c3.id)
    assert (seen, again.queued) == ([PruneCounts(live=4, unseen=0, due=0)], ())

    claimed = (
        await store.claim_for_delivery(
            c.id, ["c", "d"], lease_token="D", lease_until=at(60), now=at(11)
        )
    ).documents
    assert [(d.external_id, d.op) for d in claimed] == [("c", DocOp.DELETE), ("d", DocOp.DELETE)]
    done = await store.finish_documents(
        c.id, "D", [("c", DocStatus.DELETED, None), ("d", DocStatus.FAILED, "HTTP 500")], now=at(12)
    )
    assert done == 2
    c_doc, d_doc = await store.get_document(c.id, "c"), await store.get_document(c.id, "d")
    assert c_doc is not None and (c_doc.status, c_doc.payload) == (DocStatus.DELETED, None)
    assert d_doc is not None and (d_doc.status, d_doc.op, d_doc.error) == (
        DocStatus.FAILED,
        DocOp.DELETE,
        "HTTP 500",
    )
    # A failed delete is redone by retry (its op kept).
    assert await store.requeue_documents(c.id, now=at(13)) == ["d"]
    assert (await documents(store, c.id))["d"] == (DocStatus.PENDING, DocOp.DELETE)


async def test_hold_then_delete_held(store: Store) -> None:
    c, run_id, c2 = await crawled(store)
    hold = PrunePlan(PruneAction.HOLD_UNSEEN, crawl_id=c2.id, run_id=run_id)
    _, _, held = await store.mutate_with_prune(c.id, keep([], hold), unseen_by=c2.id)
    assert (held.held, held.deleting) == (2, 0)
    run = await store.get_run(run_id)
    assert run is not None and (run.deleted, run.deletions_held) == (0, 2)
    assert {s for s, _ in (await documents(store, c.id)).values()} == {DocStatus.INDEXED}
    # A held document seen again by a crawl is no longer held.
    third = await start_run(store, c.id, now=at(20))
    await page(store, c, third, ("c", 1), crawl=Crawl("c3", True), now_s=21, indexed=True)

    apply = PrunePlan(PruneAction.DELETE_HELD, delete_at_once=True)
    _, _, applied = await store.mutate_with_prune(c.id, keep([], apply))
    assert (applied.deleted, applied.held) == (1, 0)
    found = await documents(store, c.id)
    assert (found["c"][0], found["d"][0]) == (DocStatus.INDEXED, DocStatus.DELETED)


async def test_a_prune_change_that_raises_writes_nothing(store: Store) -> None:
    c, _, c2 = await crawled(store)

    def refuse(current: Connector, counts: PruneCounts | None) -> Transition:
        return rules.apply_held(current, now=at(10), delete_at_once=True)

    with pytest.raises(Conflict, match=r"^No deletions held$"):
        await store.mutate_with_prune(c.id, refuse)
    # The success rule is fenced like any run write.
    with pytest.raises(Fenced):
        await store.mutate_with_prune(
            c.id,
            lambda cur, counts: rules.succeed(cur, run_id="other", now=at(10), crawl=c2),
            unseen_by=c2.id,
        )
    assert {s for s, _ in (await documents(store, c.id)).values()} == {DocStatus.INDEXED}


async def test_tombstones_in_a_page(store: Store) -> None:
    c, run_id, _ = await crawled(store, indexed=False)
    queued = await page(store, c, run_id, ("e", 1), deletions=["a", "e", "zz"], now_s=8)
    # "e" is a record of the page too: not a deletion; "zz" was never stored.
    assert queued == ["e", "a"]
    assert (await documents(store, c.id))["a"] == (DocStatus.PENDING, DocOp.DELETE)
    run = await store.get_run(run_id)
    assert run is not None and run.deleted == 1
    now_gone = await page(store, c, run_id, deletions=["b"], delete_at_once=True, now_s=9)
    assert now_gone == []
    assert (await documents(store, c.id))["b"] == (DocStatus.DELETED, DocOp.DELETE)


async def test_a_deleted_document_seen_again_is_written_again(store: Store) -> None:
    c, run_id, c2 = await crawled(store, indexed=False)
    plan = PrunePlan(PruneAction.DELETE_UNSEEN, crawl_id=c2.id, delete_at_once=True, run_id=run_id)
    await store.mutate_with_prune(c.id, keep([], plan), unseen_by=c2.id)
    # c reappears unchanged: written again as an index operation.
    run_id = await start_run(store, c.id, now=at(30))
    again = await page(store, c, run_id, ("c", 1), crawl=Crawl("c3", True), now_s=31)
    assert again == ["c"]
    c_doc = await store.get_document(c.id, "c")
    assert c_doc is not None and (c_doc.status, c_doc.op, c_doc.payload) == (
        DocStatus.PENDING,
        DocOp.INDEX,
        make_doc("c").payload,
    )


async def test_purge_deleted_removes_old_tombstones_only(store: Store) -> None:
    c, run_id, c2 = await crawled(store)
    plan = PrunePlan(PruneAction.DELETE_UNSEEN, crawl_id=c2.id, delete_at_once=True, run_id=run_id)
    await store.mutate_with_prune(c.id, keep([], plan), unseen_by=c2.id)  # deleted at at(10)
    assert await store.purge_deleted(at(10)) == 0
    assert await store.purge_deleted(at(10.5)) == 2
    assert sorted(await documents(store, c.id)) == ["a", "b"]


async def test_only_the_connectors_own_crawl_is_counted(store: Store) -> None:
    c, _, c2 = await crawled(store)
    seen: list[PruneCounts | None] = []
    # A fresh run that committed no page yet: its crawl is not the connector's.
    await store.mutate_with_prune(c.id, keep(seen), unseen_by="not-yet-stamped")
    assert seen == [None]
    await store.mutate_with_prune(c.id, keep(seen), unseen_by=c2.id)
    assert seen == [None, PruneCounts(live=4, unseen=2, due=2)]


async def test_applying_held_deletions_leaves_nothing_held(store: Store) -> None:
    c, run_id, c2 = await crawled(store)
    hold = PrunePlan(PruneAction.HOLD_UNSEEN, crawl_id=c2.id, run_id=run_id)

    def held(current: Connector, counts: PruneCounts | None) -> Transition:
        return Transition(replace(current, deletions_held=2, updated_at=at(10)), prune=hold)

    await store.mutate_with_prune(c.id, held, unseen_by=c2.id)
    await crawl(store, c, ("c", 1))  # c comes back (unchanged) in a crawl begun since
    apply = PrunePlan(PruneAction.DELETE_HELD, delete_at_once=True)
    _, _, applied = await store.mutate_with_prune(c.id, keep([], apply))
    assert applied.deleted == 1
    # Held again later (c gone once more, with a), c's old mark does not linger: only what
    # this hold marks is deleted by the next apply.
    c4 = await crawl(store, c, ("b", 2))
    hold4 = PrunePlan(PruneAction.HOLD_UNSEEN, crawl_id=c4.id)
    _, _, again = await store.mutate_with_prune(c.id, keep([], hold4), unseen_by=c4.id)
    assert again.held == 2
    _, _, applied = await store.mutate_with_prune(c.id, keep([], apply))
    assert applied.deleted == 2
    assert sorted(
        e for e, (s, _) in (await documents(store, c.id)).items() if s is DocStatus.DELETED
    ) == [
        "a",
        "c",
        "d",
    ]


# --- confirmations: a document goes once enough complete crawls in a row missed it -------


def complete(run_id: str, crawl_done: Crawl) -> Any:
    """The success rule of ``run_id`` completing ``crawl_done`` (deletions at once)."""

    def change(c: Connector, counts: PruneCounts | None) -> Transition:
        return rules.succeed(
            c, run_id=run_id, now=at(10), crawl=crawl_done, counts=counts, delete_at_once=True
        )

    return change


def change_for(run_id: str, crawl_done: Crawl, seen: list[PruneCounts | None]) -> Any:
    """:func:`complete`, recording the counts it is given."""

    def change(current: Connector, counts: PruneCounts | None) -> Transition:
        seen.append(counts)
        return complete(run_id, crawl_done)(current, counts)

    return change


async def missed(store: Store, connector_id: str) -> dict[str, int]:
    """Each document's complete crawls in a row that missed it (live documents only)."""
    return {
        d.external_id: d.missed
        for d in await store.list_documents(connector_id)
        if d.status is not DocStatus.DELETED
    }


async def confirming(store: Store) -> tuple[Connector, str, Crawl]:
    """A connector asking for 2 confirmations whose first crawl saw a, b, c, d and whose
    second (run returned, not yet ended) saw a and b only."""
    c = await store.create_connector(make_connector(prune_confirmations=2))
    first = await start_run(store, c.id)
    c1 = Crawl("c1", True)
    await page(store, c, first, ("a", 1), ("b", 1), ("c", 1), ("d", 1), crawl=c1, indexed=True)
    await store.mutate_with_prune(c.id, complete(first, c1), unseen_by=c1.id)
    run_id = await start_run(store, c.id, now=at(5))
    c2 = Crawl("c2", True)
    await page(store, c, run_id, ("a", 1), ("b", 1), crawl=c2, now_s=6, indexed=True)
    return c, run_id, c2


async def test_a_document_missed_once_awaits_a_second_crawl(store: Store) -> None:
    c, run_id, c2 = await confirming(store)
    seen: list[PruneCounts | None] = []
    _, after, result = await store.mutate_with_prune(
        c.id, change_for(run_id, c2, seen), unseen_by=c2.id
    )
    # Unseen: c and d; confirmed gone by this crawl: none (missed once, 2 asked).
    assert seen == [PruneCounts(live=4, unseen=2, due=0)]
    assert (result.deleting, result.held, result.awaiting) == (0, 0, 2)
    assert (after.awaiting_confirmation, after.deletions_held) == (2, 0)
    assert await missed(store, c.id) == {"a": 0, "b": 0, "c": 1, "d": 1}
    assert {s for s, _ in (await documents(store, c.id)).values()} == {DocStatus.INDEXED}
    run = await store.get_run(run_id)
    assert run is not None and (run.deleted, run.awaiting_confirmation) == (0, 2)
    got = await store.get_connector(c.id)
    assert got is not None and got.awaiting_confirmation == 2
    single = await store.get_document(c.id, "c")
    assert single is not None and single.missed == 1

    # The third crawl sees c again (unchanged: not rewritten) but not d: d is confirmed gone,
    # c starts over.
    third = await start_run(store, c.id, now=at(20))
    c3 = Crawl("c3", True)
    await page(store, c, third, ("a", 1), ("b", 1), ("c", 1), crawl=c3, now_s=21, indexed=True)
    seen.clear()
    _, after, result = await store.mutate_with_prune(
        c.id, change_for(third, c3, seen), unseen_by=c3.id
    )
    assert seen == [PruneCounts(live=4, unseen=1, due=1)]
    assert (result.deleted, result.awaiting) == (1, 0)
    assert after.awaiting_confirmation == 0
    assert await missed(store, c.id) == {"a": 0, "b": 0, "c": 0}
    assert (await documents(store, c.id))["d"] == (DocStatus.DELETED, DocOp.DELETE)
    gone = await store.get_document(c.id, "d")
    assert gone is not None and gone.missed == 0
    run = await store.get_run(third)
    assert run is not None and (run.deleted, run.awaiting_confirmation) == (1, 0)


async def test_a_document_written_again_is_no_longer_missed(store: Store) -> None:
    c, run_id, c2 = await confirming(store)
    await store.mutate_with_prune(c.id, complete(run_id, c2), unseen_by=c2.id)
    # An incremental run writes c again (changed): it is seen, its count is 0 at once.
    again = await start_run(store, c.id, now=at(20))
    await page(store, c, again, ("c", 2), now_s=21, indexed=True)
    assert await missed(store, c.id) == {"a": 0, "b": 0, "c": 0, "d": 1}
    # A tombstone deletes d at once, whatever its count.
    await page(store, c, again, deletions=["d"], delete_at_once=True, now_s=22)
    gone = await store.get_document(c.id, "d")
    assert gone is not None and (gone.status, gone.missed) == (DocStatus.DELETED, 0)


async def test_a_crawl_that_does_not_complete_counts_nothing(store: Store) -> None:
    c, run_id, _ = await confirming(store)
    seen: list[PruneCounts | None] = []
    # The success of a run whose crawl is not the connector's (a fresh run that committed no
    # page): no counts, no miss counted.
    other = Crawl("not-yet-stamped", True)
    await store.mutate_with_prune(c.id, change_for(run_id, other, seen), unseen_by=other.id)
    assert seen == [None]
    assert await missed(store, c.id) == {"a": 0, "b": 0, "c": 0, "d": 0}
    got = await store.get_connector(c.id)
    assert got is not None and got.awaiting_confirmation == 0


async def test_prune_off_counts_no_misses(store: Store) -> None:
    c, run_id, c2 = await confirming(store)
    await store.mutate_with_prune(c.id, complete(run_id, c2), unseen_by=c2.id)
    assert (await missed(store, c.id))["c"] == 1
    await store.mutate_connector(c.id, lambda cur: Transition(replace(cur, prune=False)))
    third = await start_run(store, c.id, now=at(20))
    c3 = Crawl("c3", True)
    await page(store, c, third, ("a", 1), crawl=c3, now_s=21, indexed=True)
    _, after, result = await store.mutate_with_prune(c.id, complete(third, c3), unseen_by=c3.id)
    assert (result.deleting, result.awaiting, after.awaiting_confirmation) == (0, 0, 0)
    assert await missed(store, c.id) == {"a": 0, "b": 0, "c": 0, "d": 0}


async def test_the_guard_holds_only_what_is_confirmed(store: Store) -> None:
    c, run_id, c2 = await confirming(store)
    await store.mutate_with_prune(c.id, complete(run_id, c2), unseen_by=c2.id)  # c, d: 1
    # The third crawl misses c, d (now confirmed) and b (missed once): hold what is confirmed.
    third = await start_run(store, c.id, now=at(20))
    c3 = Crawl("c3", True)
    await page(store, c, third, ("a", 1), crawl=c3, now_s=21, indexed=True)
    seen: list[PruneCounts | None] = []
    hold = PrunePlan(
        PruneAction.HOLD_UNSEEN, crawl_id=c3.id, run_id=third, confirmations=2, awaiting=1
    )
    _, _, held = await store.mutate_with_prune(c.id, keep(seen, hold), unseen_by=c3.id)
    assert seen == [PruneCounts(live=4, unseen=3, due=2)]
    assert (held.held, held.awaiting) == (2, 1)
    assert await missed(store, c.id) == {"a": 0, "b": 1, "c": 2, "d": 2}
    run = await store.get_run(third)
    assert run is not None and (run.deletions_held, run.awaiting_confirmation) == (2, 1)
    # Applying the hold deletes c and d, not b.
    apply = PrunePlan(PruneAction.DELETE_HELD, delete_at_once=True)
    _, _, applied = await store.mutate_with_prune(c.id, keep([], apply))
    assert applied.deleted == 2
    assert sorted(
        e for e, (s, _) in (await documents(store, c.id)).items() if s is DocStatus.DELETED
    ) == ["c", "d"]
