"""Readiness probes that answer at once (``GET /readyz``).

A probe of the store or the queue can take as long as its server takes to refuse or time out
(a Redis being restarted, a PostgreSQL failing over, a host that drops packets): a request
that awaited it would time out itself (Kubernetes waits 1 s by default) instead of reading
503. So a request starts a round of probes — or joins the round in flight, so that a burst of
requests pings each server once — and waits for it at most ``slow`` seconds (0.1). Then each
probe reports:

- its answer in this round, ``"ok"`` or its error, if it gave one (a refused connection is
  seen at once);
- while it has been in flight for less than ``stall`` seconds (1): its previous answer, so that
  a loaded machine's slow answer does not read as an outage (``"not probed yet"`` before the
  first one);
- past that: ``"no answer within <stall> s"``, until it answers or times out (``timeout``, 5).

A request therefore never waits longer than ``slow`` for a server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from syncd.errors import SyncdError
from syncd.observability.logs import describe_error

__all__ = ["Probe", "Readiness"]

Probe = Callable[[], Awaitable[None]]


@dataclass
class _State:
    answer: str | None = None  # "ok" or the error; None before the first answer
    started_at: float | None = None  # of the probe in flight, if one is


class Readiness:
    """Named probes, run on request and answered within ``slow`` seconds."""

    def __init__(
        self,
        probes: Mapping[str, Probe],
        *,
        timeout: float = 5.0,
        stall: float = 1.0,
        slow: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probes = dict(probes)
        self._timeout = timeout
        self._stall = stall
        self._slow = slow
        self._clock = clock
        self._states = {name: _State() for name in probes}
        self._round: asyncio.Task[None] | None = None

    async def current(self) -> dict[str, str]:
        """Each probe's answer now (see the module docstring)."""
        if self._round is None or self._round.done():
            self._round = asyncio.create_task(self._probe_all(), name="readiness-probes")
        await asyncio.wait({self._round}, timeout=self._slow)
        now = self._clock()
        return {name: self._answer(state, now) for name, state in self._states.items()}

    async def prime(self) -> None:
        """Run one round to its end: the first requests then have answers to fall back on."""
        await self.current()
        if self._round is not None:
            await asyncio.shield(self._round)

    async def close(self) -> None:
        """Cancel a round in flight."""
        if self._round is not None and not self._round.done():
            self._round.cancel()
            await asyncio.gather(self._round, return_exceptions=True)

    def _answer(self, state: _State, now: float) -> str:
        if state.started_at is not None and now - state.started_at >= self._stall:
            return f"no answer within {self._stall:g} s"
        return state.answer if state.answer is not None else "not probed yet"

    async def _probe_all(self) -> None:
        await asyncio.gather(*(self._probe(name, probe) for name, probe in self._probes.items()))

    async def _probe(self, name: str, probe: Probe) -> None:
        state = self._states[name]
        state.started_at = self._clock()
        try:
            await asyncio.wait_for(probe(), self._timeout)
            answer = "ok"
        except TimeoutError:
            answer = f"no answer within {self._timeout:g} s"
        except Exception as exc:  # whatever a probe raises is what readiness reports
            answer = describe_error(exc, plain=(SyncdError, OSError))
        finally:
            state.started_at = None
        state.answer = answer
