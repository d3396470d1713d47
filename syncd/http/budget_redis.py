"""Per-host request budgets in Redis, shared by every instance on the same Redis and key
prefix (DESIGN.md §8): the counterpart of :class:`syncd.http.budget.LocalHostBudgets`, whose
module describes budgets, keys and cooldowns; and :func:`open_budgets`, which picks one of the
two.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from yarl import URL

from syncd.config.sections import HostBudget
from syncd.http.budget import (
    FREE_LEASE,
    REPORT_THROTTLE_OVER,
    HostBudgets,
    Lease,
    LocalHostBudgets,
    OnWait,
    log,
)
from syncd.models import WaitReason
from syncd.runtime.tasks import cancel_and_wait

__all__ = ["RedisHostBudgets", "open_budgets"]

# KEYS[1] bucket hash {tokens, ts}, KEYS[2] cooldown, KEYS[3] slots (zset lease -> expiry ms)
# ARGV[1] rate/s (0: no bucket), ARGV[2] burst, ARGV[3] concurrency (0: no limit),
# ARGV[4] lease id, ARGV[5] lease ttl (ms)
# Returns {0, ""} (granted), {1, ms} (cooldown), {2, ""} (no free slot), {3, ms} (no token).
# As in process: a cooldown within 1 ms of its end is over, and a token short of 1 by a
# rounding error is whole (waking up to find 0.9999999 would cost another round trip).
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cool = tonumber(redis.call('GET', KEYS[2]) or '0')
if cool - now > 1 then return {1, tostring(cool - now)} end
local rate, burst, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl = tonumber(ARGV[5])
if limit > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= limit then return {2, ''} end
end
if rate > 0 then
  local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
  local tokens = tonumber(state[1]) or burst
  local ts = tonumber(state[2]) or now
  if now > ts then
    tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
    ts = now
  end
  if tokens < 1 - 1e-9 then return {3, tostring((1 - tokens) * 1000 / rate)} end
  tokens = tokens - 1
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
  -- A bucket left alone refills to full, which is what a missing key means.
  redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
end
if limit > 0 then
  redis.call('ZADD', KEYS[3], now + ttl, ARGV[4])
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return {0, ''}
"""

# KEYS[1] cooldown; ARGV[1] ms from now (0: only read). Returns ms left (a string).
_COOLDOWN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = now + tonumber(ARGV[1])
if tonumber(ARGV[1]) > 0 and want > cur then
  redis.call('SET', KEYS[1], tostring(want), 'PX', math.ceil(want - now))
  cur = want
end
return tostring(math.max(0, cur - now))
"""

# KEYS[1] slots; ARGV[1] lease ttl (ms), ARGV[2..] lease ids still held. Expired leases stay
# gone (XX): their slot may already be someone else's.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[i]) end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], ttl) end
return 0
"""

# A waiter for a slot held by another instance looks again this often.
_SLOT_POLL_SECONDS = 0.05
# After Redis failed, budgets are applied in process for this long before trying it again.
_OUTAGE_SECONDS = 5.0
# A host without a budget of its own can only be held by a cooldown: another instance's is
# read from Redis at most this often (and kept here), so that requests to such a host (a
# webhook's POSTs) do not each cost a round trip, serialised per host.
_COOLDOWN_POLL_SECONDS = 0.25


@dataclass
class _Waiters:
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    held: set[str] = field(default_factory=set)


