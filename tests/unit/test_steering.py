"""Steering a crawl (DESIGN.md §12) as pure rules: the crawl a run makes, what its pages carry
and its completion leaves, the mode a trigger asks for (queued or not), the mark set and
reset, and the state shown; the bodies' checks; the CLI's values."""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pytest

from syncd import rules
from syncd.cli.parser import build_parser, mark_value
from syncd.errors import Conflict, ValidationError
from syncd.models import Connector, ConnectorStatus, Crawl, CrawlMode, CrawlWindow, SyncStatus
from syncd.rules.steering import Steer, begin_crawl, complete_crawl, drop_request, with_request
from syncd.schema.steering import SyncRequest, parse_sync_request

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(hours=1)
INC = {
    "type": "http",
    "url": "http://127.0.0.1:9/items",
    "incremental": {"field": "u", "param": "s"},
}
FULL = Steer(CrawlMode.FULL)
INCREMENTAL = Steer(CrawlMode.INCREMENTAL)
WINDOW = Steer(CrawlMode.BACKFILL, CrawlWindow("a", "m"))


def make(**fields: Any) -> Connector:
    base = Connector(
        id="c1",
        name="moving",
        source=INC,
        indexer={"type": "store"},
        created_at=T0,
        updated_at=T0,
        source_state={"completed": {"high_water": 50}},
    )
    return replace(base, **fields)


def asked(c: Connector, steer: Steer) -> Connector:
    return with_request(c, steer, queued_at=None)


# --- the crawl a run makes ----------------------------------------------------------------


def test_with_nothing_held_a_run_crawls_as_before() -> None:
    assert rules.plan_crawl(make(), T0) == rules.CrawlPlan(INCREMENTAL, resume=False)
    plain = make(source={"type": "http", "url": "http://127.0.0.1:9/items"})
    assert rules.plan_crawl(plain, T0) == rules.CrawlPlan(FULL, resume=False)
    due = make(full_crawl_schedule="0 * * * *", next_full_crawl_at=T0)
    assert rules.plan_crawl(due, T0).steer == FULL
    assert rules.plan_crawl(make(resume_cursor="p2"), T0) == rules.CrawlPlan(
        INCREMENTAL, resume=True
    )
    # A crawl begun before modes were recorded: full or not as its crawl was stamped.
    legacy = make(resume_cursor="p2", crawl_id="k1", crawl_full=True)
    assert rules.plan_crawl(legacy, T0) == rules.CrawlPlan(FULL, resume=True)


def test_a_crawl_keeps_its_mode_until_it_completes() -> None:
    for steer in (FULL, WINDOW, INCREMENTAL):
        begun = begin_crawl(
            asked(make(), steer), rules.CrawlPlan(steer, False), resuming=False, now=T0
        )
        held = replace(begun, resume_cursor="p2")
        assert rules.plan_crawl(held, T1) == rules.CrawlPlan(steer, resume=True)
        # No cursor held (it failed on its last page): it starts over in its mode.
        assert rules.plan_crawl(begun, T1) == rules.CrawlPlan(steer, resume=False)
        # Asking for its own mode again resumes it.
        again = asked(held, steer)
        assert rules.plan_crawl(again, T1) == rules.CrawlPlan(steer, resume=True)


def test_a_mode_asked_for_drops_a_crawl_of_another_mode() -> None:
    begun = begin_crawl(make(), rules.CrawlPlan(INCREMENTAL, False), resuming=False, now=T0)
    held = replace(begun, resume_cursor="p2")
    plan = rules.plan_crawl(asked(held, FULL), T1)
    assert (plan.steer, plan.resume) == (FULL, False)
    assert plan.note == "full crawl asked: the incremental crawl in progress was dropped"
    other = Steer(CrawlMode.BACKFILL, CrawlWindow("a", "z"))
    windowed = replace(
        begin_crawl(make(), rules.CrawlPlan(WINDOW, False), resuming=False, now=T0),
        resume_cursor="p2",
    )
    assert rules.plan_crawl(asked(windowed, other), T1).resume is False
    assert rules.plan_crawl(asked(windowed, INCREMENTAL), T1).steer == INCREMENTAL


