"""Steering a crawl (DESIGN.md §12): the mode a trigger asks for (``incremental``, ``full``,
or a ``backfill`` of a window), which crawl a run starts or resumes, what a completed crawl
leaves behind, and the crawl state that ``GET /connectors/{id}/state`` shows and ``PUT`` /
``DELETE`` change.

It is kept in ``Connector.source_state``, beside the source's own marks
(:mod:`syncd.rules.crawls`), so that every instance reads it and each page commit carries it:

- ``request``: the mode a trigger asked for, until the first page commit of a run takes it
  up (with ``queued_at`` when a queued trigger asked: dropping that trigger drops it);
- ``crawl_mode``: the mode (and window) of the crawl in progress, written with each of its
  pages, or of the next fresh crawl (``full`` after a reset); gone once a crawl completes;
- ``crawl_started_at``: when the crawl in progress started (its first page's run);
- ``mark_set``: who set the completed mark and when (a crawl, with its id and run; the user);
- ``last_full_crawl_at``: when a full crawl last completed.

A crawl keeps its mode: a run with no mode asked resumes (or, its cursor rejected, starts
over) the crawl in progress as it began. A mode asked explicitly resumes the crawl in
progress only if it is the same (a backfill: the same window); otherwise the crawl in
progress is dropped and one of the asked mode starts afresh. With nothing held, a run
crawls as before steering existed: incremental, full when the source is not incremental or
its ``full_crawl_schedule`` fired.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from syncd.errors import Conflict
from syncd.models import (
    Connector,
    ConnectorStatus,
    Crawl,
    CrawlMode,
    CrawlWindow,
    SyncStatus,
    Transition,
)
from syncd.rules.crawls import (
    STATE_COMPLETED,
    STATE_CRAWL,
    STATE_RESET,
    crawl_states,
    full_crawl_due,
    is_incremental,
    promote_crawl,
)
from syncd.rules.marks import MARK
from syncd.rules.state import MSG_DELETING, MSG_RUNNING

__all__ = [
    "MARK_KEY",
    "CrawlInProgress",
    "CrawlPlan",
    "CrawlState",
    "MarkReader",
    "Steer",
    "begin_crawl",
    "complete_crawl",
    "crawl_state",
    "drop_request",
    "kept_on_source_change",
    "plain_mark",
    "plan_crawl",
    "reset_mark",
    "set_mark",
    "with_request",
]

STATE_REQUEST = "request"
STATE_MODE = "crawl_mode"
STATE_STARTED = "crawl_started_at"
STATE_MARK_SET = "mark_set"
STATE_LAST_FULL = "last_full_crawl_at"

MARK_KEY = MARK
"""The key of a source state that holds its mark (the ``http`` source's: the largest value of
the incremental field seen, sent by the next fresh crawl)."""

RESET_MARK_SET = "mark set"
RESET_MARK_RESET = "mark reset"

MarkReader = Callable[[Any], Any]
"""``read(value)``: a mark (or a window bound) as a key that orders marks, ``ValueError``
(saying why) when the connector's format cannot read it."""


@dataclass(frozen=True)
class Steer:
    """A crawl's mode, and its window for a backfill."""

    mode: CrawlMode
    window: CrawlWindow | None = None

    def to_json(self) -> dict[str, Any]:
        """The steer as ``source_state`` keeps it (and the API shows it)."""
        out: dict[str, Any] = {"mode": self.mode.value}
        if self.window is not None:
            out["since"] = self.window.since
            out["until"] = self.window.until
        return out

    @classmethod
    def from_json(cls, value: Any) -> Steer | None:
        """A steer kept by :meth:`to_json` (``None`` for anything else)."""
        if not isinstance(value, Mapping):
            return None
        try:
            mode = CrawlMode(str(value.get("mode")))
        except ValueError:
            return None
        if mode is CrawlMode.BACKFILL:
            return cls(mode, CrawlWindow(value.get("since"), value.get("until")))
        return cls(mode)


@dataclass(frozen=True)
class CrawlPlan:
    """What a run crawls: in which mode, and whether it resumes the crawl in progress (its
    resume cursor) or starts a new one. ``note`` says why a crawl in progress was dropped."""

    steer: Steer
    resume: bool
    note: str | None = None

    @property
    def ignores_mark(self) -> bool:
        """Whether a fresh crawl of this plan starts without the completed mark."""
        return self.steer.mode is not CrawlMode.INCREMENTAL


# --- what a trigger asks, what a run crawls ----------------------------------------------


def with_request(c: Connector, steer: Steer | None, *, queued_at: datetime | None) -> Connector:
    """``c`` with the mode a trigger asked for recorded (``steer``; ``None``: no mode asked,
    nothing recorded). ``queued_at``: the trigger is queued at that time (see
    :func:`drop_request`)."""
    if steer is None:
        return c
    request = steer.to_json()
    if queued_at is not None:
        request["queued_at"] = _text(queued_at)
    return replace(c, source_state={**_tracked(c), STATE_REQUEST: request})