class RedisHostBudgets:
    """:class:`HostBudgets` shared by every instance using Redis at ``url`` and ``prefix``.

    Keys, per budget name ``H`` (see :func:`budget_key`):

    ``{prefix}:host:H``
        hash ``{tokens, ts}``: the token bucket, ``ts`` in ms of the Redis server's ``TIME``
        (one clock for every instance). It expires once it would be full again.
    ``{prefix}:host:H:cooldown``
        the cooldown's end (server ms), expiring (``PX``) when the cooldown ends.
    ``{prefix}:host:H:slots``
        sorted set ``lease id -> expiry (server ms)``: the requests in flight. A holder renews
        its leases every ``slot_ttl / 3``; a crashed instance's leases expire after
        ``slot_ttl`` seconds and their slots come back.

    ``acquire`` runs one Lua script (atomic, one round trip): cooldown → free slot → token;
    when all three allow, it takes the token and the slot together. Otherwise it answers how
    long to wait (cooldown or token) or "no slot" (then this instance waits for one of its own
    releases, or polls every 50 ms). Waiters of one host in this instance go one at a time,
    so only one of them asks Redis. (An acquire cancelled while its script runs may have
    taken a token and a slot; that slot is not renewed and comes back after ``slot_ttl``.)

    A host without a budget (no entry) is held only by cooldowns: this instance's apply at
    once, another instance's are read from Redis at most every 0.25 s, not once per request.

    When Redis fails, the budgets are applied in process (each instance on its own: a host
    may then see up to the number of instances times its rate) for a few seconds before Redis
    is tried again (a warning each time Redis is found unreachable).
    """

    def __init__(
        self,
        url: str,
        hosts: Mapping[str, HostBudget],
        *,
        prefix: str = "syncd",
        slot_ttl: float = 30.0,
    ) -> None:
        self.hosts = dict(hosts)
        self._url = url
        self._base = f"{prefix}:host:"
        self._ttl_ms = max(1, round(slot_ttl * 1000))
        self._renew_every = slot_ttl / 3
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._local = LocalHostBudgets(hosts)
        self._down_until = -math.inf
        self._waiters: dict[str, _Waiters] = {}
        self._renewer: asyncio.Task[None] | None = None
        # host -> when to read its cooldown from Redis again (hosts without a budget).
        self._poll_at: dict[str, float] = {}
        # The driver's errors, known once ``open`` has imported it (lazily, like the queue).
        self._errors: tuple[type[BaseException], ...] = (OSError,)

    def key(self, url: str | URL) -> str | None:
        """The budget ``url`` draws from (:func:`budget_key`)."""
        return self._local.key(url)

    async def open(self) -> None:
        """Create the client (connections are made on first use)."""
        if self._client is not None:
            return
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError

        self._errors = (RedisError, OSError)
        client = aioredis.Redis.from_url(
            self._url,
            decode_responses=True,
            socket_connect_timeout=2.0,
            socket_timeout=2.0,
            socket_keepalive=True,
        )
        self._scripts = {
            "acquire": client.register_script(_ACQUIRE),
            "cooldown": client.register_script(_COOLDOWN),
            "renew": client.register_script(_RENEW),
        }
        self._client = client

    async def close(self) -> None:
        """Stop renewing leases and disconnect (held leases then expire on their own)."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            await cancel_and_wait(renewer)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # --- operations -------------------------------------------------------------------

    async def acquire(self, key: str, *, on_wait: OnWait | None = None) -> Lease:
        """See :meth:`HostBudgets.acquire`."""
        budget = self.hosts.get(key)
        if budget is None:
            return await self._acquire_unbudgeted(key, on_wait)
        rate = budget.rate if budget is not None else 0.0
        burst = budget.burst if budget is not None else 1
        limit = budget.concurrency if budget is not None and budget.concurrency else 0
        waiters = self._waiters.setdefault(key, _Waiters())
        lease_id = secrets.token_hex(8)
        async with waiters.turn:
            while True:
                if not self._usable():
                    return await self._local.acquire(key, on_wait=on_wait)
                released = waiters.released
                try:
                    answer = await self._run(
                        "acquire",
                        self._keys(key),
                        [repr(rate), burst, limit, lease_id, self._ttl_ms],
                    )
                except self._errors as exc:
                    self._outage(exc)
                    continue
                code, value = int(answer[0]), answer[1]
                if code == 0:
                    break
                if code == 2:
                    # No free slot: woken by a release here, or look again soon.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(_SLOT_POLL_SECONDS):
                            await released.wait()
                    continue
                wait = float(value) / 1000
                reason = WaitReason.HOST_COOLDOWN if code == 1 else WaitReason.THROTTLE
                if on_wait is not None and (code == 1 or wait > REPORT_THROTTLE_OVER):
                    on_wait(reason, wait)
                await asyncio.sleep(wait)
        if not limit:
            return FREE_LEASE
        waiters.held.add(lease_id)
        self._start_renewer()
        return Lease(lambda: self._release(key, waiters, lease_id))

    async def _acquire_unbudgeted(self, key: str, on_wait: OnWait | None) -> Lease:
        """A host without a budget: wait out its cooldown, this instance's at once, another
        instance's as read from Redis at most every :data:`_COOLDOWN_POLL_SECONDS`."""
        while True:
            now = time.monotonic()
            if self._usable() and now >= self._poll_at.get(key, -math.inf):
                self._poll_at[key] = now + _COOLDOWN_POLL_SECONDS
                try:
                    left = float(await self._run("cooldown", [self._keys(key)[1]], [0])) / 1000
                except self._errors as exc:
                    self._outage(exc)
                else:
                    if left > 0:
                        await self._local.cooldown(key, left)
            lease = await self._local.acquire(key, on_wait=on_wait)
            # After a wait longer than the poll interval, the cooldown may have been
            # lengthened elsewhere: look again.
            if not self._usable() or time.monotonic() < self._poll_at.get(key, -math.inf):
                return lease

    async def _release(self, key: str, waiters: _Waiters, lease_id: str) -> None:
        waiters.held.discard(lease_id)
        waiters.released.set()
        waiters.released = asyncio.Event()
        client = self._client
        if client is None:
            return
        # Bounded: an abort must not wait on an unreachable Redis; the lease expires anyway.
        errors: tuple[type[BaseException], ...] = (TimeoutError, *self._errors)
        try:
            async with asyncio.timeout(1.0):
                await client.zrem(self._keys(key)[2], lease_id)
        except errors as exc:
            log.debug("http.budget_release_failed", host=key, error=str(exc))

    async def cooldown(self, key: str, seconds: float) -> None:
        """See :meth:`HostBudgets.cooldown` (the cooldown's end is on the server's clock)."""
        await self._local.cooldown(key, seconds)  # also held here if Redis is unreachable
        if seconds <= 0 or not self._usable():
            return
        try:
            await self._run("cooldown", [self._keys(key)[1]], [max(1, math.ceil(seconds * 1000))])
        except self._errors as exc:
            self._outage(exc)

    async def cooldown_left(self, key: str) -> float:
        """See :meth:`HostBudgets.cooldown_left`."""
        local = await self._local.cooldown_left(key)
        if not self._usable():
            return local
        try:
            left = await self._run("cooldown", [self._keys(key)[1]], [0])
        except self._errors as exc:
            self._outage(exc)
            return local
        return max(local, float(left) / 1000)

    # --- helpers ----------------------------------------------------------------------

    def _keys(self, key: str) -> list[str]:
        base = self._base + key
        return [base, f"{base}:cooldown", f"{base}:slots"]

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        if self._client is None:
            raise RuntimeError("host budgets are not open: await budgets.open() first")
        return await self._scripts[script](keys=keys, args=args)

    def _usable(self) -> bool:
        return self._client is not None and time.monotonic() >= self._down_until

    def _outage(self, exc: BaseException) -> None:
        log.warning(
            "http.budgets_local_fallback",
            error=str(exc) or type(exc).__name__,
            retry_in=_OUTAGE_SECONDS,
        )
        self._down_until = time.monotonic() + _OUTAGE_SECONDS

    def _start_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_loop(), name="syncd-budget-renew")

    async def _renew_loop(self) -> None:
        """Keep the slots of requests in flight from expiring while their holder lives.

        Ends once ``close`` has let go of it, not only when cancelled: on Python 3.11 redis-py
        sends through ``asyncio.wait_for``, which drops a cancellation that arrives as the
        send completes (CPython gh-86296), and ``close`` would then wait for it forever."""
        while self._renewer is asyncio.current_task():
            await asyncio.sleep(self._renew_every)
            for key, waiters in list(self._waiters.items()):
                if not waiters.held or not self._usable():
                    continue
                try:
                    await self._run(
                        "renew", [self._keys(key)[2]], [self._ttl_ms, *sorted(waiters.held)]
                    )
                except self._errors as exc:
                    self._outage(exc)


def open_budgets(
    queue_url: str, hosts: Mapping[str, HostBudget], *, prefix: str = "syncd"
) -> HostBudgets:
    """The budgets that go with the queue at ``queue_url``: in process for ``memory://``,
    in Redis (under ``prefix``) for ``redis://…``. Not yet open."""
    if queue_url.startswith(("redis://", "rediss://", "unix://")):
        return RedisHostBudgets(queue_url, hosts, prefix=prefix)
    return LocalHostBudgets(hosts)
