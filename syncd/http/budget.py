"""Per-host request budgets shared by every connector (DESIGN.md §8).

A budget (``[http.hosts."HOST"]`` → :class:`~syncd.config.HostBudget`) is a token bucket —
``rate`` tokens per second, at most ``burst`` of them saved up — plus, optionally, at most
``concurrency`` requests in flight. The transport calls :meth:`HostBudgets.acquire` before
every attempt (retries and redirect hops included) and releases the returned
:class:`Lease` when the response has been read.

A rate-limit refusal announcing its reset (:mod:`syncd.http.ratelimit`: a 429, or a 403 with
no quota left, with ``Retry-After`` or a reset header), or a 503 carrying ``Retry-After``,
puts its host in *cooldown* (:meth:`HostBudgets.cooldown`, :func:`cooldown_seconds`): every
request to that host, from any connector, waits until the cooldown is over. Cooldowns apply
to every host, configured or not.

Which budget a URL draws from (:meth:`HostBudgets.key`): the ``host:port`` entry for the URL's
host and effective port (``https://h/`` is port 443) if there is one, else the ``host``
entry, else none; a host without an entry is limited by cooldowns only (keyed by its name).

Two implementations, chosen like the queue (:func:`syncd.http.budget_redis.open_budgets`):

- :class:`LocalHostBudgets` (``memory://``): in process. Waiters of a host go one at a time,
  in arrival order; clock and sleep are injectable for tests.
- :class:`~syncd.http.budget_redis.RedisHostBudgets` (``redis://…``, its own module): shared
  by every instance on the same Redis and key prefix. See its docstring for the keys and the
  Lua script.

Waits are plain ``asyncio`` sleeps, so cancelling the waiting task (an abort) ends them at
once. A wait is reported through ``on_wait``: ``host_cooldown`` for a cooldown, ``throttle``
for a token wait longer than :data:`REPORT_THROTTLE_OVER` (a wait for a free concurrency slot
has no known end and is not reported).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog
from yarl import URL

from syncd.config import HostBudget
from syncd.http.ratelimit import RateLimit
from syncd.http.retry_after import clamp_retry_after, parse_retry_after
from syncd.models import WaitReason

__all__ = [
    "COOLDOWN_STATUSES",
    "REPORT_THROTTLE_OVER",
    "HostBudgets",
    "Lease",
    "LocalHostBudgets",
    "OnWait",
    "budget_key",
    "cooldown_seconds",
    "hold_budget",
    "note_cooldown",
]

log = structlog.get_logger("syncd.http.budget")

OnWait = Callable[[WaitReason, float], None]
Sleep = Callable[[float], Awaitable[None]]

REPORT_THROTTLE_OVER = 0.05
"""A token wait longer than this (seconds) is shown as ``waiting.reason = "throttle"``."""

COOLDOWN_STATUSES = frozenset({429, 503})
"""Statuses whose ``Retry-After`` puts their host in cooldown for every connector (a 429 is a
rate-limit refusal, whose wait may also come from its reset headers)."""

# A cooldown this close to its end is over: the connector whose 429 set it has just slept
# the same Retry-After (timers may fire a hair early) and must not show a host_cooldown.
_COOLDOWN_SLACK = 0.001
# A token short of 1 by no more than this is whole (float arithmetic after an exact wait).
_ROUNDING = 1e-9


def budget_key(url: str | URL, hosts: Mapping[str, HostBudget]) -> str | None:
    """The name of the budget a request to ``url`` draws from: a key of ``hosts``
    (``host:port`` before ``host``) or, without an entry, the bare host name; ``None`` for a
    URL without a host (the transport lets aiohttp report it)."""
    try:
        parsed = URL(url)
        host = parsed.raw_host
        port = parsed.port
    except (TypeError, ValueError):
        return None
    if not host:
        return None
    name = f"[{host.lower()}]" if ":" in host else host.lower()
    with_port = f"{name}:{port}"
    return with_port if with_port in hosts else name


class KeyCache:
    """:func:`budget_key` remembered per URL text: a webhook POSTs to one URL over and over,
    and parsing it was a measurable part of each POST. Bounded (a source's page URLs differ
    by their cursor): emptied when full."""

    __slots__ = ("_hosts", "_keys")

    SIZE = 256

    def __init__(self, hosts: Mapping[str, HostBudget]) -> None:
        self._hosts = hosts
        self._keys: dict[str, str | None] = {}

    def __call__(self, url: str | URL) -> str | None:
        if not isinstance(url, str):
            return budget_key(url, self._hosts)
        try:
            return self._keys[url]
        except KeyError:
            pass
        if len(self._keys) >= self.SIZE:
            self._keys.clear()
        key = self._keys[url] = budget_key(url, self._hosts)
        return key


class Lease:
    """The right to send one request; :meth:`release` (idempotent) once it has ended."""

    __slots__ = ("_release",)

    def __init__(self, release: Callable[[], Awaitable[None]] | None = None) -> None:
        self._release = release

    async def release(self) -> None:
        """Give the concurrency slot back (nothing to do without one)."""
        release, self._release = self._release, None
        if release is not None:
            await release()


FREE_LEASE = Lease()
"""The lease of a request that holds no slot: releasing it does nothing."""


class HostBudgets(Protocol):
    """Per-host budgets and cooldowns, shared by every connector of a daemon."""

    def key(self, url: str | URL) -> str | None:
        """The budget ``url`` draws from (:func:`budget_key`)."""

    async def acquire(self, key: str, *, on_wait: OnWait | None = None) -> Lease:
        """Wait until a request to ``key`` may go: no cooldown, a token of its bucket and,
        with ``concurrency``, a free slot (held until the lease is released)."""

    async def cooldown(self, key: str, seconds: float) -> None:
        """Hold every request to ``key`` for ``seconds`` from now (a cooldown is only ever
        lengthened, never shortened)."""

    async def cooldown_left(self, key: str) -> float:
        """Seconds until ``key``'s cooldown ends (0 when there is none)."""

    async def open(self) -> None:
        """Get ready (connect); must not fail when a shared backend is unreachable."""

    async def close(self) -> None:
        """Release connections and background tasks."""


