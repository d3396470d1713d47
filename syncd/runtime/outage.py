"""Riding out a store or queue outage (issue 23): retry a call that met an unavailable
backend with capped exponential backoff, for at most ``[sync] outage_seconds`` of continuous
unavailability.

A call raises :class:`~syncd.errors.StoreUnavailable` or :class:`~syncd.errors.QueueUnavailable`
when its backend cannot be reached now (the backends translate their drivers' errors); any other
error passes through at once. The waits are short and capped (:class:`Backoff`: 0.05, 0.1, 0.2,
0.4, then every 0.5 s), so the call goes through at most half a second after the backend
answers again; once the budget is spent, :class:`~syncd.errors.OutageTooLong` is raised, naming
the backend, the budget and the last error.

The clock and the sleep are injected: a run passes a sleep that its cancel token interrupts (an
abort never waits for the store), a worker one that its stop interrupts, and unit tests a fake.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from syncd.errors import OutageTooLong, QueueUnavailable, StoreUnavailable
from syncd.models import WaitReason

__all__ = [
    "DEFAULT_BACKOFF",
    "UNAVAILABLE",
    "Backoff",
    "Outage",
    "OutagePolicy",
    "reason_of",
    "ride_out",
]

T = TypeVar("T")

#: The errors of a backend that may answer later.
UNAVAILABLE: tuple[type[Exception], ...] = (StoreUnavailable, QueueUnavailable)

Sleep = Callable[[float], Awaitable[None]]
"""Sleep this many seconds (may raise to interrupt the wait, e.g. ``Aborted``)."""
OnWait = Callable[[WaitReason, float], None]
"""Told before each wait: why (``store_unavailable``/``queue_unavailable``) and how long."""


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff: wait ``first * factor**attempt``, never more than ``cap``.

    The cap bounds how long after a backend comes back a waiting call notices it."""

    first: float = 0.05
    factor: float = 2.0
    cap: float = 0.5

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt`` (0-based)."""
        return min(self.cap, self.first * self.factor ** min(attempt, 64))


DEFAULT_BACKOFF = Backoff()


@dataclass(frozen=True)
class OutagePolicy:
    """How long (``budget``, seconds of continuous unavailability) and how (``backoff``) to
    wait for a backend; ``clock`` is monotonic seconds."""

    budget: float = 60.0
    backoff: Backoff = DEFAULT_BACKOFF
    clock: Callable[[], float] = time.monotonic


def reason_of(exc: BaseException) -> WaitReason:
    """What a wait caused by ``exc`` is shown as."""
    if isinstance(exc, QueueUnavailable):
        return WaitReason.QUEUE_UNAVAILABLE
    return WaitReason.STORE_UNAVAILABLE


class Outage:
    """One continuous outage as seen by one caller: when it began and how many retries it
    took. :meth:`failed` gives the next wait or raises once the budget is spent."""

    def __init__(self, policy: OutagePolicy) -> None:
        self._policy = policy
        self.since: float | None = None
        self.attempts = 0

    @property
    def active(self) -> bool:
        """Whether the backend is unavailable (no call went through since it failed)."""
        return self.since is not None

    def failed(self, exc: Exception) -> float:
        """A call failed with ``exc`` (unavailable): seconds to wait before the next one, or
        :class:`OutageTooLong` (chained to ``exc``) when the budget is spent. The wait never
        runs past the budget, so a run fails when its budget ends, not up to a cap later."""
        now = self._policy.clock()
        if self.since is None:
            self.since = now
        elapsed = now - self.since
        budget = self._policy.budget
        if elapsed >= budget:
            backend = "queue" if isinstance(exc, QueueUnavailable) else "store"
            raise OutageTooLong(
                f"{backend} unavailable for {elapsed:.1f}s, longer than "
                f"[sync] outage_seconds ({budget:g}s): {exc}"
            ) from exc
        delay = min(self._policy.backoff.delay(self.attempts), budget - elapsed)
        self.attempts += 1
        return delay

    def recovered(self) -> float | None:
        """A call went through: the outage (if any) is over. How long it lasted, or ``None``."""
        if self.since is None:
            return None
        lasted = self._policy.clock() - self.since
        self.since = None
        self.attempts = 0
        return lasted


async def ride_out(
    call: Callable[[], Awaitable[T]],
    *,
    policy: OutagePolicy,
    sleep: Sleep = asyncio.sleep,
    on_wait: OnWait | None = None,
    on_recovered: Callable[[float], None] | None = None,
) -> T:
    """``await call()``, retried while it raises an unavailable backend's error (see the
    module's docstring). ``on_wait`` is told of each wait, ``on_recovered`` how long the outage
    lasted once a retry went through. Cancellation, and whatever ``sleep`` raises, end the
    wait at once."""
    outage = Outage(policy)
    while True:
        try:
            result = await call()
        except UNAVAILABLE as exc:
            delay = outage.failed(exc)
            if on_wait is not None:
                on_wait(reason_of(exc), delay)
            await sleep(delay)
            continue
        lasted = outage.recovered()
        if lasted is not None and on_recovered is not None:
            on_recovered(lasted)
        return result
