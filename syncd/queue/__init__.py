"""Work queues: the protocol and a URL-based factory.

Backends are imported lazily so that an in-process queue never needs redis importable: it
comes with the ``syncd[redis]`` extra, and its absence is a configuration error naming it.
"""

from __future__ import annotations

from typing import Any

from syncd.errors import ConfigError
from syncd.queue.base import WorkQueue

__all__ = ["WorkQueue", "open_queue"]


def open_queue(url: str, **options: Any) -> WorkQueue:
    """Build (not yet open) the queue for ``url``: ``memory://`` or ``redis://…``."""
    if url.startswith("memory://"):
        from syncd.queue.memory import MemoryQueue

        return MemoryQueue()
    if url.startswith(("redis://", "rediss://", "unix://")):
        try:
            from syncd.queue.redis import RedisQueue
        except ImportError as exc:
            if exc.name is None or exc.name.partition(".")[0] != "redis":
                raise
            raise ConfigError(
                "queue.url", "Redis needs the redis driver: pip install 'syncd[redis]'"
            ) from None
        return RedisQueue(url, **options)
    raise ConfigError(
        "queue.url",
        f"unsupported scheme in {url.split('://')[0]!r}: expected memory:// or redis://",
    )