def drop_request(c: Connector) -> Connector:
    """``c`` without the mode its queued trigger asked for (the trigger is dropped); a mode
    asked by an earlier trigger stays."""
    request = c.source_state.get(STATE_REQUEST)
    queued = c.sync_queued_at
    if not isinstance(request, Mapping) or queued is None:
        return c
    if request.get("queued_at") != _text(queued):
        return c
    state = _tracked(c)
    del state[STATE_REQUEST]
    return replace(c, source_state=state)


def plan_crawl(c: Connector, now: datetime) -> CrawlPlan:
    """The crawl a run of ``c`` starting at ``now`` makes (see the module's rules)."""
    request = Steer.from_json(c.source_state.get(STATE_REQUEST))
    held = _held(c)
    resumable = c.resume_cursor is not None
    if request is not None:
        if request == held:
            return CrawlPlan(request, resume=resumable)
        note = None
        if held is not None and resumable:
            note = (
                f"{request.mode.value} crawl asked: the {held.mode.value} crawl in progress "
                "was dropped"
            )
        return CrawlPlan(request, resume=False, note=note)
    if held is not None:
        return CrawlPlan(held, resume=resumable)
    return CrawlPlan(_default(c, now), resume=resumable)


def begin_crawl(c: Connector, plan: CrawlPlan, *, resuming: bool, now: datetime) -> Connector:
    """``c`` as the run's page commits carry its state: the asked mode taken up, the crawl's
    mode recorded, and its start (``now`` for a fresh crawl; a resumed one keeps its own)."""
    state = _tracked(c)
    state.pop(STATE_REQUEST, None)
    state[STATE_MODE] = plan.steer.to_json()
    if not resuming:
        state[STATE_STARTED] = _text(now)
    return replace(c, source_state=state)


def complete_crawl(
    c: Connector, *, crawl: Crawl | None, run_id: str, now: datetime
) -> dict[str, Any]:
    """``source_state`` once the crawl in progress completed: its mark becomes the completed
    one (a backfill's never does), with the crawl that set it when it changed or the crawl
    was full; a full crawl's end is recorded; the crawl's mode and start are forgotten."""
    completed, _ = crawl_states(c)
    state = _tracked(c)
    steer = Steer.from_json(state.get(STATE_MODE)) or _legacy(c, crawl)
    for key in (STATE_MODE, STATE_STARTED, STATE_REQUEST, STATE_RESET, STATE_CRAWL):
        state.pop(key, None)
    if steer.mode is CrawlMode.BACKFILL:
        state[STATE_COMPLETED] = completed
    else:
        promoted = promote_crawl(c)[STATE_COMPLETED]
        state[STATE_COMPLETED] = promoted
        # An incremental crawl that found nothing newer leaves the mark, and who set it; a
        # full crawl sets it from its own crawl.
        changed = promoted.get(MARK_KEY) != completed.get(MARK_KEY)
        if is_incremental(c.source) and (changed or steer.mode is CrawlMode.FULL):
            crawl_id = crawl.id if crawl is not None else c.crawl_id
            state[STATE_MARK_SET] = {
                "by": "crawl",
                "crawl_id": crawl_id,
                "run_id": run_id,
                "at": _text(now),
            }
    if steer.mode is CrawlMode.FULL:
        state[STATE_LAST_FULL] = _text(now)
    return state


def kept_on_source_change(c: Connector) -> dict[str, Any]:
    """The steering keys a ``PATCH`` of the source keeps (the crawl in progress is dropped):
    who set the mark and the last full crawl; a full crawl asked for or held (it reads the
    new source as well); an incremental crawl asked for. A backfill's window, written in the
    old source's values, is dropped."""
    state = _tracked(c)
    kept = {k: state[k] for k in (STATE_MARK_SET, STATE_LAST_FULL) if k in state}
    request = Steer.from_json(state.get(STATE_REQUEST))
    if request is not None and request.mode is not CrawlMode.BACKFILL:
        kept[STATE_REQUEST] = state[STATE_REQUEST]
    held = Steer.from_json(state.get(STATE_MODE))
    if held is not None and held.mode is CrawlMode.FULL:
        kept[STATE_MODE] = held.to_json()
    return kept


# --- the state as the API shows and changes it -------------------------------------------


@dataclass(frozen=True)
class CrawlInProgress:
    """A crawl begun and not completed: its id (``None`` for one begun before crawls were
    stamped), mode, window, start (``None`` if unknown) and whether a resume cursor is held."""

    id: str | None
    mode: CrawlMode
    window: CrawlWindow | None
    started_at: datetime | None
    resume_cursor_held: bool


@dataclass(frozen=True)
class CrawlState:
    """The crawl state of a connector (``GET /connectors/{id}/state``)."""

    incremental: bool
    mark: Any
    mark_set_at: datetime | None
    mark_set_by: str | None
    mark_crawl_id: str | None
    mark_run_id: str | None
    crawl: CrawlInProgress | None
    next_crawl: CrawlPlan
    last_full_crawl_at: datetime | None
    # Live documents the last complete full crawl missed that wait for confirmation.
    awaiting_confirmation: int = 0


