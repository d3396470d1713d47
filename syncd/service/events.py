"""Live changes of connectors and runs, for the ``GET /events`` stream (Server-Sent Events).

The contract (the events and their ids, the snapshot or replay on connect, resuming with
``Last-Event-ID``, heartbeats, when a stream ends) is written in ``docs/api.md``, "The event
stream", with the values of the constants below. :class:`EventHub` coalesces this instance's
changes (:class:`syncd.runtime.changes.ChangeFeed`), keeps the ring of recent events, sends
snapshots, and exchanges change notices with the other instances through the queue's
control channel; it reads the store only while someone is subscribed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from syncd.errors import SyncdError
from syncd.models import Connector, DocStatus, Run
from syncd.queue.base import WorkQueue
from syncd.runtime.changes import Change, ChangeFeed
from syncd.store.base import Store

log = structlog.get_logger("syncd.service.events")

EVENT_CONNECTOR = "connector"
EVENT_RUN = "run"
EVENT_DELETED = "deleted"
EVENT_RESET = "reset"

#: Control message announcing changed connectors to the other instances.
MSG_CHANGED = "changed"

# The figures docs/api.md states (tests/unit/test_docs.py holds the two together):
#: At most one ``connector`` event per connector per this many seconds.
COALESCE_SECONDS = 0.2
#: Recent events kept, from which a ``Last-Event-ID`` resumes.
RING_SIZE = 1000
#: Connectors in the snapshot a stream opens with.
SNAPSHOT_LIMIT = 1000
#: Connector ids a ``connector_id`` filter may name.
MAX_FILTER_IDS = 100
#: Events waiting for a slow client before its stream ends.
SUBSCRIBER_BUFFER = 10_000
#: Seconds the store is still read after the last subscriber left (so one can resume).
LINGER_SECONDS = 300.0
#: Connector ids per control message (a sync of many connectors at once sends several).
MESSAGE_BATCH = 200
PUBLISH_TIMEOUT = 1.0
RETRY_SECONDS = 1.0
_RUNS_REMEMBERED = 10_000
_STATES_REMEMBERED = 100_000

PING = b": ping\n\n"
#: The first bytes of every stream: how long a browser's EventSource waits to reconnect.
OPENING = b"retry: 1000\n\n"

RenderConnector = Callable[[Connector, Mapping[DocStatus, int]], dict[str, Any]]
RenderRun = Callable[[Run], dict[str, Any]]


@dataclass(frozen=True)
class Event:
    """One event of the stream; ``data`` is its JSON text."""

    id: str
    kind: str
    connector_id: str
    data: str

    def encode(self) -> bytes:
        """The event in the ``text/event-stream`` format."""
        return f"id: {self.id}\nevent: {self.kind}\ndata: {self.data}\n\n".encode()


@dataclass(eq=False)
class _Subscriber:
    """One open stream: the events waiting to be written to it."""

    ids: frozenset[str] | None
    pending: deque[Event] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False

    def wants(self, connector_id: str) -> bool:
        return self.ids is None or connector_id in self.ids

    def put(self, event: Event) -> None:
        self.pending.append(event)
        self.ready.set()

    def end(self) -> None:
        """End the stream now (what is still pending is dropped)."""
        self.ended = True
        self.ready.set()

    async def next(self, timeout: float) -> Event | None:
        """The next event; ``None`` after ``timeout`` seconds of nothing, or once ended."""
        if not self.pending and not self.ended:
            self.ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.ready.wait()
        if self.ended or not self.pending:
            return None
        return self.pending.popleft()


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class EventHub:
    """The events of this instance: coalescing, the ring of recent events, snapshots, and
    the exchange of change notices with the other instances."""

    def __init__(
        self,
        *,
        store: Store,
        queue: WorkQueue,
        changes: ChangeFeed,
        owner: str,
        render_connector: RenderConnector,
        render_run: RenderRun,
        heartbeat_seconds: float = 15.0,
        coalesce_seconds: float = COALESCE_SECONDS,
        ring_size: int = RING_SIZE,
        linger_seconds: float = LINGER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        overlay: Callable[[Connector], Connector] | None = None,
    ) -> None:
        self._store = store
        # What this instance knows of a connector that the store may not (an outage wait).
        self._overlay = overlay
        self._queue = queue
        self._owner = owner
        self._render_connector = render_connector
        self._render_run = render_run
        self.heartbeat_seconds = heartbeat_seconds
        self._coalesce = coalesce_seconds
        self._linger = linger_seconds
        self._clock = clock
        self._stop_listening = changes.listen(self._on_change)
        # connector id -> run ids that started or ended, for the next flush.
        self._dirty: dict[str, set[str]] = {}
        # The same, still to be announced to the other instances.
        self._outgoing: dict[str, set[str]] = {}
        self._wake = asyncio.Event()
        self._seq = 0
        self._ring: deque[tuple[int, Event]] = deque(maxlen=ring_size)
        # Every event after this sequence number is in the ring (ids at or after it resume).
        self._complete_after = 0
        self._subscribers: set[_Subscriber] = set()
        self._last_reader = -float("inf")
        # connector id -> hash of the last state sent (bounded: forgetting one costs at most
        # a repeated event).
        self._last_sent: OrderedDict[str, int] = OrderedDict()
        self._failing: set[str] = set()  # "publish", "read": logged once per outage
        self._runs_sent: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._deleted: OrderedDict[str, None] = OrderedDict()
        # Held while reading and sending: a snapshot then sees no event older than itself
        # arrive after it.
        self._lock = asyncio.Lock()
        self._closed = False

    # --- where changes come from ------------------------------------------------------

    def _on_change(self, change: Change) -> None:
        for target in (self._dirty, self._outgoing):
            runs = target.setdefault(change.connector_id, set())
            if change.run_id is not None:
                runs.add(change.run_id)
        self._wake.set()

    def _apply_message(self, message: Mapping[str, str]) -> None:
        if message.get("type") != MSG_CHANGED or message.get("origin") == self._owner:
            return
        try:
            items = json.loads(message.get("changes", "[]"))
            for cid, run_ids in items:
                runs = self._dirty.setdefault(str(cid), set())
                runs.update(str(r) for r in run_ids)
        except (ValueError, TypeError):
            log.warning("events.notice_malformed", origin=message.get("origin"))
            return
        self._wake.set()

    async def take_notices(self) -> None:
        """Run until the queue closes: take the change notices of the other instances."""
        async for message in self._queue.messages():
            self._apply_message(message)

    async def run(self) -> None:
        """Run until cancelled: every coalescing window, announce this instance's changes
        and send the events of every change heard of."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._flush()
            except SyncdError as exc:
                # The store is away: the changes stay due, and are read once it answers.
                self._trouble("read", exc)
                self._wake.set()
            else:
                self._recovered("read")
            # After the local events: a queue that does not answer delays only the others.
            await self._announce()
            await asyncio.sleep(RETRY_SECONDS if "read" in self._failing else self._coalesce)

    def _trouble(self, what: str, exc: BaseException) -> None:
        """Log a failure to ``what`` ("read", "publish") once per outage."""
        if what not in self._failing:
            self._failing.add(what)
            error = str(exc) or type(exc).__name__
            if what == "read":
                log.warning("events.read_failed", error=error)
            else:
                log.warning("events.publish_failed", error=error)

    def _recovered(self, what: str) -> None:
        if what in self._failing:
            self._failing.discard(what)
            log.info("events.recovered", what=what)

    async def _announce(self) -> None:
        outgoing, self._outgoing = self._outgoing, {}
        items = [[cid, sorted(runs)] for cid, runs in outgoing.items()]
        for start in range(0, len(items), MESSAGE_BATCH):
            message = {
                "type": MSG_CHANGED,
                "origin": self._owner,
                "changes": _dumps(items[start : start + MESSAGE_BATCH]),
            }
            try:
                await asyncio.wait_for(self._queue.publish(message), PUBLISH_TIMEOUT)
            except (SyncdError, TimeoutError) as exc:
                # Subscribers of other instances miss these changes until the next ones.
                self._trouble("publish", exc)
                return
        if outgoing:
            self._recovered("publish")

    def _reading(self) -> bool:
        """Whether events are worth reading: someone listens, or may soon resume."""
        return bool(self._subscribers) or self._clock() - self._last_reader < self._linger

    async def _flush(self) -> None:
        dirty, self._dirty = self._dirty, {}
        if not dirty:
            return
        if not self._reading():
            # Nobody to tell: skip the reads, and make every id given so far unknown (the
            # ring misses these changes).
            self._seq += 1
            self._complete_after = self._seq
            self._last_sent.clear()
            return
        async with self._lock:
            for position, (cid, runs) in enumerate(dirty.items()):
                try:
                    await self._read_and_send(cid, runs)
                except SyncdError:
                    for later_cid, later_runs in list(dirty.items())[position:]:
                        self._dirty.setdefault(later_cid, set()).update(later_runs)
                    raise

    async def _read_and_send(self, cid: str, runs: set[str]) -> None:
        for run_id in sorted(runs):
            run = await self._store.get_run(run_id)
            if run is None:
                continue
            key = (run_id, run.outcome.value)
            if key in self._runs_sent:
                continue
            self._runs_sent[key] = None
            if len(self._runs_sent) > _RUNS_REMEMBERED:
                self._runs_sent.popitem(last=False)
            self._send(EVENT_RUN, cid, _dumps(self._render_run(run)))
        found = await self._store.get_connector_with_counts(cid)
        if found is None:
            self._last_sent.pop(cid, None)
            if cid not in self._deleted:
                self._deleted[cid] = None
                if len(self._deleted) > _RUNS_REMEMBERED:
                    self._deleted.popitem(last=False)
                self._send(EVENT_DELETED, cid, _dumps({"id": cid}))
            return
        data = self._connector_data(*found)
        digest = hash(data)
        if self._last_sent.get(cid) != digest:
            self._last_sent[cid] = digest
            self._last_sent.move_to_end(cid)
            if len(self._last_sent) > _STATES_REMEMBERED:
                self._last_sent.popitem(last=False)
            self._send(EVENT_CONNECTOR, cid, data)

    def _connector_data(self, connector: Connector, counts: dict[DocStatus, int]) -> str:
        if self._overlay is not None:
            connector = self._overlay(connector)
        return _dumps(self._render_connector(connector, counts))

    def _send(self, kind: str, cid: str, data: str) -> None:
        self._seq += 1
        event = Event(self._id(self._seq), kind, cid, data)
        if len(self._ring) == self._ring.maxlen:
            self._complete_after = self._ring[0][0]
        self._ring.append((self._seq, event))
        for subscriber in list(self._subscribers):
            if not subscriber.wants(cid):
                continue
            if len(subscriber.pending) >= SUBSCRIBER_BUFFER:
                # Too slow a reader: its stream ends, it resumes from its last id.
                self._subscribers.discard(subscriber)
                subscriber.end()
            else:
                subscriber.put(event)

    def _id(self, seq: int) -> str:
        return f"{self._owner}:{seq}"

    # --- subscribers --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def subscribe(
        self, ids: Iterable[str] | None = None, last_event_id: str | None = None
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """``async with hub.subscribe(ids, last_event_id) as chunks``: the stream of one
        client, encoded — the snapshot (or the replay after ``last_event_id``), then live
        events and pings, until the hub closes. Store errors of the snapshot are raised here,
        before anything is written."""
        subscriber = _Subscriber(None if ids is None else frozenset(ids))
        try:
            async with self._lock:
                # Added under the lock: every live event it gets is newer than what follows.
                if self._closed:
                    subscriber.end()
                else:
                    self._subscribers.add(subscriber)
                first = self._replay(last_event_id, subscriber)
                if first is None and not subscriber.ended:
                    first = [] if last_event_id is None else [self._reset()]
                    first += await self._snapshot(subscriber.ids)
            yield self._chunks(subscriber, first or [])
        finally:
            self._subscribers.discard(subscriber)
            self._last_reader = self._clock()

    async def _chunks(self, subscriber: _Subscriber, first: list[Event]) -> AsyncIterator[bytes]:
        # Written at once, so the client has the response headers even when nothing else
        # comes yet (aiohttp sends them with the first body bytes).
        yield OPENING
        for event in first:
            if subscriber.ended:
                return
            yield event.encode()
        while True:
            live = await subscriber.next(self.heartbeat_seconds)
            if subscriber.ended:
                return
            yield PING if live is None else live.encode()

    def _replay(self, last_event_id: str | None, subscriber: _Subscriber) -> list[Event] | None:
        """The events after ``last_event_id`` for this subscriber, or ``None`` when that id
        is unknown here."""
        if last_event_id is None:
            return None
        owner, _, number = last_event_id.strip().rpartition(":")
        if owner != self._owner or not (number.isascii() and number.isdigit()):
            return None
        seq = int(number)
        if not self._complete_after <= seq <= self._seq:
            return None
        return [e for s, e in self._ring if s > seq and subscriber.wants(e.connector_id)]

    def _reset(self) -> Event:
        reason = "unknown or expired event id; reload"
        return Event(self._id(self._seq), EVENT_RESET, "", _dumps({"reason": reason}))

    async def _snapshot(self, ids: frozenset[str] | None) -> list[Event]:
        """The current state of the connectors (all, up to the limit, or those named)."""
        if ids is None:
            rows = await self._store.list_connectors_with_counts(limit=SNAPSHOT_LIMIT)
        else:
            found = [await self._store.get_connector_with_counts(cid) for cid in sorted(ids)]
            rows = [row for row in found if row is not None]
        now = self._id(self._seq)
        return [Event(now, EVENT_CONNECTOR, c.id, self._connector_data(c, n)) for c, n in rows]

    @property
    def subscribers(self) -> int:
        """Streams open now."""
        return len(self._subscribers)

    def close(self) -> None:
        """End every open stream now (and any opened later): a stop must not wait for
        them."""
        self._closed = True
        self._stop_listening()
        subscribers, self._subscribers = self._subscribers, set()
        for subscriber in subscribers:
            subscriber.end()
