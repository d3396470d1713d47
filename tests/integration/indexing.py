"""What the tests of the built-in indexers share: a sync that must succeed, a wait for the
documents to settle, and their statuses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from syncd.daemon import Daemon
from syncd.models import DocStatus, RunOutcome


async def sync(daemon: Daemon, cid: str, timeout: float) -> None:
    """Trigger a run of ``cid`` and wait for it to end; it must have succeeded."""
    await daemon.trigger_sync(cid)
    await asyncio.wait_for(daemon.wait_run(cid), timeout)
    runs, _ = await daemon.list_runs(cid, limit=1)
    assert runs[0].outcome is RunOutcome.SUCCEEDED, runs[0].error


def settled(**expected: int) -> Callable[[dict[DocStatus, int]], bool]:
    """A ``wait_documents`` condition: nothing pending or running, and the counts given
    (by status name)."""

    def done(n: dict[DocStatus, int]) -> bool:
        counts = {str(k): v for k, v in n.items()}
        idle = n[DocStatus.PENDING] == n[DocStatus.RUNNING] == 0
        return idle and all(counts[k] == v for k, v in expected.items())

    return done


async def statuses(daemon: Daemon, cid: str) -> dict[str, tuple[DocStatus, str | None]]:
    """Every document of ``cid``: its status and error."""
    docs, more = await daemon.list_documents(cid, limit=1000)
    assert more is None
    return {d.external_id: (d.status, d.error) for d in docs}