def crawl_state(c: Connector, now: datetime) -> CrawlState:
    """What ``GET /connectors/{id}/state`` shows of ``c`` at ``now``."""
    completed, _ = crawl_states(c)
    meta = c.source_state
    mark_set = meta.get(STATE_MARK_SET)
    mark_set = mark_set if isinstance(mark_set, Mapping) else {}
    crawl: CrawlInProgress | None = None
    if STATE_STARTED in meta or c.resume_cursor is not None:
        steer = Steer.from_json(meta.get(STATE_MODE)) or _legacy(c, None)
        crawl = CrawlInProgress(
            id=c.crawl_id,
            mode=steer.mode,
            window=steer.window,
            started_at=_time(meta.get(STATE_STARTED)),
            resume_cursor_held=c.resume_cursor is not None,
        )
    incremental = is_incremental(c.source)
    return CrawlState(
        incremental=incremental,
        mark=completed.get(MARK_KEY) if incremental else None,
        mark_set_at=_time(mark_set.get("at")),
        mark_set_by=_str(mark_set.get("by")),
        mark_crawl_id=_str(mark_set.get("crawl_id")),
        mark_run_id=_str(mark_set.get("run_id")),
        crawl=crawl,
        next_crawl=plan_crawl(c, now),
        last_full_crawl_at=_time(meta.get(STATE_LAST_FULL)),
        awaiting_confirmation=c.awaiting_confirmation,
    )


def check_state_change(c: Connector) -> None:
    """The conflict that forbids changing the crawl state now, if any: a sync runs, or the
    connector is being deleted. (A paused or queued connector's state may change.)"""
    if c.status is ConnectorStatus.DELETING:
        raise Conflict(MSG_DELETING)
    if c.sync_status is SyncStatus.RUNNING:
        raise Conflict(MSG_RUNNING, run_id=c.run_id)


def set_mark(c: Connector, mark: Any, *, now: datetime) -> Transition:
    """``PUT /connectors/{id}/state``: the completed mark becomes ``mark`` (set by the user).
    A crawl in progress is dropped (its resume cursor and its own mark): the next crawl is a
    fresh incremental one from ``mark`` (unless a trigger asked for another mode)."""
    check_state_change(c)
    completed, _ = crawl_states(c)
    state = _tracked(c)
    for key in (STATE_MODE, STATE_STARTED, STATE_CRAWL):
        state.pop(key, None)
    state[STATE_COMPLETED] = {**completed, MARK_KEY: mark}
    state[STATE_MARK_SET] = {"by": "user", "at": _text(now)}
    state[STATE_RESET] = RESET_MARK_SET
    return Transition(replace(c, source_state=state, resume_cursor=None, updated_at=now))


def reset_mark(c: Connector, *, now: datetime) -> Transition:
    """``DELETE /connectors/{id}/state``: no mark, no crawl in progress; the next crawl is a
    full one (it prunes, and sets the mark) unless a trigger asks for another mode."""
    check_state_change(c)
    state = _tracked(c)
    for key in (STATE_MODE, STATE_STARTED, STATE_CRAWL, STATE_MARK_SET):
        state.pop(key, None)
    state[STATE_COMPLETED] = {}
    state[STATE_MODE] = Steer(CrawlMode.FULL).to_json()
    state[STATE_RESET] = RESET_MARK_RESET
    return Transition(replace(c, source_state=state, resume_cursor=None, updated_at=now))


def plain_mark(value: Any) -> Any:
    """The order of marks of a source kind that does not read them itself: numbers by value,
    text as text (``ValueError`` for anything else)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("Must be a string or a number")
    return (0, value) if isinstance(value, int | float) else (1, value)


# --- helpers -----------------------------------------------------------------------------


def _tracked(c: Connector) -> dict[str, Any]:
    """A copy of ``c``'s source state in the tracked form (``completed`` / ``crawl`` beside the
    steering keys), whatever form it was stored in."""
    s = c.source_state
    if STATE_COMPLETED in s or STATE_CRAWL in s or STATE_RESET in s:
        return dict(s)
    completed, in_progress = crawl_states(c)  # a flat state of before: both
    return {STATE_COMPLETED: completed, STATE_CRAWL: in_progress}


def _held(c: Connector) -> Steer | None:
    """The mode of the crawl in progress (or of the next fresh crawl, after a reset)."""
    steer = Steer.from_json(c.source_state.get(STATE_MODE))
    if steer is not None:
        return steer
    if c.resume_cursor is not None:
        return _legacy(c, None)
    return None


def _legacy(c: Connector, crawl: Crawl | None) -> Steer:
    """The mode of a crawl that began before modes were recorded."""
    full = crawl.full if crawl is not None else c.crawl_full
    if full or not is_incremental(c.source):
        return Steer(CrawlMode.FULL)
    return Steer(CrawlMode.INCREMENTAL)


def _default(c: Connector, now: datetime) -> Steer:
    """A fresh crawl's mode when no mode is held or asked: full for a source that is not
    incremental or whose full-crawl schedule fired, else incremental."""
    if not is_incremental(c.source) or full_crawl_due(c, now):
        return Steer(CrawlMode.FULL)
    return Steer(CrawlMode.INCREMENTAL)


def _text(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