async def hold_budget(
    budgets: HostBudgets | None, url: str | URL, on_wait: OnWait | None
) -> tuple[str | None, Lease]:
    """What the transport does before each attempt: wait for the budget of ``url``'s host.
    Returns the budget's name (``None``: no budgets, or no host) and the lease to release."""
    key = budgets.key(url) if budgets is not None else None
    if budgets is None or key is None:
        return None, FREE_LEASE
    return key, await budgets.acquire(key, on_wait=on_wait)


def cooldown_seconds(
    status: int, headers: Mapping[str, str], limit: RateLimit | None, max_wait: float
) -> float | None:
    """How long an answer puts its host in cooldown for every connector, or ``None``: a
    rate-limit refusal (:mod:`syncd.http.ratelimit`) for its wait, unless its reset lies
    beyond ``max_wait`` (such a request fails instead of waiting, and holds nobody); else a
    429/503 with ``Retry-After`` for that long, clamped to 60 s as the retry waits are."""
    if limit is not None:
        return None if limit.beyond(max_wait) else limit.wait
    if status not in COOLDOWN_STATUSES:
        return None
    seconds = parse_retry_after(headers.get("Retry-After"))
    if seconds is None or seconds <= 0:
        return None
    return clamp_retry_after(seconds)


async def note_cooldown(
    budgets: HostBudgets | None, key: str | None, seconds: float | None
) -> None:
    """What the transport does with each answer: hold every request to the host for
    ``seconds`` (:func:`cooldown_seconds`; ``None``: no cooldown)."""
    if budgets is not None and key is not None and seconds is not None and seconds > 0:
        await budgets.cooldown(key, seconds)