def test_begin_crawl_takes_up_the_request_and_keeps_a_resumed_crawls_start() -> None:
    c = asked(make(), FULL)
    begun = begin_crawl(c, rules.CrawlPlan(FULL, False), resuming=False, now=T0)
    assert begun.source_state == {
        "completed": {"high_water": 50},
        "crawl_mode": {"mode": "full"},
        "crawl_started_at": "2026-01-01T12:00:00Z",
    }
    # Each page commit carries them with the source's checkpoint.
    assert rules.page_state(begun, {"high_water": 70}) == {
        **begun.source_state,
        "crawl": {"high_water": 70},
    }
    resumed = begin_crawl(begun, rules.CrawlPlan(FULL, True), resuming=True, now=T1)
    assert resumed.source_state["crawl_started_at"] == "2026-01-01T12:00:00Z"


def test_a_full_crawl_of_an_incremental_source_ignores_the_mark_and_prunes() -> None:
    c = make()
    assert rules.start_state(c, resuming=False, full=True) == {}
    crawl = rules.crawl_of_run(c, resuming=False, now=T0, new_crawl_id="k", mode=CrawlMode.FULL)
    assert crawl == Crawl("k", True)
    capped = make(source={**INC, "max_pages": 3})
    assert rules.crawl_of_run(
        capped, resuming=False, now=T0, new_crawl_id="k", mode=CrawlMode.FULL
    ) == Crawl("k", False)
    for mode in (CrawlMode.INCREMENTAL, CrawlMode.BACKFILL):
        assert rules.crawl_of_run(c, resuming=False, now=T0, new_crawl_id="k", mode=mode) == Crawl(
            "k", False
        )


# --- completion -----------------------------------------------------------------------------


def completing(steer: Steer, high_water: Any) -> Connector:
    """A crawl of ``steer`` whose pages saw ``high_water``, about to complete."""
    begun = begin_crawl(make(), rules.CrawlPlan(steer, False), resuming=False, now=T0)
    state = rules.page_state(begun, {"high_water": high_water})
    return replace(begun, source_state=state, crawl_id="k9")


def test_a_completed_crawl_sets_the_mark_and_says_who_did() -> None:
    state = complete_crawl(
        completing(INCREMENTAL, 80), crawl=Crawl("k9", False), run_id="r9", now=T1
    )
    assert state == {
        "completed": {"high_water": 80},
        "mark_set": {"by": "crawl", "crawl_id": "k9", "run_id": "r9", "at": "2026-01-01T13:00:00Z"},
    }
    # Nothing newer: the mark stays, and so does who set it.
    user = {"by": "user", "at": "2026-01-01T11:00:00Z"}
    c = completing(INCREMENTAL, 50)
    c = replace(c, source_state={**c.source_state, "mark_set": user})
    assert complete_crawl(c, crawl=Crawl("k9", False), run_id="r9", now=T1)["mark_set"] == user
    # A full crawl sets it from its own crawl, and is recorded.
    c = replace(
        completing(FULL, 50), source_state={**completing(FULL, 50).source_state, "mark_set": user}
    )
    state = complete_crawl(c, crawl=Crawl("k9", True), run_id="r9", now=T1)
    assert state["mark_set"]["by"] == "crawl"
    assert state["last_full_crawl_at"] == "2026-01-01T13:00:00Z"


def test_a_backfill_never_moves_the_mark() -> None:
    state = complete_crawl(completing(WINDOW, 99), crawl=Crawl("k9", False), run_id="r9", now=T1)
    assert state == {"completed": {"high_water": 50}}


def test_a_crawl_of_a_source_without_incremental_keeps_no_mark_provenance() -> None:
    c = make(
        source={"type": "http", "url": "http://127.0.0.1:9/items"}, source_state={"crawl": {"x": 1}}
    )
    state = complete_crawl(c, crawl=Crawl("k", True), run_id="r", now=T1)
    assert state == {"completed": {"x": 1}, "last_full_crawl_at": "2026-01-01T13:00:00Z"}


