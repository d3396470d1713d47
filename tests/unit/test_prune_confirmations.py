"""How many complete crawls must miss a document before it is deleted (DESIGN.md §12): the
default per pagination style, the connector's own setting, and what a completed crawl does
with the documents it missed. Pure rules; time is fixed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from syncd import rules
from syncd.models import (
    Connector,
    ConnectorStatus,
    Crawl,
    PruneAction,
    PruneCounts,
    SyncStatus,
)

NOW = datetime(2024, 5, 5, 12, 0, tzinfo=UTC)
URL = "http://x/items"


def source(pagination: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"type": "http", "url": URL, **extra}
    if pagination is not None:
        found["pagination"] = pagination
    return found


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (source(), 1),  # no pagination: the `cursor` style
        (source({"cursor_param": "c"}), 1),  # no type: `cursor`
        (source({"type": "cursor"}), 1),
        (source({"type": "next_url"}), 1),
        (source({"type": "link_header"}), 1),
        (source({"type": "offset"}), 2),
        (source({"type": "page"}), 2),
        # What the user says of the list wins over its style.
        (source({"type": "cursor", "shifts": True}), 2),
        (source({"type": "link_header", "shifts": True}), 2),
        (source({"type": "page", "shifts": False}), 1),
        (source({"type": "offset", "shifts": False}), 1),
        ({"url": URL, "pagination": {"type": "offset"}}, 2),  # `http` is the default type
        ({"type": "feed", "pagination": {"type": "page"}}, 1),  # a plugin's keys mean nothing
        ({"type": "http", "url": URL, "pagination": "page"}, 1),  # not a pagination object
    ],
)
def test_the_default_follows_the_pagination(config: dict[str, Any], expected: int) -> None:
    assert rules.default_prune_confirmations(config) == expected


def connector(**fields: Any) -> Connector:
    values: dict[str, Any] = {
        "id": "c",
        "name": "c",
        "source": source({"type": "page"}),
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


def test_the_connectors_setting_wins_over_the_default() -> None:
    assert rules.prune_confirmations(connector()) == 2
    assert rules.prune_confirmations(connector(prune_confirmations=1)) == 1
    assert rules.prune_confirmations(connector(prune_confirmations=5)) == 5
    keyset = source({"type": "cursor"})
    assert rules.prune_confirmations(connector(source=keyset)) == 1
    assert rules.prune_confirmations(connector(source=keyset, prune_confirmations=3)) == 3


def succeed(c: Connector, counts: PruneCounts | None) -> Any:
    return rules.succeed(
        c, run_id="r", now=NOW, crawl=Crawl("k", True), counts=counts, delete_at_once=True
    )


def test_what_is_not_confirmed_yet_awaits() -> None:
    # 3 unseen, 1 of them missed for the second time: it goes, the other 2 wait.
    t = succeed(connector(awaiting_confirmation=9), PruneCounts(live=30, unseen=3, due=1))
    assert t.prune is not None
    assert (t.prune.action, t.prune.confirmations, t.prune.awaiting) == (
        PruneAction.DELETE_UNSEEN,
        2,
        2,
    )
    assert (t.connector.awaiting_confirmation, t.connector.deletions_held) == (2, 0)
    # None confirmed: still a plan (each unseen document is missed once more), deleting none.
    t = succeed(connector(), PruneCounts(live=30, unseen=3, due=0))
    assert t.prune is not None and (t.prune.action, t.prune.awaiting) == (
        PruneAction.DELETE_UNSEEN,
        3,
    )
    assert t.connector.awaiting_confirmation == 3


@pytest.mark.parametrize(
    ("unseen", "due", "action", "held", "waiting"),
    [
        (25, 0, PruneAction.DELETE_UNSEEN, 0, 25),  # most are unseen, none confirmed
        (25, 15, PruneAction.DELETE_UNSEEN, 0, 10),  # half confirmed is not more than half
        (25, 16, PruneAction.HOLD_UNSEEN, 16, 9),
        (20, 11, PruneAction.DELETE_UNSEEN, 0, 9),  # more than ten, not more than half
    ],
)
def test_the_guard_counts_what_is_about_to_be_deleted(
    unseen: int, due: int, action: PruneAction, held: int, waiting: int
) -> None:
    t = succeed(connector(), PruneCounts(live=30, unseen=unseen, due=due))
    assert t.prune is not None and t.prune.action is action
    assert (t.connector.deletions_held, t.connector.awaiting_confirmation) == (held, waiting)
    assert t.prune.awaiting == waiting


def test_nothing_awaits_when_nothing_is_pruned() -> None:
    waiting = connector(awaiting_confirmation=4)
    none = succeed(waiting, PruneCounts(live=30, unseen=0, due=0))
    assert (none.prune, none.connector.awaiting_confirmation) == (None, 0)
    off = succeed(replace(waiting, prune=False), PruneCounts(live=30, unseen=3, due=1))
    assert (off.prune, off.connector.awaiting_confirmation) == (None, 0)
    # A run that did not complete the connector's full crawl leaves the count as it was.
    other = rules.succeed(
        waiting, run_id="r", now=NOW, crawl=Crawl("k", False), counts=None, delete_at_once=True
    )
    assert other.connector.awaiting_confirmation == 4
    # And a failed or aborted run changes nothing of it.
    assert rules.fail(waiting, run_id="r", error="x", now=NOW).connector.awaiting_confirmation == 4
    assert rules.abort(waiting, now=NOW).connector.awaiting_confirmation == 4
    assert rules.interrupt(waiting, run_id="r", now=NOW).connector.awaiting_confirmation == 4


def test_prune_confirmations_is_patchable() -> None:
    c = connector(sync_status=SyncStatus.IDLE, run_id=None, status=ConnectorStatus.ACTIVE)
    t = rules.patch(c, {"prune_confirmations": 3}, now=NOW)
    assert t.connector.prune_confirmations == 3
    t = rules.patch(t.connector, {"prune_confirmations": None}, now=NOW)
    assert t.connector.prune_confirmations is None