# --- in process ---------------------------------------------------------------------------


@dataclass
class _Host:
    budget: HostBudget | None
    tokens: float
    stamp: float
    cooldown_until: float = -math.inf
    # Waiters go one at a time: arrival order, and a single sleeper per host.
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    slots: asyncio.Semaphore | None = None


class LocalHostBudgets:
    """:class:`HostBudgets` in this process (token bucket + semaphore on a monotonic clock).

    ``clock`` (default :func:`time.monotonic`) and ``sleep`` (default :func:`asyncio.sleep`)
    must agree: tests pass a fake clock whose sleep advances it.
    """

    def __init__(
        self,
        hosts: Mapping[str, HostBudget],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep | None = None,
    ) -> None:
        self.hosts = dict(hosts)
        self._clock = clock
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self._state: dict[str, _Host] = {}
        self._key = KeyCache(self.hosts)

    def key(self, url: str | URL) -> str | None:
        """The budget ``url`` draws from (:func:`budget_key`)."""
        return self._key(url)

    def _host(self, key: str) -> _Host:
        state = self._state.get(key)
        if state is None:
            budget = self.hosts.get(key)
            tokens = float(budget.burst) if budget is not None else 0.0
            state = _Host(budget, tokens, self._clock())
            if budget is not None and budget.concurrency is not None:
                state.slots = asyncio.Semaphore(budget.concurrency)
            self._state[key] = state
        return state

    async def acquire(self, key: str, *, on_wait: OnWait | None = None) -> Lease:
        """See :meth:`HostBudgets.acquire`."""
        state = self._host(key)
        if (
            state.budget is None
            and state.slots is None
            and not state.turn.locked()
            and state.cooldown_until - self._clock() <= _COOLDOWN_SLACK
        ):
            # A host without a budget, no cooldown, nobody waiting: nothing to wait for
            # (and no lock to take, which was most of this call's cost per request).
            return FREE_LEASE
        async with state.turn:
            slots = state.slots
            if slots is not None:
                # The slot first, then the token: the token is spent when the request leaves.
                await slots.acquire()
            try:
                await self._take_token(state, on_wait)
            except BaseException:
                if slots is not None:
                    slots.release()
                raise
        if slots is None:
            return FREE_LEASE

        async def release() -> None:
            slots.release()

        return Lease(release)

    async def _take_token(self, state: _Host, on_wait: OnWait | None) -> None:
        while True:
            now = self._clock()
            if state.cooldown_until - now > _COOLDOWN_SLACK:
                left = state.cooldown_until - now
                if on_wait is not None:
                    on_wait(WaitReason.HOST_COOLDOWN, left)
                await self._sleep(left)
                continue
            budget = state.budget
            if budget is None:
                return
            if now > state.stamp:
                state.tokens = min(
                    float(budget.burst), state.tokens + (now - state.stamp) * budget.rate
                )
                state.stamp = now
            if state.tokens >= 1.0 - _ROUNDING:
                state.tokens -= 1.0
                return
            wait = (1.0 - state.tokens) / budget.rate
            if on_wait is not None and wait > REPORT_THROTTLE_OVER:
                on_wait(WaitReason.THROTTLE, wait)
            await self._sleep(wait)

    async def cooldown(self, key: str, seconds: float) -> None:
        """See :meth:`HostBudgets.cooldown`."""
        state = self._host(key)
        state.cooldown_until = max(state.cooldown_until, self._clock() + max(0.0, seconds))

    async def cooldown_left(self, key: str) -> float:
        """See :meth:`HostBudgets.cooldown_left`."""
        state = self._state.get(key)
        return 0.0 if state is None else max(0.0, state.cooldown_until - self._clock())

    async def open(self) -> None:
        """Nothing to open."""

    async def close(self) -> None:
        """Nothing to close."""
