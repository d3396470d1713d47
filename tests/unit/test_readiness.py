"""Readiness answered at once (syncd.daemon.readiness): a fresh answer when a probe gives one
within ``slow``, the previous one while it stalls for less than ``stall``, then a failure."""

from __future__ import annotations

import asyncio

from syncd.daemon.readiness import Readiness
from syncd.errors import StoreError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Server:
    """A probe target: answers, refuses, or hangs until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.error: Exception | None = None
        self.hang: asyncio.Event | None = None

    async def ping(self) -> None:
        self.calls += 1
        if self.hang is not None:
            await self.hang.wait()
        if self.error is not None:
            raise self.error


def readiness(clock: Clock, **probes: Server) -> Readiness:
    return Readiness(
        {name: s.ping for name, s in probes.items()}, slow=0.01, stall=1.0, clock=clock
    )


async def test_a_refusal_is_reported_by_the_request_that_sees_it() -> None:
    clock, store = Clock(), Server()
    r = readiness(clock, store=store)
    assert await r.current() == {"store": "ok"}
    store.error = StoreError("PostgreSQL store: connection refused")
    assert await r.current() == {"store": "PostgreSQL store: connection refused"}
    store.error = None
    assert await r.current() == {"store": "ok"}


async def test_a_hanging_server_reads_as_before_then_fails_after_the_stall() -> None:
    clock, store, queue = Clock(), Server(), Server()
    r = readiness(clock, store=store, queue=queue)
    await r.prime()
    queue.hang = asyncio.Event()
    # In flight for less than the stall: the previous answer, at once.
    assert await r.current() == {"store": "ok", "queue": "ok"}
    clock.now += 1.0
    assert await r.current() == {"store": "ok", "queue": "no answer within 1 s"}
    # Requests during the stall join the round in flight: one ping each.
    assert queue.calls == 2
    queue.error = OSError("connection reset")
    queue.hang.set()
    assert await r.current() == {"store": "ok", "queue": "connection reset"}
    await r.close()


async def test_before_any_answer_a_stalled_probe_is_not_ready() -> None:
    clock, store = Clock(), Server()
    store.hang = asyncio.Event()
    r = readiness(clock, store=store)
    assert await r.current() == {"store": "not probed yet"}
    clock.now += 5
    assert await r.current() == {"store": "no answer within 1 s"}
    await r.close()


async def test_an_unexpected_error_is_described_not_raised() -> None:
    clock, store = Clock(), Server()
    store.error = RuntimeError("driver bug")
    assert await readiness(clock, store=store).current() == {"store": "RuntimeError: driver bug"}


async def test_a_probe_that_times_out_says_so() -> None:
    store = Server()
    store.hang = asyncio.Event()
    r = Readiness({"store": store.ping}, timeout=0.01, slow=0.05)
    assert await r.current() == {"store": "no answer within 0.01 s"}
