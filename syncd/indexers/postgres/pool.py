"""asyncpg pools of the indexers that write to PostgreSQL, shared by DSN.

A daemon owns one :class:`PostgresPools` (handed to indexer factories on
:class:`~syncd.indexers.base.IndexerContext`): connectors whose indexers name the same
database share one pool, opened at the first write and closed when the last indexer using it
is closed (its connector deleted or its config changed) or when the daemon stops. asyncpg is
imported only when a pool is opened, so syncd without the ``postgres`` extra never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from syncd.errors import SyncdError

if TYPE_CHECKING:
    import asyncpg

__all__ = ["MISSING_DRIVER", "PostgresPools", "require_asyncpg"]

#: What a connector using a PostgreSQL indexer is told when the driver is not installed.
MISSING_DRIVER = (
    "the {kind} indexer needs the asyncpg driver: install syncd with the postgres extra "
    "(pip install 'syncd[postgres]')"
)
#: Seconds a closing pool waits for its connections to be released before it terminates them.
CLOSE_GRACE_SECONDS = 10.0


def require_asyncpg(kind: str = "postgres") -> None:
    """Raise :class:`~syncd.errors.SyncdError` naming the ``postgres`` extra when asyncpg
    cannot be imported."""
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        raise SyncdError(MISSING_DRIVER.format(kind=kind)) from None


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pool: asyncpg.Pool[Any] | None = None
    users: int = 0


class PostgresPools:
    """Pools by DSN, counted by their users; ``max_size`` connections each (the daemon gives
    its ``[workers] concurrency``: no more calls than that are in flight)."""

    def __init__(self, *, max_size: int = 10) -> None:
        self.max_size = max(1, max_size)
        self._entries: dict[str, _Entry] = {}

    async def acquire(self, dsn: str) -> asyncpg.Pool[Any]:
        """The pool of ``dsn`` (opened now if it is not), counting one more user. Driver and
        network errors propagate (the caller translates them)."""
        import asyncpg

        entry = self._entries.setdefault(dsn, _Entry())
        async with entry.lock:
            if entry.pool is None:
                entry.pool = await asyncpg.create_pool(
                    dsn, min_size=1, max_size=self.max_size, command_timeout=None
                )
            entry.users += 1
            return entry.pool

    async def release(self, dsn: str) -> None:
        """One user fewer of ``dsn``'s pool; the last one closes it (after the calls in
        flight release their connections)."""
        entry = self._entries.get(dsn)
        if entry is None:
            return
        async with entry.lock:
            entry.users -= 1
            if entry.users > 0 or entry.pool is None:
                return
            pool, entry.pool = entry.pool, None
            self._entries.pop(dsn, None)
        await _close(pool)

    async def aclose(self) -> None:
        """Close every pool, whoever still uses it (the daemon stops)."""
        entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            async with entry.lock:
                pool, entry.pool, entry.users = entry.pool, None, 0
            if pool is not None:
                await _close(pool)

    @property
    def open_count(self) -> int:
        """Pools open now."""
        return sum(1 for e in self._entries.values() if e.pool is not None)


async def _close(pool: asyncpg.Pool[Any]) -> None:
    try:
        await asyncio.wait_for(pool.close(), CLOSE_GRACE_SECONDS)
    except TimeoutError:
        pool.terminate()
    except Exception:
        # A connection that broke while closing: the rest are closed regardless.
        with contextlib.suppress(Exception):
            pool.terminate()
