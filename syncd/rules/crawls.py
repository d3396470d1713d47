"""Crawls: the source's marks kept between runs (a completed crawl's and the one in
progress), and which crawl a run belongs to and whether it is full (DESIGN.md §11)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from syncd.models import Connector, Crawl, CrawlMode
from syncd.rules.marks import MARK, STARTED, capped_mark

# --- crawl state: the source's marks (e.g. an incremental high-water mark) -------------
#
# ``Connector.source_state`` holds two states of the source: ``completed``, as of the last
# crawl that completed, and ``crawl``, the checkpoint of the crawl in progress (saved with
# each committed page). A fresh crawl starts from ``completed``; a resumed one from ``crawl``;
# only a completed crawl promotes ``crawl`` to ``completed``. So a crawl that fails and then
# starts over (its resume cursor rejected) never uses its own partial mark, which would skip
# the records it had not reached. ``reset`` says why the next run starts over.

STATE_COMPLETED = "completed"
STATE_CRAWL = "crawl"
STATE_RESET = "reset"
RESET_SOURCE_CHANGED = "source changed"


def crawl_states(c: Connector) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """``(completed, in_progress)`` source states of the connector.

    A state written before crawls were tracked (a flat mapping) is taken as both.
    """
    s = c.source_state
    if STATE_COMPLETED in s or STATE_CRAWL in s or STATE_RESET in s:
        return dict(s.get(STATE_COMPLETED) or {}), dict(s.get(STATE_CRAWL) or {})
    return dict(s), dict(s)


def start_state(c: Connector, *, resuming: bool, full: bool = False) -> Mapping[str, Any]:
    """The state a run's source starts from: the crawl's own when resuming, else the last
    completed crawl's — or none for a fresh full crawl of an incremental source, which must
    not send its ``since`` (a source without ``incremental`` keeps its state: a plugin's state
    may be about something else)."""
    completed, in_progress = crawl_states(c)
    if resuming:
        return in_progress
    return {} if full and is_incremental(c.source) else completed


def page_state(c: Connector, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """``source_state`` to save with a committed page whose source checkpoint is
    ``checkpoint`` (``c`` is the connector as the run started). The keys of a crawl's
    steering (:mod:`syncd.rules.steering`) are carried as they are."""
    completed, _ = crawl_states(c)
    return {**_steering(c), STATE_COMPLETED: completed, STATE_CRAWL: dict(checkpoint)}


def _steering(c: Connector) -> dict[str, Any]:
    """The keys of ``c``'s source state beside the marks and the reset reason."""
    s = c.source_state
    if not (STATE_COMPLETED in s or STATE_CRAWL in s or STATE_RESET in s):
        return {}  # a flat state of before: the source's own
    return {k: v for k, v in s.items() if k not in (STATE_COMPLETED, STATE_CRAWL, STATE_RESET)}


def reset_reason(c: Connector) -> str | None:
    """Why the next run must start over instead of resuming (e.g. the source changed)."""
    reason = c.source_state.get(STATE_RESET)
    return reason if isinstance(reason, str) else None


def promote_crawl(c: Connector) -> dict[str, Any]:
    """``source_state`` once the crawl in progress completed: its mark becomes the completed
    one, no later than the crawl's start (:func:`settled_state`)."""
    _, in_progress = crawl_states(c)
    return {STATE_COMPLETED: settled_state(in_progress, c.source)}


def settled_state(state: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """The state a completed crawl of ``source`` leaves, from its last checkpoint ``state``:
    an incremental mark whose values are times is the earlier of the largest value seen and
    the crawl's start, written as the field's values are (DESIGN.md §12;
    :func:`~syncd.rules.marks.capped_mark`). A record edited while the crawl ran, on a page it
    had read, is then asked for again by the next crawl. Other marks, states without a start
    (a crawl begun before starts were kept) and plugin states are kept as they are."""
    settled = dict(state)
    inc = source.get("incremental")
    if not isinstance(inc, Mapping) or settled.get(MARK) is None or STARTED not in settled:
        return settled
    fmt = inc.get("format", "as_stored")
    settled[MARK] = capped_mark(settled[MARK], settled[STARTED], str(fmt))
    return settled


def is_incremental(source: Mapping[str, Any]) -> bool:
    """Whether a source config crawls incrementally (``incremental`` set). A source without
    it (a plugin too) is crawled in full: a plugin that crawls incrementally on its own must
    declare ``incremental`` or set ``prune: false``."""
    return isinstance(source.get("incremental"), Mapping)


def full_crawl_due(c: Connector, now: datetime) -> bool:
    """Whether a crawl starting fresh at ``now`` is a full crawl: always for a source that is
    not incremental; for an incremental one, once its ``full_crawl_schedule`` has fired and
    until a full crawl completes. Never for a source with ``max_pages``: a crawl it cut short
    looks complete, and what it did not reach must not be taken as gone."""
    if c.source.get("max_pages") is not None:
        return False
    if not is_incremental(c.source):
        return True
    return c.next_full_crawl_at is not None and c.next_full_crawl_at <= now


def crawl_of_run(
    c: Connector,
    *,
    resuming: bool,
    now: datetime,
    new_crawl_id: str,
    mode: CrawlMode | None = None,
) -> Crawl | None:
    """The crawl a run continues (``resuming``: the connector's current one) or starts (as
    ``new_crawl_id``). ``None`` for a resumed crawl begun before crawls were stamped: it
    cannot prune. A new crawl of ``mode`` (:mod:`syncd.rules.steering`) prunes when it is
    ``full`` and no ``max_pages`` can cut it short; without a mode, as
    :func:`full_crawl_due` says."""
    if resuming:
        return Crawl(c.crawl_id, c.crawl_full) if c.crawl_id is not None else None
    if mode is None:
        return Crawl(new_crawl_id, full_crawl_due(c, now))
    return Crawl(new_crawl_id, mode is CrawlMode.FULL and c.source.get("max_pages") is None)
