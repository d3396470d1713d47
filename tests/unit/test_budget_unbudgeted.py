"""Redis host budgets for a host without a budget of its own (a webhook's host, say): held by
another instance's cooldown, read from Redis at most every 0.25 s rather than per request."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from syncd.http.budget_redis import RedisHostBudgets
from syncd.models import WaitReason


@pytest.fixture
async def pair(redis_url: str, redis_prefix: str) -> AsyncIterator[list[RedisHostBudgets]]:
    """Two instances on one Redis and prefix, neither with a budget."""
    made = [RedisHostBudgets(redis_url, {}, prefix=redis_prefix) for _ in range(2)]
    for budgets in made:
        await budgets.open()
    yield made
    for budgets in made:
        await budgets.close()


async def test_another_instances_cooldown_holds_requests(pair: list[RedisHostBudgets]) -> None:
    a, b = pair
    await a.cooldown("hook", 0.4)
    waits: list[tuple[WaitReason, float]] = []
    started = time.monotonic()
    await (await b.acquire("hook", on_wait=lambda r, s: waits.append((r, s)))).release()
    assert time.monotonic() - started >= 0.3
    assert [r for r, _ in waits] == [WaitReason.HOST_COOLDOWN]


async def test_requests_do_not_each_ask_redis(pair: list[RedisHostBudgets]) -> None:
    _, b = pair
    calls: list[str] = []
    run = b._run

    async def counted(script: str, keys: list[str], args: list[Any]) -> Any:
        calls.append(script)
        return await run(script, keys, args)

    b._run = counted  # type: ignore[method-assign]
    started = time.monotonic()
    for _ in range(200):
        await (await b.acquire("hook")).release()
    # One read per 0.25 s at most (plus the first).
    assert len(calls) <= 1 + (time.monotonic() - started) / 0.25
    assert calls and set(calls) == {"cooldown"}
