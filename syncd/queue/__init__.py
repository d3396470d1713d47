"""Work queues: the protocol and a URL-based factory (backends imported lazily)."""

from __future__ import annotations

from typing import Any

from syncd.errors import ConfigError
from syncd.queue.base import Batch, WorkQueue

__all__ = ["Batch", "WorkQueue", "open_queue"]


def open_queue(url: str, **options: Any) -> WorkQueue:
    """Build (not yet open) the queue for ``url``: ``memory://`` or ``redis://…``."""
    if url.startswith("memory://"):
        from syncd.queue.memory import MemoryQueue

        return MemoryQueue()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from syncd.queue.redis import RedisQueue

        return RedisQueue(url, **options)
    raise ConfigError(
        "queue.url",
        f"unsupported scheme in {url.split('://')[0]!r}: expected memory:// or redis://",
    )