# --- triggers ---------------------------------------------------------------------------------


def test_a_trigger_records_the_mode_it_asks_for() -> None:
    started = rules.trigger(make(), run_id="r1", owner="i", now=T0, steer=WINDOW).connector
    assert started.source_state["request"] == {"mode": "backfill", "since": "a", "until": "m"}
    assert rules.plan_crawl(started, T0).steer == WINDOW
    plain = rules.trigger(make(), run_id="r1", owner="i", now=T0).connector
    assert "request" not in plain.source_state


def test_dropping_a_queued_trigger_drops_its_mode_only() -> None:
    queued = rules.enqueue(make(), now=T0, steer=FULL).connector
    assert queued.source_state["request"] == {"mode": "full", "queued_at": "2026-01-01T12:00:00Z"}
    dropped = rules.drop_queued(queued, now=T1).connector
    assert "request" not in dropped.source_state and dropped.sync_status is SyncStatus.IDLE
    # A mode asked by an earlier trigger (whose run failed before its first page) stays.
    earlier = asked(make(), FULL)
    queued = rules.enqueue(earlier, now=T0).connector
    assert rules.drop_queued(queued, now=T1).connector.source_state["request"] == {"mode": "full"}
    assert drop_request(earlier) is earlier
    # A pause drops the queued trigger, and its mode.
    paused = rules.patch(
        rules.enqueue(make(), now=T0, steer=FULL).connector, {"status": "paused"}, now=T1
    )
    assert "request" not in paused.connector.source_state


def test_a_state_of_before_is_read_as_both_marks() -> None:
    flat = make(source_state={"since": 1, "high_water": 9})
    started = rules.trigger(flat, run_id="r1", owner="i", now=T0, steer=FULL).connector
    assert started.source_state == {
        "completed": {"since": 1, "high_water": 9},
        "crawl": {"since": 1, "high_water": 9},
        "request": {"mode": "full"},
    }
    assert rules.crawl_state(flat, T0).mark == 9


# --- the mark set and reset ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"status": ConnectorStatus.DELETING}, "Connector is being deleted"),
        ({"sync_status": SyncStatus.RUNNING, "run_id": "r0"}, "Sync already in progress"),
    ],
)
def test_the_state_cannot_change_while_running_or_deleting(
    fields: dict[str, Any], message: str
) -> None:
    for change in (lambda c: rules.set_mark(c, 5, now=T0), lambda c: rules.reset_mark(c, now=T0)):
        with pytest.raises(Conflict) as refused:
            change(make(**fields))
        assert str(refused.value) == message


def test_setting_the_mark_drops_the_crawl_in_progress() -> None:
    begun = begin_crawl(make(), rules.CrawlPlan(FULL, False), resuming=False, now=T0)
    held = replace(
        begun,
        source_state=rules.page_state(begun, {"high_water": 70}),
        resume_cursor="p2",
        status=ConnectorStatus.PAUSED,
    )
    after = rules.set_mark(held, "2024-01-01", now=T1).connector
    assert after.resume_cursor is None and after.status is ConnectorStatus.PAUSED
    assert after.source_state == {
        "completed": {"high_water": "2024-01-01"},
        "mark_set": {"by": "user", "at": "2026-01-01T13:00:00Z"},
        "reset": "mark set",
    }
    assert rules.plan_crawl(after, T1) == rules.CrawlPlan(INCREMENTAL, resume=False)
    assert rules.start_state(after, resuming=False) == {"high_water": "2024-01-01"}


def test_resetting_the_mark_makes_the_next_crawl_full() -> None:
    c = make(
        resume_cursor="p2",
        source_state={
            "completed": {"high_water": 50},
            "crawl": {"high_water": 60},
            "mark_set": {"by": "user"},
            "last_full_crawl_at": "x",
        },
    )
    after = rules.reset_mark(c, now=T1).connector
    assert after.source_state == {
        "completed": {},
        "last_full_crawl_at": "x",
        "crawl_mode": {"mode": "full"},
        "reset": "mark reset",
    }
    assert rules.plan_crawl(after, T1) == rules.CrawlPlan(FULL, resume=False)
    shown = rules.crawl_state(after, T1)
    assert (shown.mark, shown.mark_set_by, shown.crawl) == (None, None, None)


