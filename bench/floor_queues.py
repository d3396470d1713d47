"""Work queues that hold the claim, for ``queued_floor.py --delivery queue`` (DESIGN.md §7,
"Delivery"): the queue, not the store, records which documents a worker holds and until when.

Per connector: a list of ids waiting, an in-flight set of ids scored by a deadline, a set of
every id queued or in flight (a document is queued at most once at a time: a push skips an id
already there), and a set of in-flight ids that changed while they were held (a push of an id
in flight marks it, and its acknowledgement queues it again instead of dropping it).

- ``claim(n, lease)``: take up to ``n`` ids off the list into the in-flight set, deadline now +
  ``lease``, in one atomic step; return them.
- ``renew(ids, lease)``: move the deadline of those still in flight; return how many were.
- ``ack(done, again)``: drop ``done`` from the in-flight set (queued again if marked changed)
  and queue ``again`` (ids whose finish found other content in the store). An id no longer in
  flight (swept, so queued again) is left alone.
- ``sweep(limit)``: return the in-flight ids whose deadline passed to the list.

:class:`RedisClaimQueue` does each step as one Lua script, deadlines from the server's clock
(``TIME``), so that several instances agree; :class:`MemoryClaimQueue` is the same in process.
Only the floor uses them: they are a measurement, not syncd's queue.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, cast

import orjson
import redis.asyncio as aioredis


class MemoryClaimQueue:
    """The claim in process (``memory://``): a deque, dicts and a heap of deadlines."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._waiting: deque[str] = deque()
        self._queued: set[str] = set()
        self._changed: set[str] = set()
        self._deadline: dict[str, float] = {}
        self._heap: list[tuple[float, int]] = []  # (deadline, batch number), one per batch
        self._batches: dict[int, list[str]] = {}
        self._next = 0

    def push(self, ids: Iterable[str]) -> int:
        """Queue the ids not already queued or in flight (marking the in-flight ones changed);
        return how many were queued."""
        fresh = 0
        for ext in ids:
            if ext not in self._queued:
                self._queued.add(ext)
                self._waiting.append(ext)
                fresh += 1
            elif ext in self._deadline:
                self._changed.add(ext)
        return fresh

    def claim(self, n: int, lease: float) -> list[str]:
        """Up to ``n`` ids moved from the list into the in-flight set until now + ``lease``."""
        waiting = self._waiting
        taken = [waiting.popleft() for _ in range(min(n, len(waiting)))]
        if taken:
            deadline = self._clock() + lease
            for ext in taken:
                self._deadline[ext] = deadline
            self._schedule(deadline, taken)
        return taken

    def _schedule(self, deadline: float, ids: list[str]) -> None:
        self._next += 1
        heapq.heappush(self._heap, (deadline, self._next))
        self._batches[self._next] = ids

    def renew(self, ids: Iterable[str], lease: float) -> int:
        """Move the deadline of the ids still in flight; return how many were."""
        held = [ext for ext in ids if ext in self._deadline]
        if held:
            deadline = self._clock() + lease
            for ext in held:
                self._deadline[ext] = deadline
            self._schedule(deadline, held)
        return len(held)

    def ack(self, done: Iterable[str], again: Iterable[str] = ()) -> int:
        """Finish ``done`` (queued again if it changed meanwhile) and queue ``again``; return
        how many were queued again."""
        requeued = 0
        for ext in done:
            if self._deadline.pop(ext, None) is None:
                continue  # swept: it is queued again already
            if ext in self._changed:
                self._changed.discard(ext)
                self._waiting.append(ext)
                requeued += 1
            else:
                self._queued.discard(ext)
        for ext in again:
            if self._deadline.pop(ext, None) is not None:
                self._changed.discard(ext)
                self._waiting.append(ext)
                requeued += 1
        return requeued

    def sweep(self, limit: int = 1000) -> int:
        """Return up to ``limit`` in-flight ids whose deadline passed to the list."""
        now, moved, heap = self._clock(), 0, self._heap
        while heap and heap[0][0] <= now and moved < limit:
            deadline, batch = heapq.heappop(heap)
            for ext in self._batches.pop(batch):
                # an entry of a renewed or finished id is stale: its deadline moved or is gone
                if self._deadline.get(ext) == deadline:
                    del self._deadline[ext]
                    self._changed.discard(ext)
                    self._waiting.append(ext)
                    moved += 1
        return moved

    def idle(self) -> bool:
        """Nothing waiting and nothing in flight."""
        return not self._waiting and not self._deadline

    def sizes(self) -> dict[str, int]:
        """Entries left in each structure (all zero once every document was finished)."""
        return {
            "waiting": len(self._waiting),
            "in flight": len(self._deadline),
            "queued": len(self._queued),
            "changed": len(self._changed),
        }


# Lists of ids travel as one JSON argument: redis-py packs each argument in Python, which cost
# more client CPU per document than the scripts' decoding does.
# KEYS: waiting list, in-flight sorted set, queued set, changed set. ARGV: ids (JSON).
PUSH = """
local ids = cjson.decode(ARGV[1])
local known = redis.call('SMISMEMBER', KEYS[3], unpack(ids))
local fresh, held, seen = {}, {}, {}
for i, id in ipairs(ids) do
    if known[i] == 0 and not seen[id] then
        seen[id] = true
        fresh[#fresh + 1] = id
    elseif known[i] == 1 then
        held[#held + 1] = id
    end
end
if #fresh > 0 then
    redis.call('SADD', KEYS[3], unpack(fresh))
    redis.call('RPUSH', KEYS[1], unpack(fresh))
end
if #held > 0 then
    local scores = redis.call('ZMSCORE', KEYS[2], unpack(held))
    for i, id in ipairs(held) do
        if scores[i] then redis.call('SADD', KEYS[4], id) end
    end
end
return #fresh
"""
# KEYS: waiting list, in-flight sorted set. ARGV: n, lease in ms.
CLAIM = """
local ids = redis.call('LPOP', KEYS[1], ARGV[1])
if not ids then return {} end
local t = redis.call('TIME')
local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2])
local args = {}
for i, id in ipairs(ids) do
    args[2 * i - 1] = deadline
    args[2 * i] = id
end
redis.call('ZADD', KEYS[2], unpack(args))
return ids
"""
# KEYS: in-flight sorted set. ARGV: lease in ms, ids.
RENEW = """
local t = redis.call('TIME')
local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
local args = {}
for i = 2, #ARGV do
    args[#args + 1] = deadline
    args[#args + 1] = ARGV[i]
end
if #args == 0 then return 0 end
return redis.call('ZADD', KEYS[1], 'XX', 'CH', unpack(args))
"""
# KEYS: waiting list, in-flight sorted set, queued set, changed set.
# ARGV: the done ids, then the ids to queue again (JSON: one list of both, and how many are done).
ACK = """
local ids = cjson.decode(ARGV[1])
local done = tonumber(ARGV[2])
if #ids == 0 then return 0 end
local scores = redis.call('ZMSCORE', KEYS[2], unpack(ids))
local held, drop, again = {}, {}, {}
local changed = redis.call('SCARD', KEYS[4]) > 0
for i, id in ipairs(ids) do
    if scores[i] then
        held[#held + 1] = id
        if i > done or (changed and redis.call('SREM', KEYS[4], id) == 1) then
            again[#again + 1] = id
        else
            drop[#drop + 1] = id
        end
    end
end
if #held > 0 then redis.call('ZREM', KEYS[2], unpack(held)) end
if #drop > 0 then redis.call('SREM', KEYS[3], unpack(drop)) end
if #again > 0 then redis.call('RPUSH', KEYS[1], unpack(again)) end
return #again
"""
# KEYS: waiting list, in-flight sorted set, changed set. ARGV: limit.
SWEEP = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ids = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, ARGV[1])
if #ids == 0 then return 0 end
redis.call('ZREM', KEYS[2], unpack(ids))
redis.call('SREM', KEYS[3], unpack(ids))
redis.call('RPUSH', KEYS[1], unpack(ids))
return #ids
"""
# KEYS: waiting list, in-flight sorted set.
IDLE = "return redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2])"


class RedisClaimQueue:
    """The claim in Redis: each step one Lua script on one connector's four keys."""

    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self._client = client
        self.keys = [f"{prefix}:{name}" for name in ("waiting", "inflight", "queued", "changed")]
        self._push = client.register_script(PUSH)
        self._claim = client.register_script(CLAIM)
        self._renew = client.register_script(RENEW)
        self._ack = client.register_script(ACK)
        self._sweep = client.register_script(SWEEP)
        self._idle = client.register_script(IDLE)

    async def push(self, ids: list[str]) -> int:
        """As :meth:`MemoryClaimQueue.push`."""
        return int(await self._push(keys=self.keys, args=[orjson.dumps(ids)]))

    async def claim(self, n: int, lease: float) -> list[str]:
        """As :meth:`MemoryClaimQueue.claim` (``lease`` in seconds)."""
        ids = cast(list[bytes], await self._claim(keys=self.keys[:2], args=[n, int(lease * 1000)]))
        return [i.decode() for i in ids]

    async def renew(self, ids: list[str], lease: float) -> int:
        """As :meth:`MemoryClaimQueue.renew`."""
        return int(await self._renew(keys=self.keys[1:2], args=[int(lease * 1000), *ids]))

    async def ack(self, done: list[str], again: list[str] = []) -> int:  # noqa: B006
        """As :meth:`MemoryClaimQueue.ack`."""
        both = orjson.dumps([*done, *again])
        return int(await self._ack(keys=self.keys, args=[both, len(done)]))

    async def sweep(self, limit: int = 1000) -> int:
        """As :meth:`MemoryClaimQueue.sweep`."""
        keys = [self.keys[0], self.keys[1], self.keys[3]]
        return int(await self._sweep(keys=keys, args=[limit]))

    async def idle(self) -> bool:
        """As :meth:`MemoryClaimQueue.idle`."""
        return int(await self._idle(keys=self.keys[:2])) == 0

    async def sizes(self) -> dict[str, int]:
        """As :meth:`MemoryClaimQueue.sizes`."""
        waiting, inflight, queued, changed = self.keys
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.llen(waiting)
            pipe.zcard(inflight)
            pipe.scard(queued)
            pipe.scard(changed)
            counts = await pipe.execute()
        names = ("waiting", "in flight", "queued", "changed")
        return dict(zip(names, map(int, counts), strict=True))

    async def delete(self) -> None:
        """Remove the four keys."""
        await self._client.delete(*self.keys)


