"""The pure rules of deletions (DESIGN.md §11): crawls, the guard, held deletions, tombstones
and the enqueue rule for documents that come back. Time is passed in."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from syncd import rules
from syncd.errors import Conflict, Fenced
from syncd.models import (
    Connector,
    ConnectorStatus,
    Crawl,
    DocOp,
    DocStatus,
    PruneAction,
    PruneCounts,
    SyncStatus,
)

NOW = datetime(2024, 5, 5, 12, 0, tzinfo=UTC)  # a Sunday
FULL = {"type": "http", "url": "http://x/items"}
INCREMENTAL = {**FULL, "incremental": {"field": "updated_at", "param": "since"}}


def connector(**fields: Any) -> Connector:
    values: dict[str, Any] = {
        "id": "c",
        "name": "c",
        "source": FULL,
        "indexer": {"type": "store"},
        "created_at": NOW,
        "updated_at": NOW,
        "sync_status": SyncStatus.RUNNING,
        "run_id": "r",
        "crawl_id": "k",
        "crawl_full": True,
    }
    values.update(fields)
    return Connector(**values)


def succeed(c: Connector, counts: PruneCounts | None, crawl: Crawl | None = None) -> Any:
    return rules.succeed(
        c, run_id="r", now=NOW, crawl=crawl or Crawl("k", True), counts=counts, delete_at_once=True
    )


@pytest.mark.parametrize(
    ("live", "unseen", "action", "held"),
    [
        (30, 0, None, 0),
        (30, 10, PruneAction.DELETE_UNSEEN, 0),
        (30, 15, PruneAction.DELETE_UNSEEN, 0),  # exactly half is not more than half
        (30, 16, PruneAction.HOLD_UNSEEN, 16),
        (30, 25, PruneAction.HOLD_UNSEEN, 25),
        (12, 10, PruneAction.DELETE_UNSEEN, 0),  # more than half, but not more than ten
        (12, 11, PruneAction.HOLD_UNSEEN, 11),
    ],
)
def test_the_guard(live: int, unseen: int, action: PruneAction | None, held: int) -> None:
    t = succeed(connector(deletions_held=7), PruneCounts(live, unseen, unseen))
    assert (t.prune.action if t.prune else None) == action
    assert t.connector.deletions_held == held
    if t.prune is not None:
        assert (t.prune.crawl_id, t.prune.run_id, t.prune.delete_at_once) == ("k", "r", True)


def test_prune_max_fraction_and_prune_off() -> None:
    counts = PruneCounts(30, 25, 25)
    loose = succeed(connector(prune_max_fraction=1.0), counts)
    assert loose.prune is not None and loose.prune.action is PruneAction.DELETE_UNSEEN
    strict = succeed(connector(prune_max_fraction=0.0), PruneCounts(100, 11, 11))
    assert strict.prune is not None and strict.prune.action is PruneAction.HOLD_UNSEEN
    off = succeed(connector(prune=False, deletions_held=4), counts)
    assert (off.prune, off.connector.deletions_held) == (None, 0)


def test_only_the_completion_of_the_connectors_full_crawl_prunes() -> None:
    counts = PruneCounts(30, 10, 10)
    held = connector(deletions_held=5)
    # Not full (an incremental crawl), or another crawl than the connector's (a fresh run
    # that committed no page), or no crawl: nothing pruned, the held count kept.
    for crawl in (Crawl("k", False), Crawl("other", True)):
        t = succeed(held, counts, crawl)
        assert (t.prune, t.connector.deletions_held) == (None, 5)
    t = rules.succeed(held, run_id="r", now=NOW, counts=counts)
    assert (t.prune, t.connector.deletions_held) == (None, 5)
    with pytest.raises(Fenced):
        rules.succeed(held, run_id="another", now=NOW, crawl=Crawl("k", True), counts=counts)


def test_crawl_of_a_run() -> None:
    c = connector(crawl_id="old", crawl_full=False)
    assert rules.crawl_of_run(c, resuming=True, now=NOW, new_crawl_id="n") == Crawl("old", False)
    assert rules.crawl_of_run(c, resuming=False, now=NOW, new_crawl_id="n") == Crawl("n", True)
    legacy = connector(crawl_id=None)
    assert rules.crawl_of_run(legacy, resuming=True, now=NOW, new_crawl_id="n") is None


def test_a_source_with_max_pages_never_crawls_in_full() -> None:
    capped = connector(source={**FULL, "max_pages": 100})
    assert not rules.full_crawl_due(capped, NOW)
    assert rules.full_crawl_due(connector(), NOW)


def test_an_incremental_source_crawls_in_full_once_its_schedule_fired() -> None:
    inc = connector(source=INCREMENTAL, full_crawl_schedule="0 3 * * 0")
    assert not rules.full_crawl_due(inc, NOW)
    due = replace(inc, next_full_crawl_at=NOW - timedelta(seconds=1))
    assert rules.full_crawl_due(due, NOW)
    assert rules.crawl_of_run(due, resuming=False, now=NOW, new_crawl_id="n") == Crawl("n", True)
    # Completing it sets the next fire; an incremental crawl's completion does not.
    done = succeed(due, PruneCounts(5, 0, 0), Crawl("k", True))
    assert done.connector.next_full_crawl_at == datetime(2024, 5, 12, 3, 0, tzinfo=UTC)
    partial = succeed(due, None, Crawl("k", False))
    assert partial.connector.next_full_crawl_at == due.next_full_crawl_at


def test_a_full_crawl_of_an_incremental_source_starts_without_its_mark() -> None:
    state = {"completed": {"since": 1, "high_water": 9}}
    inc = connector(source=INCREMENTAL, source_state=state)
    assert rules.start_state(inc, resuming=False) == {"since": 1, "high_water": 9}
    assert rules.start_state(inc, resuming=False, full=True) == {}
    # A source that is not incremental (a plugin) keeps its state on every crawl.
    plugin = connector(source={"type": "mine"}, source_state=state)
    assert rules.start_state(plugin, resuming=False, full=True) == {"since": 1, "high_water": 9}


def test_next_run_at_takes_the_earliest_schedule() -> None:
    both = connector(sync_schedule="0 * * * *", full_crawl_schedule="30 12 * * *")
    assert rules.next_run_at(both, NOW) == NOW + timedelta(minutes=30)
    only_full = connector(full_crawl_schedule="0 3 * * 0")
    assert rules.next_run_at(only_full, NOW) == datetime(2024, 5, 12, 3, 0, tzinfo=UTC)
    assert rules.next_full_crawl_at(connector(), NOW) is None


def test_a_patch_of_the_full_crawl_schedule_reschedules() -> None:
    c = connector(sync_status=SyncStatus.IDLE, run_id=None)
    t = rules.patch(c, {"full_crawl_schedule": "0 3 * * 0"}, now=NOW)
    expected = datetime(2024, 5, 12, 3, 0, tzinfo=UTC)
    assert (t.connector.next_full_crawl_at, t.connector.next_run_at) == (expected, expected)
    t = rules.patch(c, {"prune": False, "prune_max_fraction": 0.9}, now=NOW)
    assert (t.connector.prune, t.connector.prune_max_fraction) == (False, 0.9)


def test_apply_held() -> None:
    c = connector(deletions_held=25)
    t = rules.apply_held(c, now=NOW, delete_at_once=False)
    assert t.connector.deletions_held == 0
    assert t.prune is not None and (t.prune.action, t.prune.delete_at_once, t.prune.run_id) == (
        PruneAction.DELETE_HELD,
        False,
        None,
    )
    with pytest.raises(Conflict, match=r"^No deletions held$"):
        rules.apply_held(connector(), now=NOW, delete_at_once=False)
    with pytest.raises(Conflict, match=r"^Connector is being deleted$"):
        rules.apply_held(replace(c, status=ConnectorStatus.DELETING), now=NOW, delete_at_once=False)


@pytest.mark.parametrize(
    ("value", "tombstone"),
    [(True, True), ("2024-01-01", True), (0, True), ({}, True), (False, False), (None, False)],
)
def test_tombstone_values(value: Any, tombstone: bool) -> None:
    assert rules.is_tombstone({"meta": {"deleted": value}}, ["meta", "deleted"]) is tombstone
    assert rules.is_tombstone({"meta": {}}, ["meta", "deleted"]) is False


def test_split_tombstones() -> None:
    records = [
        {"id": 1, "deleted": True},
        {"id": 2},
        {"deleted": True},  # no id: kept, to be rejected as a record
        {"id": "x", "deleted": "2024"},
    ]
    live, gone = rules.split_tombstones(records, "deleted", "id")
    assert (live, gone) == ([{"id": 2}, {"deleted": True}], ["1", "x"])
    assert rules.deleted_field({**FULL, "incremental": {"deleted_field": "a.b"}}) == "a.b"
    assert rules.deleted_field(FULL) is None


def test_a_document_deleted_or_being_deleted_is_written_again() -> None:
    h = "hash"
    deleted = rules.ExistingDocument(h, DocStatus.DELETED, None, DocOp.DELETE)
    deleting = rules.ExistingDocument(h, DocStatus.PENDING, None, DocOp.DELETE)
    failed_delete = rules.ExistingDocument(h, DocStatus.FAILED, "HTTP 500", DocOp.DELETE)
    indexed = rules.ExistingDocument(h, DocStatus.INDEXED, None, DocOp.INDEX)
    assert [rules.must_write(e, h) for e in (deleted, deleting, failed_delete, indexed)] == [
        True,
        True,
        True,
        False,
    ]
