"""The Redis work queue (``redis://…``), shared by every syncd instance.

Layout, every key under ``{prefix}:``:

``q:{connector_id}``
    list of external ids waiting for a worker (FIFO per connector).
``ring``
    list of connectors that have entries, each once; ``pop`` takes from the head connector
    and rotates it to the back, which is the round-robin that keeps one huge connector from
    starving a small one.
``proc:{instance_id}``
    hash ``receipt -> {"c": connector_id, "t": parked_at_ms, "ids": [...]}``: batches popped by
    that instance and not yet acknowledged.
``instances``
    set of instances that may have parked batches (so reclaiming needs no ``SCAN``).
``alive:{instance_id}``
    liveness key, refreshed every ``heartbeat_seconds`` with a TTL of
    ``reclaim_after_seconds``. When it has expired, the instance's parked batches are pushed
    back to the front of their lists by whichever instance notices first.
``epoch``
    set when the queue opens and re-set (``SET NX``) on every heartbeat: finding it gone means
    the server lost its data (a restart without persistence), and ``wait_lost`` returns so
    the daemon re-pushes the store's pending documents.

Channels: ``{prefix}:control`` carries control messages (JSON objects of strings);
``{prefix}:wake`` is published when a connector's list goes from empty to non-empty.

Every operation that reads and writes several keys is one Lua script, so it is atomic and
costs one round trip: ``push`` sends a whole page at once; ``pop`` takes a batch, rotates the
ring and parks the batch in one step; ``purge`` drops a connector's list and ring entry.

Waiting: a ``pop`` that finds nothing waits on an in-process signal that the instance's
pub/sub reader fires on every ``wake`` message (and after it reconnects, since messages sent
during an outage are lost), so a push on any instance wakes the waiters of every instance
without polling. As a safety net the waiter also looks again every
``_FALLBACK_POLL_SECONDS``. One pub/sub connection per instance serves both channels,
instead of one blocked connection per waiting worker (as ``BLPOP`` would need).

Batches lost in flight (the ``pop`` reply never arrived, or the ``pop`` was cancelled after
the script ran) are parked under this instance without anyone holding them: the heartbeat
hands such orphans back once they are older than ``reclaim_after_seconds``.

Needs Redis ≥ 6.2 (``LPOP`` with a count, ``LPOS``, ``LMOVE``) and a standalone server
(the scripts derive key names from the connector ids, which Redis Cluster does not allow).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis.asyncio as aioredis
import structlog
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from syncd.errors import ConfigError, QueueError, QueueUnavailable
from syncd.observability.logs import MASK
from syncd.queue.base import Batch, Broadcast, QueueState, Signal, Subscription, wait_event
from syncd.runtime.tasks import cancel_and_wait

__all__ = ["RedisQueue"]

log = structlog.get_logger(__name__)

# A waiter looks at the queue again after this long even without a wake-up message.
_FALLBACK_POLL_SECONDS = 2.0
# Pause between attempts of the pub/sub reader while the server is unreachable.
_READER_RETRY_SECONDS = 0.5
# How long the pub/sub reader blocks before checking its connection again.
_READER_POLL_SECONDS = 1.0
# Retries of one command on a dropped connection (rides through a short restart): about 1 s
# in total on average, at most ~2.4 s before the error reaches the caller.
_RETRY = Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.1), retries=4)
# A readiness probe asks once: retries would hide an outage behind a second of backoff.
_PROBE_RETRY = Retry(NoBackoff(), retries=0)
_DRIVER_ERRORS = (RedisError, OSError)
# Errors of a server that may answer later (refused, lost or timed out; BusyLoadingError, a
# server still loading its data, is a ConnectionError).
_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)

_PUSH = """
-- KEYS[1] ring, KEYS[2] the connector's list
-- ARGV[1] connector id, ARGV[2] wake channel, ARGV[3..] external ids
local before = redis.call('LLEN', KEYS[2])
for i = 3, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  redis.call('RPUSH', KEYS[1], ARGV[1])
end
if before == 0 then
  redis.call('PUBLISH', ARGV[2], '')
