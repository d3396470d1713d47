"""The pacer: background steps wait while requests are in flight, go on one per loop turn
afterwards, and are never starved by a stream of requests."""

from __future__ import annotations

import asyncio

import pytest

from syncd.runtime.pacing import Pacer


async def _turns(loops: int) -> None:
    for _ in range(loops):
        await asyncio.sleep(0)


async def test_turn_is_immediate_without_requests() -> None:
    pacer = Pacer()
    # No request and nobody waiting: the turn does not even yield.
    coro = pacer.turn()
    with pytest.raises(StopIteration):
        coro.send(None)


async def test_steps_wait_while_a_request_is_in_flight() -> None:
    pacer = Pacer(starve_seconds=3600)
    order: list[str] = []
    pacer.begin()

    async def step(name: str) -> None:
        await pacer.turn()
        order.append(name)

    tasks = [asyncio.create_task(step(n)) for n in "abc"]
    await _turns(10)
    assert order == [] and pacer.waiting == 3
    pacer.end()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"]  # first come, first served
    assert pacer.waiting == 0


async def test_waiting_steps_go_on_one_per_loop_turn() -> None:
    pacer = Pacer(starve_seconds=3600)
    seen: list[tuple[str, int]] = []
    loop_turn = 0

    async def count_turns() -> None:
        nonlocal loop_turn
        while True:
            await asyncio.sleep(0)
            loop_turn += 1

    counter = asyncio.create_task(count_turns())
    pacer.begin()

    async def step(name: str) -> None:
        await pacer.turn()
        seen.append((name, loop_turn))

    tasks = [asyncio.create_task(step(n)) for n in "abcd"]
    await _turns(3)
    pacer.end()
    await asyncio.gather(*tasks)
    counter.cancel()
    turns = [t for _, t in seen]
    assert [n for n, _ in seen] == list("abcd")
    assert len(set(turns)) == 4, turns  # never two released in the same loop turn


async def test_a_stream_of_requests_does_not_starve_background_steps() -> None:
    pacer = Pacer(starve_seconds=0.001)
    pacer.begin()  # a request that never ends
    done = asyncio.Event()

    async def step() -> None:
        for _ in range(3):
            await pacer.turn()
        done.set()

    task = asyncio.create_task(step())
    await asyncio.wait_for(done.wait(), timeout=5)
    await task
    assert pacer.in_flight == 1


async def test_a_cancelled_step_leaves_the_line() -> None:
    pacer = Pacer(starve_seconds=3600)
    pacer.begin()
    order: list[str] = []

    async def step(name: str) -> None:
        await pacer.turn()
        order.append(name)

    gone = asyncio.create_task(step("gone"))
    kept = asyncio.create_task(step("kept"))
    await _turns(2)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert pacer.waiting == 1
    pacer.end()
    await kept
    assert order == ["kept"]


def test_end_without_begin_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="without begin"):
        Pacer().end()


def test_starve_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="starve_seconds"):
        Pacer(starve_seconds=0)
