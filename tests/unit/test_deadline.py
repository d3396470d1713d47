"""The workers' per-call deadline (:class:`syncd.indexing.batch.Deadline`): one timer for a
sequence of calls, a call past its time fails alone, any other cancellation goes through."""

from __future__ import annotations

import asyncio

import pytest

from syncd.indexing.batch import Deadline


async def test_a_call_past_its_time_is_cancelled_and_the_task_goes_on() -> None:
    deadline = Deadline(0.05)
    deadline.start()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(10)
    assert deadline.stop()
    # Nothing is left pending on the task: the next call runs normally.
    deadline.start()
    await asyncio.sleep(0)
    assert not deadline.stop()
    deadline.close()
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_quick_calls_share_one_timer() -> None:
    deadline = Deadline(30)
    deadline.start()
    timer = deadline._handle
    for _ in range(100):
        deadline.start()
        await asyncio.sleep(0)
        assert not deadline.stop()
    assert deadline._handle is timer
    deadline.close()
    assert deadline._handle is None and timer is not None and timer.cancelled()


async def test_each_call_gets_its_whole_time() -> None:
    deadline = Deadline(0.2)
    # The timer set by the first call fires during the second: it waits for the second's end.
    deadline.start()
    await asyncio.sleep(0.15)
    deadline.stop()
    deadline.start()
    await asyncio.sleep(0.1)  # 0.25 s after the first start, 0.1 s into this call
    assert not deadline.stop()
    deadline.close()


async def test_another_cancellation_is_not_taken_for_the_deadline() -> None:
    async def call() -> None:
        deadline = Deadline(30)
        deadline.start()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            assert not deadline.stop()
            raise
        finally:
            deadline.close()

    task = asyncio.create_task(call())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_deadline_and_an_abort_together_cancel_the_task() -> None:
    seen: list[bool] = []

    async def call() -> None:
        deadline = Deadline(0)  # due at once: its timer fires in the next loop iteration
        deadline.start()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.extend((deadline._expired, deadline.stop()))
            raise

    task = asyncio.create_task(call())
    await asyncio.sleep(0)  # the call starts waiting
    await asyncio.sleep(0)  # resumed before its due timer runs, in the same iteration
    task.cancel()  # an abort, in the same iteration as the deadline
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [True, False]  # the deadline fired too, yet the abort wins