def test_patching_the_source_keeps_a_full_crawl_asked_for_and_drops_a_window() -> None:
    source = {**INC, "url": "http://127.0.0.1:9/other"}
    for steer, kept in ((FULL, True), (WINDOW, False)):
        c = asked(
            make(source_state={"completed": {"high_water": 5}, "mark_set": {"by": "user"}}), steer
        )
        after = rules.patch(c, {"source": source}, now=T1).connector
        assert after.source_state["mark_set"] == {"by": "user"}
        assert ("request" in after.source_state) is kept


# --- the state shown ---------------------------------------------------------------------


def test_the_state_shows_the_crawl_in_progress() -> None:
    begun = begin_crawl(
        asked(make(), WINDOW), rules.CrawlPlan(WINDOW, False), resuming=False, now=T0
    )
    held = replace(begun, resume_cursor="p2", crawl_id="k3")
    shown = rules.crawl_state(held, T1)
    assert shown.crawl == rules.CrawlInProgress(
        "k3", CrawlMode.BACKFILL, CrawlWindow("a", "m"), T0, True
    )
    assert (shown.mark, shown.next_crawl.steer, shown.next_crawl.resume) == (50, WINDOW, True)
    assert rules.crawl_state(make(), T1).crawl is None


# --- the bodies ------------------------------------------------------------------------------

BODIES: list[Any] = [
    {},
    {"mode": None},
    {"mode": "full"},
    {"mode": "incremental", "since": None, "until": None},
    {"mode": "backfill", "since": "2024-01-01"},
    {"mode": "backfill", "since": 1, "until": 2.5},
    {"mode": "backfill", "since": 1, "until": None},
    {"mode": "backfill"},
    {"mode": "backfill", "since": None},
    {"mode": "full", "since": 1},
    {"until": "x"},
    {"mode": "sideways"},
    {"mode": "backfill", "since": ""},
    {"mode": "backfill", "since": "x" * 1001},
    {"mode": "backfill", "since": True},
    {"mode": "backfill", "since": 2**63},
    {"mode": "backfill", "since": -(2**63)},
    {"mode": "backfill", "since": 1e19},
    {"mode": "backfill", "since": [1]},
    {"mode": "full", "other": 1},
]


@pytest.mark.parametrize("body", BODIES)
def test_the_sync_request_schema_is_exactly_as_strict_as_its_parser(body: Any) -> None:
    try:
        parse_sync_request(body)
    except ValidationError:
        accepted = False
    else:
        accepted = True
    valid = jsonschema.Draft202012Validator(SyncRequest.model_json_schema()).is_valid(body)
    assert accepted == valid


# --- the CLI's values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1700000000", 1700000000),
        ("-5", -5),
        ("12.5", 12.5),
        ('"42"', "42"),
        ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z"),
        ("0x10", "0x10"),
        ("01", "01"),
        ("true", "true"),
    ],
)
def test_a_value_on_the_command_line(text: str, value: Any) -> None:
    assert mark_value(text) == value and type(mark_value(text)) is type(value)


def test_a_backfill_window_on_the_command_line() -> None:
    parse = build_parser().parse_args
    assert parse(["sync", "c", "--backfill", "1..2"]).backfill == (1, 2)
    assert parse(["sync", "c", "--backfill", "2024-01-01T00:00:00.5Z"]).backfill == (
        "2024-01-01T00:00:00.5Z",
        None,
    )
    assert parse(["sync", "c", "--backfill", "1.5..2.5"]).backfill == (1.5, 2.5)
    for bad in ("..2", "1..", ""):
        with pytest.raises(SystemExit):
            parse(["sync", "c", "--backfill", bad])
    with pytest.raises(argparse.ArgumentTypeError):
        mark_value("")