end
return #ARGV - 2
"""

_POP = """
-- KEYS[1] ring, KEYS[2] this instance's parked batches, KEYS[3] instances set
-- ARGV[1] list key prefix, ARGV[2] max items, ARGV[3] receipt, ARGV[4] instance id
local max = tonumber(ARGV[2])
for _ = 1, redis.call('LLEN', KEYS[1]) do
  local cid = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
  local list = ARGV[1] .. cid
  local ids = redis.call('LPOP', list, max)
  if redis.call('LLEN', list) == 0 then
    redis.call('LREM', KEYS[1], -1, cid)
  end
  if ids then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('HSET', KEYS[2], ARGV[3], cjson.encode({c = cid, t = now, ids = ids}))
    redis.call('SADD', KEYS[3], ARGV[4])
    return {cid, ids}
  end
end
return false
"""

_RECLAIM = """
-- KEYS[1] instances set, KEYS[2] ring
-- ARGV[1] key prefix, ARGV[2] this instance, ARGV[3] minimum age (ms) of this instance's own
-- batches to hand back, ARGV[4] wake channel, ARGV[5..] receipts this instance still holds
local prefix, me, min_age = ARGV[1], ARGV[2], tonumber(ARGV[3])
local held = {}
for i = 5, #ARGV do held[ARGV[i]] = true end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local moved = 0
for _, inst in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local dead = inst ~= me and redis.call('EXISTS', prefix .. 'alive:' .. inst) == 0
  if dead or inst == me then
    local proc = prefix .. 'proc:' .. inst
    local parked = redis.call('HGETALL', proc)
    for j = 1, #parked, 2 do
      local batch = cjson.decode(parked[j + 1])
      if dead or (not held[parked[j]] and now - batch.t >= min_age) then
        local list = prefix .. 'q:' .. batch.c
        local ids = batch.ids
        -- Back to the front of the list, in their original order: they were due first.
        for k = #ids, 1, -1000 do
          local chunk = {}
          for m = k, math.max(1, k - 999), -1 do chunk[#chunk + 1] = ids[m] end
          redis.call('LPUSH', list, unpack(chunk))
        end
        if not redis.call('LPOS', KEYS[2], batch.c) then
          redis.call('RPUSH', KEYS[2], batch.c)
        end
        redis.call('HDEL', proc, parked[j])
        moved = moved + #ids
      end
    end
    if redis.call('HLEN', proc) == 0 then
      redis.call('SREM', KEYS[1], inst)
    end
  end
end
if moved > 0 then
  redis.call('PUBLISH', ARGV[4], '')
end
return moved
"""

_PURGE = """
-- KEYS[1] ring, KEYS[2] the connector's list; ARGV[1] connector id
local n = redis.call('LLEN', KEYS[2])
redis.call('DEL', KEYS[2])
redis.call('LREM', KEYS[1], 0, ARGV[1])
return n
"""

_DEPTH = """
-- KEYS[1] ring; ARGV[1] list key prefix
local out = {}
for _, cid in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local n = redis.call('LLEN', ARGV[1] .. cid)
  if n > 0 then
    out[#out + 1] = cid
    out[#out + 1] = n
  end
end
return out
"""


def _describe(url: str) -> tuple[str, list[str]]:
    """The URL without credentials or query (safe to show), and the secrets it carries."""
    parts = urlsplit(url)
    found = [parts.password] if parts.password else []
    found += [v for k, vs in parse_qs(parts.query).items() if k == "password" for v in vs]
    if parts.scheme == "unix":
        return f"unix://{parts.path}", found
    try:
        port = parts.port or 6379
    except ValueError:
        return f"{parts.scheme}://{parts.hostname}", found
    return f"{parts.scheme}://{parts.hostname}:{port}{parts.path}", found


class _Scripts:
    """The Lua scripts, registered on one client (EVALSHA, loaded again after a restart)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.push = client.register_script(_PUSH)
        self.pop = client.register_script(_POP)
        self.reclaim = client.register_script(_RECLAIM)
        self.purge = client.register_script(_PURGE)
        self.depth = client.register_script(_DEPTH)


class RedisQueue:
    """A fair, purgeable work queue in Redis, shared by every instance using ``prefix``.

    ``instance_id`` names this instance's parked batches (default: host, pid and a random
    suffix). Reusing a fixed id across restarts is fine: on ``open`` the batches a previous
    process with the same id left unacknowledged are handed back at once. Two live processes
    must not share an id.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "syncd",
        instance_id: str | None = None,
        heartbeat_seconds: float = 5.0,
        reclaim_after_seconds: float = 30.0,
    ) -> None:
        if not prefix:
            raise ConfigError("queue.prefix", "must not be empty")
        if not heartbeat_seconds > 0:
            raise ConfigError("queue.heartbeat_seconds", "must be a positive number of seconds")
        if not reclaim_after_seconds > heartbeat_seconds:
            raise ConfigError(
                "queue.reclaim_after_seconds", "must be longer than queue.heartbeat_seconds"
            )
        self._url = url
        self._where, self._secrets = _describe(url)
        self._instance_id = instance_id or (
            f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        )
        self._heartbeat_seconds = heartbeat_seconds
        self._ttl_ms = max(1, round(reclaim_after_seconds * 1000))
        base = f"{prefix}:"
        self._base = base
        self._list_prefix = f"{base}q:"
        self._ring = f"{base}ring"
        self._instances = f"{base}instances"
        self._parked = f"{base}proc:{self._instance_id}"
        self._alive = f"{base}alive:{self._instance_id}"
        # Present while the server keeps its data; a restart without persistence drops it.
        self._epoch = f"{base}epoch"
        self._wake_channel = f"{base}wake"
        self._control_channel = f"{base}control"

        self._state = QueueState.NEW
        self._client: aioredis.Redis | None = None
        self._scripts: _Scripts | None = None
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._signal = Signal()
        self._broadcast = Broadcast()
        # The readiness probe's client (see ``ping``), made on first use.
        self._probe: aioredis.Redis | None = None
        # Set by ``close``: the background tasks end on it, not only on their cancellation.
        self._closing = asyncio.Event()
        # Receipts of batches handed out by ``pop`` (or being popped) and not acknowledged.
        self._held: set[str] = set()
        self._lost = asyncio.Condition()
        self._losses = 0

    @property
    def instance_id(self) -> str:
        """This instance's id (names its parked batches and liveness key)."""
        return self._instance_id

    # --- lifecycle --------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, subscribe, announce this instance, hand back the batches of dead
        instances (and of a previous process with this id), start the background tasks."""
        if self._state is QueueState.CLOSED:
            raise QueueError("queue is closed")
        if self._state is QueueState.OPEN:
            return
        try:
            client = aioredis.Redis.from_url(
                self._url,
                decode_responses=True,
                retry=_RETRY,
                socket_connect_timeout=5.0,
                socket_timeout=10.0,
                socket_keepalive=True,
            )
        except ValueError as exc:
            raise ConfigError("queue.url", self._scrub(str(exc))) from None
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        scripts = _Scripts(client)
        try:
            await client.ping()
            await pubsub.subscribe(self._wake_channel, self._control_channel)
            await client.set(self._alive, "1", px=self._ttl_ms)
            await client.set(self._epoch, "1", nx=True)
            await self._run_reclaim(scripts, own_min_age_ms=0)
        except _DRIVER_ERRORS as exc:
            await self._release(client, pubsub)
            raise self._error("open", exc) from exc
        except BaseException:
            await self._release(client, pubsub)
            raise
        self._client, self._scripts, self._pubsub = client, scripts, pubsub
        self._state = QueueState.OPEN
        self._reader = asyncio.create_task(
            self._read_loop(pubsub), name=f"syncd-queue-reader:{self._instance_id}"
        )
        self._heartbeat = asyncio.create_task(
            self._heartbeat_loop(), name=f"syncd-queue-heartbeat:{self._instance_id}"
        )
        for task in (self._reader, self._heartbeat):
            task.add_done_callback(_log_crash)

    async def close(self) -> None:
        """Wake blocked ``pop`` calls (they return ``None``), end ``messages()`` iterators,
        stop the background tasks, hand this instance's unacknowledged batches back to the
        queue (no ``ack`` can come after this) and disconnect."""
        if self._state is QueueState.CLOSED:
            return
        was_open = self._state is QueueState.OPEN
        self._state = QueueState.CLOSED
        self._closing.set()
        self._signal.fire()
        self._broadcast.close()
        if not was_open:
            return
        # Cancelling interrupts a read in flight, but cannot be relied on alone: on Python
        # 3.11 redis-py sends each command through asyncio.wait_for, which drops a
        # cancellation arriving in the step where the send completes (CPython gh-86296).
        # Both loops also end on ``_closing``, so a lost cancellation costs one more command,
        # not a close that waits forever.
        await _stop(self._reader)
        await _stop(self._heartbeat)
        client, scripts, pubsub = self._client, self._scripts, self._pubsub
        self._client = self._scripts = self._pubsub = None
        assert client is not None and scripts is not None and pubsub is not None
        self._held.clear()
        if self._probe is not None:
            probe, self._probe = self._probe, None
            await probe.aclose()
        try:
            await self._run_reclaim(scripts, own_min_age_ms=0)
            await client.delete(self._alive)
        except _DRIVER_ERRORS as exc:
            # Not fatal: once the liveness key expires, another instance hands them back.
            log.warning("queue.close_handback_failed", error=str(self._error("close", exc)))
        finally:
            await self._release(client, pubsub)

    async def ping(self) -> None:
        """Raise :class:`QueueError` unless Redis answers, asked once (no retry), on a
        connection of its own so that it never waits behind the queue's commands."""
        self._connection()
        if self._probe is None:
            self._probe = aioredis.Redis.from_url(
                self._url,
                retry=_PROBE_RETRY,
                socket_connect_timeout=5.0,
                socket_timeout=5.0,
                max_connections=2,
            )
        try:
            await self._probe.ping()
        except _DRIVER_ERRORS as exc:
            raise self._error("ping", exc) from exc

    # --- work -------------------------------------------------------------------------

    async def push(self, connector_id: str, external_ids: Sequence[str]) -> None:
        """Append documents of one connector: one script call for the whole page."""
        _, scripts = self._connection()
        if not external_ids:
            return
        try:
            await scripts.push(
                keys=[self._ring, self._list_prefix + connector_id],
                args=[connector_id, self._wake_channel, *external_ids],
            )
        except _DRIVER_ERRORS as exc:
            raise self._error("push", exc) from exc

    async def pop(self, max_items: int, timeout: float) -> Batch | None:
        """Up to ``max_items`` documents of the next connector in the ring, parked under
        this instance until :meth:`ack`. Waits up to ``timeout`` seconds; ``None`` if nothing
        came or the queue was closed."""
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        if self._state is QueueState.NEW:
            raise QueueError("queue is not open")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while self._state is QueueState.OPEN:
            event = self._signal.current()
            batch = await self._take(max_items)
            if batch is not None:
                return batch
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            await wait_event(event, min(remaining, _FALLBACK_POLL_SECONDS))
        return None

    async def ack(self, batch: Batch) -> None:
        """Forget a popped batch for good. After ``close`` this does nothing (the batch was
        handed back)."""
        if batch.receipt is None:
            return
        self._held.discard(batch.receipt)
        if self._state is not QueueState.OPEN:
            return
        client, _ = self._connection()
        try:
            await client.hdel(self._parked, batch.receipt)
        except _DRIVER_ERRORS as exc:
            raise self._error("ack", exc) from exc

    async def purge(self, connector_id: str) -> int:
        """Atomically drop every queued entry of one connector; how many were dropped."""
        _, scripts = self._connection()
        try:
            dropped = await scripts.purge(
                keys=[self._ring, self._list_prefix + connector_id], args=[connector_id]
            )
        except _DRIVER_ERRORS as exc:
            raise self._error("purge", exc) from exc
        return int(dropped)

    async def depth(self) -> dict[str, int]:
        """Queued entries per connector (connectors with none are absent)."""
        _, scripts = self._connection()
        try:
            flat = await scripts.depth(keys=[self._ring], args=[self._list_prefix])
        except _DRIVER_ERRORS as exc:
            raise self._error("depth", exc) from exc
        return {str(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    # --- control messages -------------------------------------------------------------

    async def publish(self, message: Mapping[str, str]) -> None:
        """Send a control message to every instance sharing the prefix, this one included."""
        client, _ = self._connection()
        try:
            await client.publish(self._control_channel, json.dumps(dict(message)))
        except _DRIVER_ERRORS as exc:
            raise self._error("publish", exc) from exc

    async def wait_lost(self) -> None:
        """Return after a heartbeat finds that the server lost its data (see ``epoch``)."""
        async with self._lost:
            seen = self._losses
            await self._lost.wait_for(lambda: self._losses > seen)

    def messages(self) -> Subscription:
        """Control messages received from now on, until the queue is closed."""
        return self._broadcast.subscribe()

    # --- internals --------------------------------------------------------------------

    def _connection(self) -> tuple[aioredis.Redis, _Scripts]:
        if self._state is QueueState.NEW:
            raise QueueError("queue is not open")
        if self._client is None or self._scripts is None:
            raise QueueError("queue is closed")
        return self._client, self._scripts

    async def _take(self, max_items: int) -> Batch | None:
        _, scripts = self._connection()
        receipt = secrets.token_hex(16)
        # Held before the script runs, so the heartbeat never mistakes it for an orphan.
        self._held.add(receipt)
        taken = False
        try:
            result = await scripts.pop(
                keys=[self._ring, self._parked, self._instances],
                args=[self._list_prefix, max_items, receipt, self._instance_id],
            )
            if not result:
                return None
            connector_id, ids = result
            taken = True
            return Batch(str(connector_id), tuple(str(i) for i in ids), receipt)
        except _DRIVER_ERRORS as exc:
            if self._state is not QueueState.OPEN:
                return None
            raise self._error("pop", exc) from exc
        finally:
            if not taken:
                self._held.discard(receipt)

    async def _run_reclaim(self, scripts: _Scripts, *, own_min_age_ms: int) -> int:
        moved = await scripts.reclaim(
            keys=[self._instances, self._ring],
            args=[self._base, self._instance_id, own_min_age_ms, self._wake_channel, *self._held],
        )
        count = int(moved)
        if count:
            log.info("queue.reclaimed", documents=count)
        return count

    async def _heartbeat_loop(self) -> None:
        while not await wait_event(self._closing, self._heartbeat_seconds):
            client, scripts = self._connection()
            try:
                await client.set(self._alive, "1", px=self._ttl_ms)
                if await client.set(self._epoch, "1", nx=True):
                    # The epoch key was gone: the server lost its data (restarted without
                    # persistence, or flushed). Whoever notices first has the store re-push.
                    log.warning("queue.data_lost")
                    async with self._lost:
                        self._losses += 1
                        self._lost.notify_all()
                await self._run_reclaim(scripts, own_min_age_ms=self._ttl_ms)
            except _DRIVER_ERRORS as exc:
                log.warning("queue.heartbeat_failed", error=str(self._error("heartbeat", exc)))

    async def _read_loop(self, pubsub: PubSub) -> None:
        failing = False
        while not self._closing.is_set():
            try:
                message = await pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=_READER_POLL_SECONDS
                )
            except _DRIVER_ERRORS as exc:
                if not failing:
                    log.warning("queue.subscription_lost", error=str(self._error("read", exc)))
                failing = True
                await wait_event(self._closing, _READER_RETRY_SECONDS)
                continue
            if failing:
                # Wake-ups sent while we were away are lost: let every waiter look again.
                failing = False
                log.info("queue.subscription_restored")
                self._signal.fire()
            if message is not None and message.get("type") == "message":
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        if message["channel"] == self._wake_channel:
            self._signal.fire()
            return
        try:
            data = json.loads(message["data"])
        except ValueError:
            data = None
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            log.warning("queue.bad_control_message", channel=self._control_channel)
            return
        self._broadcast.send(data)

    async def _release(self, client: aioredis.Redis, pubsub: PubSub) -> None:
        for resource in (pubsub, client):
            try:
                await resource.aclose()
            except _DRIVER_ERRORS as exc:
                log.warning("queue.disconnect_failed", error=self._scrub(str(exc)))

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def _error(self, action: str, exc: BaseException) -> QueueError:
        detail = self._scrub(str(exc)) or type(exc).__name__
        error = QueueUnavailable if isinstance(exc, _UNAVAILABLE) else QueueError
        return error(f"Redis queue at {self._where}: {action} failed: {detail}")


async def _stop(task: asyncio.Task[None] | None) -> None:
    """Cancel one of our background tasks and wait for it, without swallowing a
    cancellation aimed at the caller."""
    # A task already ended was reported by _log_crash: not logged twice.
    if task is not None and not task.done():
        await cancel_and_wait(task)


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("queue.task_crashed", task=task.get_name(), exc_info=task.exception())
