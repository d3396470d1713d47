"""Requests first: background work on the shared event loop waits while requests are served.

One loop runs the control API beside every crawl and indexing worker. Twenty crawls keep it
busy: a request arriving then waits behind every chunk of their work that is ready, and it
needs several turns of the loop (read, handler, store read, reply), so it waits several
times over. :class:`Pacer` changes the order: background steps (a chunk of a page's
preparation, a page commit, the next page fetch, a worker's next batch) ask for a
:meth:`~Pacer.turn` first.

- With no request in flight and nobody waiting, a turn is given at once (one comparison).
- While a request is in flight, steps wait in line (first come, first served).
- Waiting steps go on one per loop turn once no request is in flight — never all at once: a
  burst of twenty page commits in one loop turn is what a new request would wait behind.
- While requests keep coming, one waiting step goes on every ``starve_seconds`` anyway, so a
  flood of requests slows the crawls but never stops them.
- A request has priority for ``REQUEST_PRIORITY_SECONDS`` at most (the API ends it then).
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["REQUEST_PRIORITY_SECONDS", "STARVE_SECONDS", "Pacer"]

#: While requests are in flight, one waiting background step goes on this often.
STARVE_SECONDS = 0.005
#: How long one request keeps its priority: a request that takes longer (a preview fetching
#: pages from a slow source) is served on, without holding the crawls back meanwhile.
REQUEST_PRIORITY_SECONDS = 1.0


class Pacer:
    """Counts the requests in flight; background steps take turns around them."""

    def __init__(self, starve_seconds: float = STARVE_SECONDS) -> None:
        if starve_seconds <= 0:
            raise ValueError("starve_seconds must be > 0")
        self.starve_seconds = starve_seconds
        self._in_flight = 0
        self._line: deque[asyncio.Future[None]] = deque()
        self._next: asyncio.Handle | None = None  # the scheduled release of the line's head
        self._soon = False  # whether ``_next`` is the prompt (call_soon) kind

    @property
    def in_flight(self) -> int:
        """Requests begun and not yet ended."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Background steps waiting for their turn."""
        return len(self._line)

    def begin(self) -> None:
        """A request is being served."""
        self._in_flight += 1

    def end(self) -> None:
        """A request was served (its answer is on its way)."""
        if self._in_flight <= 0:
            raise RuntimeError("Pacer.end() without begin()")
        self._in_flight -= 1
        if self._in_flight == 0 and self._line:
            self._schedule()

    async def turn(self) -> None:
        """Return when it is this background step's turn (see the module's docstring)."""
        if self._in_flight == 0 and not self._line:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._line.append(waiter)
        if self._next is None:
            self._schedule()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter in self._line:
                self._line.remove(waiter)
            raise

    def _schedule(self) -> None:
        """Schedule the release of the line's head: on the next loop turn when no request is
        in flight, else after ``starve_seconds``."""
        prompt = self._in_flight == 0
        if self._next is not None:
            if self._soon or not prompt:
                return  # already as soon as it should be
            self._next.cancel()
        loop = asyncio.get_running_loop()
        self._soon = prompt
        self._next = (
            loop.call_soon(self._release)
            if prompt
            else loop.call_later(self.starve_seconds, self._release)
        )

    def _release(self) -> None:
        self._next = None
        while self._line:
            waiter = self._line.popleft()
            if not waiter.done():  # skip the cancelled
                waiter.set_result(None)
                break
        if self._line:
            self._schedule()