async def self_check(queue: MemoryClaimQueue | RedisClaimQueue) -> None:
    """The rules the floor relies on, on an empty ``queue`` (about 0.2 s): a document queued
    at most once, a claim moving a batch in flight, an id pushed while in flight queued again
    on its acknowledgement, renewal moving a deadline, the sweep returning expired entries."""

    async def call(name: str, *args: Any) -> Any:
        out = getattr(queue, name)(*args)
        return await out if inspect.isawaitable(out) else out

    def expect(what: str, got: object, want: object) -> None:
        if got != want:
            raise SystemExit(f"{type(queue).__name__} self-check: {what}: {got!r}, not {want!r}")

    expect("push", await call("push", ["a", "b", "a"]), 2)
    expect("push again", await call("push", ["a", "b", "c"]), 1)
    expect("claim", await call("claim", 2, 0.15), ["a", "b"])
    expect("push in flight", await call("push", ["a"]), 0)
    expect("ack", await call("ack", ["a", "b"], []), 1)  # a changed while held: queued again
    expect("claim after ack", await call("claim", 5, 0.15), ["c", "a"])
    await asyncio.sleep(0.1)
    expect("renew", await call("renew", ["c"], 0.15), 1)
    await asyncio.sleep(0.1)
    expect("sweep", await call("sweep"), 1)  # a expired, c renewed
    expect("ack of a swept id", await call("ack", ["a"], []), 0)
    expect("claim swept", await call("claim", 5, 0.15), ["a"])
    expect("ack again", await call("ack", ["c"], ["a"]), 1)  # a: finish found other content
    expect("claim requeued", await call("claim", 5, 0.15), ["a"])
    expect("ack last", await call("ack", ["a"], []), 0)
    expect("idle", await call("idle"), True)
    expect("sizes", await call("sizes"), {"waiting": 0, "in flight": 0, "queued": 0, "changed": 0})
