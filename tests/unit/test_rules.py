"""The connector state contract (DESIGN.md §2, §3, §5) as pure rules."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from syncd import rules
from syncd.errors import Conflict, Fenced
from syncd.models import (
    Connector,
    ConnectorStatus,
    CrawlEnd,
    DocStatus,
    DocumentInput,
    RunOutcome,
    RunTrigger,
    SyncStatus,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def make(**fields: object) -> Connector:
    base = Connector(
        id="c1",
        name="tickets",
        source={"type": "http", "url": "http://127.0.0.1:9/items"},
        indexer={"type": "store"},
        created_at=T0,
        updated_at=T0,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def running(**fields: object) -> Connector:
    t = rules.trigger(make(**fields), run_id="r1", owner="i1", now=T0)
    return t.connector


# --- manual trigger: every row of the §3 table ------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"status": ConnectorStatus.DELETING}, "Connector is being deleted"),
        ({"status": ConnectorStatus.PAUSED}, "Connector is paused"),
        ({"sync_status": SyncStatus.RUNNING, "run_id": "r0"}, "Sync already in progress"),
    ],
)
def test_trigger_conflicts(fields: dict[str, object], message: str) -> None:
    with pytest.raises(Conflict) as info:
        rules.trigger(make(**fields), run_id="r1", owner="i1", now=T0)
    assert info.value.message == message


def test_trigger_conflict_running_carries_run_id() -> None:
    with pytest.raises(Conflict) as info:
        rules.trigger(running(), run_id="r2", owner="i1", now=T0)
    assert info.value.extra == {"run_id": "r1"}


def test_deleting_wins_over_paused_and_running_order() -> None:
    c = make(status=ConnectorStatus.PAUSED, sync_status=SyncStatus.RUNNING, run_id="r0")
    with pytest.raises(Conflict, match="Connector is paused"):
        rules.check_trigger(c)


@pytest.mark.parametrize("status", [ConnectorStatus.ACTIVE, ConnectorStatus.ERROR])
def test_trigger_claims(status: ConnectorStatus) -> None:
    t = rules.trigger(
        make(status=status, last_error="x" if status == "error" else None),
        run_id="r1",
        owner="i1",
        now=T0,
    )
    c = t.connector
    assert (c.sync_status, c.run_id, c.sync_started_at, c.sync_owner) == (
        SyncStatus.RUNNING,
        "r1",
        T0,
        "i1",
    )
    assert c.status is status  # a previous failure never blocks the next attempt
    assert t.start is not None and t.start.trigger is RunTrigger.MANUAL
    assert c.progress.pages == 0


# --- run endings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (ConnectorStatus.ACTIVE, ConnectorStatus.ACTIVE),
        (ConnectorStatus.ERROR, ConnectorStatus.ACTIVE),
        (ConnectorStatus.PAUSED, ConnectorStatus.PAUSED),
    ],
)
def test_success_transition(status: ConnectorStatus, expected: ConnectorStatus) -> None:
    c = replace(
        running(),
        status=status,
        last_error="boom" if status == "error" else None,
        resume_cursor="c7",
    )
    t = rules.succeed(c, run_id="r1", now=T0 + timedelta(minutes=1))
    assert t.connector.status is expected
    assert t.connector.last_error is None
    assert t.connector.sync_status is SyncStatus.IDLE and t.connector.run_id is None
    assert t.connector.last_synced_at == T0 + timedelta(minutes=1)
    assert t.connector.resume_cursor is None
    assert t.ends[0].outcome is RunOutcome.SUCCEEDED


def test_success_records_how_the_crawl_ended() -> None:
    end = CrawlEnd("no next cursor at 'cursor'", ("next cursor path 'cursor' was absent",))
    t = rules.succeed(running(), run_id="r1", now=T0, end=end)
    assert (t.ends[0].end_reason, t.ends[0].warnings) == (end.reason, end.warnings)
    # Without one, nothing is recorded.
    bare = rules.succeed(running(), run_id="r1", now=T0)
    assert (bare.ends[0].end_reason, bare.ends[0].warnings) == (None, ())


@pytest.mark.parametrize(
    "status", [ConnectorStatus.ACTIVE, ConnectorStatus.PAUSED, ConnectorStatus.ERROR]
)
def test_failure_transition(status: ConnectorStatus) -> None:
    c = replace(running(), status=status, resume_cursor="c3")
    t = rules.fail(c, run_id="r1", error="x" * 900, now=T0)
    assert t.connector.status is ConnectorStatus.ERROR
    assert t.connector.last_error == "x" * 500
    assert t.connector.sync_status is SyncStatus.IDLE
    assert t.connector.resume_cursor == "c3"  # the next run resumes from the checkpoint
    assert t.connector.last_synced_at is None
    assert t.ends[0].outcome is RunOutcome.FAILED and t.ends[0].error == "x" * 500


@pytest.mark.parametrize("status", [ConnectorStatus.ACTIVE, ConnectorStatus.ERROR])
def test_abort_changes_no_status(status: ConnectorStatus) -> None:
    c = replace(running(), status=status, last_error="e" if status == "error" else None)
    t = rules.abort(c, now=T0)
    assert t.connector.status is status
    assert t.connector.last_error == c.last_error
    assert t.connector.sync_status is SyncStatus.IDLE and t.connector.run_id is None
    assert t.connector.last_synced_at is None
    assert t.ends[0].id == "r1" and t.ends[0].outcome is RunOutcome.ABORTED


def test_abort_when_idle() -> None:
    with pytest.raises(Conflict, match="No sync in progress"):
        rules.abort(make(), now=T0)


def test_abort_orphan_without_run_id_goes_idle() -> None:
    t = rules.abort(make(sync_status=SyncStatus.RUNNING), now=T0)
    assert t.connector.sync_status is SyncStatus.IDLE and t.ends == ()


@pytest.mark.parametrize("end", ["succeed", "interrupt"])
def test_writes_of_an_old_run_are_fenced(end: str) -> None:
    aborted = rules.abort(running(), now=T0).connector
    again = rules.trigger(aborted, run_id="r2", owner="i1", now=T0).connector
    with pytest.raises(Fenced):
        getattr(rules, end)(again, run_id="r1", now=T0)
    with pytest.raises(Fenced):
        rules.fail(again, run_id="r1", error="late", now=T0)


def test_interrupt_keeps_status() -> None:
    c = replace(running(), status=ConnectorStatus.ERROR, last_error="e")
    t = rules.interrupt(c, run_id="r1", now=T0)
    assert t.connector.status is ConnectorStatus.ERROR and t.connector.last_error == "e"
    assert t.ends[0].outcome is RunOutcome.INTERRUPTED


# --- PATCH and DELETE ---------------------------------------------------------------------


def test_patch_rejected_while_deleting() -> None:
    with pytest.raises(Conflict, match="Connector is being deleted"):
        rules.patch(make(status=ConnectorStatus.DELETING), {"name": "x"}, now=T0)


def test_patch_status_clears_last_error() -> None:
    c = make(status=ConnectorStatus.ERROR, last_error="boom")
    t = rules.patch(c, {"status": ConnectorStatus.PAUSED}, now=T0)
    assert t.connector.status is ConnectorStatus.PAUSED and t.connector.last_error is None


def test_patch_during_run_keeps_run() -> None:
    t = rules.patch(running(), {"status": ConnectorStatus.PAUSED}, now=T0)
    assert t.connector.sync_status is SyncStatus.RUNNING and t.connector.run_id == "r1"


def test_patch_schedule_recomputes_next_run() -> None:
    t = rules.patch(make(), {"sync_schedule": "*/15 * * * *"}, now=T0)
    assert t.connector.next_run_at == T0 + timedelta(minutes=15)


def test_resume_recomputes_next_run_from_now() -> None:
    c = make(
        status=ConnectorStatus.PAUSED, sync_schedule="0 * * * *", next_run_at=T0 - timedelta(days=3)
    )
    t = rules.patch(c, {"status": ConnectorStatus.ACTIVE}, now=T0 + timedelta(minutes=5))
    assert t.connector.next_run_at == T0 + timedelta(hours=1)


def test_delete_rules() -> None:
    with pytest.raises(Conflict, match="Cannot delete connector while sync is running"):
        rules.begin_delete(running(), now=T0)
    t = rules.begin_delete(make(status=ConnectorStatus.ERROR, last_error="e"), now=T0)
    assert t.connector.status is ConnectorStatus.DELETING and t.connector.last_error is None
    again = rules.begin_delete(t.connector, now=T0)
    assert again.connector == t.connector


# --- scheduler ----------------------------------------------------------------------------

SCHEDULED = {"sync_schedule": "*/5 * * * *", "next_run_at": T0}


def test_scheduled_starts_and_advances_once() -> None:
    now = T0 + timedelta(hours=5, minutes=2)  # many ticks missed while down
    t = rules.scheduled(
        make(**SCHEDULED), run_id="r1", owner="i1", now=now, stale_before=now - timedelta(hours=1)
    )
    assert t.start is not None and t.start.trigger is RunTrigger.SCHEDULE
    assert t.connector.next_run_at == T0 + timedelta(hours=5, minutes=5)
    with pytest.raises(rules.NotDue):  # a second instance finds it advanced
        rules.scheduled(
            t.connector, run_id="r2", owner="i2", now=now, stale_before=now - timedelta(hours=1)
        )


@pytest.mark.parametrize("status", [ConnectorStatus.PAUSED, ConnectorStatus.DELETING])
def test_scheduled_skips_paused_and_deleting(status: ConnectorStatus) -> None:
    with pytest.raises(rules.NotDue):
        rules.scheduled(
            make(status=status, **SCHEDULED), run_id="r1", owner="i", now=T0, stale_before=T0
        )


def test_scheduled_runs_error_connectors() -> None:
    t = rules.scheduled(
        make(status=ConnectorStatus.ERROR, last_error="e", **SCHEDULED),
        run_id="r1",
        owner="i",
        now=T0,
        stale_before=T0 - timedelta(hours=1),
    )
    assert t.start is not None


def test_scheduled_skips_young_run_and_takes_over_stale_lock() -> None:
    c = replace(running(**SCHEDULED), sync_started_at=T0 - timedelta(minutes=10))
    young = rules.scheduled(
        c, run_id="r2", owner="i2", now=T0, stale_before=T0 - timedelta(hours=1)
    )
    assert young.start is None and young.connector.run_id == "r1"
    assert young.connector.next_run_at == T0 + timedelta(minutes=5)
    stale = rules.scheduled(
        c, run_id="r2", owner="i2", now=T0, stale_before=T0 - timedelta(minutes=5)
    )
    assert stale.start is not None and stale.start.trigger is RunTrigger.STALE_LOCK
    assert stale.connector.run_id == "r2" and stale.connector.sync_owner == "i2"
    assert [(e.id, e.outcome) for e in stale.ends] == [("r1", RunOutcome.INTERRUPTED)]


def test_running_without_start_time_is_stale() -> None:
    c = make(sync_status=SyncStatus.RUNNING, run_id="r0", **SCHEDULED)
    t = rules.scheduled(c, run_id="r2", owner="i", now=T0, stale_before=T0 - timedelta(hours=1))
    assert t.start is not None and t.start.trigger is RunTrigger.STALE_LOCK


# --- random sequences against the invariants -----------------------------------------------


class ConnectorMachine(RuleBasedStateMachine):
    """Drives random trigger / abort / pause / resume / delete / succeed / fail sequences."""

    def __init__(self) -> None:
        super().__init__()
        self.c = make()
        self.clock = T0
        self.n = 0
        self.stale_runs: list[str] = []

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    def apply(self, fn: object, **kw: object) -> None:
        with contextlib.suppress(Conflict, Fenced, rules.NotDue):
            self.c = fn(self.c, **kw).connector  # type: ignore[operator]

    @rule()
    def trigger(self) -> None:
        self.n += 1
        before = self.c
        try:
            self.c = rules.trigger(
                self.c, run_id=f"r{self.n}", owner="i", now=self.tick()
            ).connector
        except Conflict:
            assert before.sync_status is SyncStatus.RUNNING or before.status in (
                ConnectorStatus.PAUSED,
                ConnectorStatus.DELETING,
            )
            return
        assert before.sync_status is SyncStatus.IDLE
        if before.run_id:
            self.stale_runs.append(before.run_id)

    @rule()
    def abort(self) -> None:
        before = self.c
        if before.run_id:
            self.stale_runs.append(before.run_id)
        self.apply(rules.abort, now=self.tick())
        assert self.c.status is before.status  # abort never changes status
        assert self.c.last_synced_at == before.last_synced_at

    @rule(status=st.sampled_from([ConnectorStatus.PAUSED, ConnectorStatus.ACTIVE]))
    def patch_status(self, status: ConnectorStatus) -> None:
        self.apply(rules.patch, changes={"status": status}, now=self.tick())

    @rule()
    def delete(self) -> None:
        self.apply(rules.begin_delete, now=self.tick())

    @precondition(lambda self: self.c.run_id is not None)
    @rule()
    def succeed(self) -> None:
        before = self.c
        self.apply(rules.succeed, run_id=self.c.run_id, now=self.tick())
        if before.status is ConnectorStatus.PAUSED:
            assert self.c.status is ConnectorStatus.PAUSED

    @precondition(lambda self: self.c.run_id is not None)
    @rule(message=st.text(max_size=700))
    def fail(self, message: str) -> None:
        self.apply(rules.fail, run_id=self.c.run_id, error=message or "e", now=self.tick())

    @precondition(lambda self: bool(self.stale_runs))
    @rule(data=st.data())
    def late_write_of_old_run(self, data: st.DataObject) -> None:
        old = data.draw(st.sampled_from(self.stale_runs))
        before = self.c
        self.apply(rules.succeed, run_id=old, now=self.tick())
        self.apply(rules.fail, run_id=old, error="late", now=self.tick())
        assert self.c == before  # an old run can never touch the current state

    @invariant()
    def one_run_at_most(self) -> None:
        assert (self.c.sync_status is SyncStatus.RUNNING) == (self.c.run_id is not None)

    @invariant()
    def last_error_only_with_error(self) -> None:
        if self.c.status is not ConnectorStatus.ERROR:
            assert self.c.last_error is None
        if self.c.last_error is not None:
            assert len(self.c.last_error) <= 500

    @invariant()
    def deleting_never_runs(self) -> None:
        if self.c.status is ConnectorStatus.DELETING:
            assert self.c.sync_status is SyncStatus.IDLE


ConnectorMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None
)
TestConnectorMachine = ConnectorMachine.TestCase


# --- crawl state: marks of completed crawls and of the crawl in progress ---------------------


def test_a_fresh_crawl_starts_from_the_completed_mark_and_a_resumed_one_from_its_own() -> None:
    c = make(source_state={"completed": {"high_water": 50}, "crawl": {"high_water": 100}})
    assert rules.start_state(c, resuming=False) == {"high_water": 50}
    assert rules.start_state(c, resuming=True) == {"high_water": 100}
    assert rules.page_state(c, {"high_water": 120}) == {
        "completed": {"high_water": 50},
        "crawl": {"high_water": 120},
    }


def test_only_a_completed_crawl_promotes_its_mark() -> None:
    c = running(source_state={"completed": {"hw": 50}, "crawl": {"hw": 100}})
    # (A crawl of a source without `incremental` is a full one: its end is recorded.)
    assert rules.succeed(c, run_id="r1", now=T0).connector.source_state == {
        "completed": {"hw": 100},
        "last_full_crawl_at": "2026-01-01T12:00:00Z",
    }
    for ended in (
        rules.fail(c, run_id="r1", error="boom", now=T0),
        rules.interrupt(c, run_id="r1", now=T0),
        rules.abort(c, now=T0),
    ):
        assert ended.connector.source_state == c.source_state


def test_a_state_written_before_crawls_were_tracked_serves_as_both() -> None:
    c = make(source_state={"since": 1, "high_water": 9})
    assert rules.crawl_states(c) == ({"since": 1, "high_water": 9}, {"since": 1, "high_water": 9})


def test_patching_the_source_discards_the_resume_cursor_and_the_crawl_mark() -> None:
    c = make(
        resume_cursor="p3",
        source_state={"completed": {"hw": 50}, "crawl": {"hw": 100}},
    )
    changed = rules.patch(c, {"source": {"type": "http", "url": "http://x/y"}}, now=T0)
    assert changed.connector.resume_cursor is None
    assert changed.connector.source_state == {"completed": {"hw": 50}, "reset": "source changed"}
    assert rules.reset_reason(changed.connector) == "source changed"
    assert rules.start_state(changed.connector, resuming=False) == {"hw": 50}
    same = rules.patch(c, {"source": dict(c.source)}, now=T0)
    assert same.connector.resume_cursor == "p3"
    assert same.connector.source_state == c.source_state
    assert rules.reset_reason(same.connector) is None


# --- the enqueue rule: which crawled documents are written and enqueued --------------------


def _doc(external_id: str, content_hash: str) -> DocumentInput:
    return DocumentInput(external_id, {"id": external_id}, content_hash)


def test_new_changed_and_aborted_documents_are_written_others_are_left() -> None:
    def existing(h: str, status: DocStatus, error: str | None = None) -> rules.ExistingDocument:
        return rules.ExistingDocument(h, status, error)

    assert rules.must_write(None, "h1")
    assert rules.must_write(existing("h0", DocStatus.INDEXED), "h1")
    assert rules.must_write(existing("h1", DocStatus.FAILED, "Aborted"), "h1")
    for unchanged in (
        existing("h1", DocStatus.INDEXED),
        existing("h1", DocStatus.PENDING),
        existing("h1", DocStatus.RUNNING),
        existing("h1", DocStatus.FAILED, "HTTP 500"),
    ):
        assert not rules.must_write(unchanged, "h1")


def test_a_page_plan_keeps_page_order_and_the_last_duplicate() -> None:
    page = [_doc("a", "1"), _doc("b", "2"), _doc("a", "3"), _doc("c", "4")]
    stored = {"b": rules.ExistingDocument("2", DocStatus.INDEXED, None)}
    planned = rules.plan_page(page, stored)
    assert [(d.external_id, d.content_hash) for d in planned] == [("a", "3"), ("c", "4")]
