"""The HTTP transport a daemon builds from its configuration: one place, so that whatever
else reaches a target for it (``syncd validate --connect``) sends what the daemon would."""

from __future__ import annotations

from syncd.config.loader import Config
from syncd.http.budget import HostBudgets
from syncd.http.transport import OnRetry, Timeouts, Transport, resolve_timeouts

__all__ = ["daemon_transport"]


def daemon_transport(
    config: Config, *, budgets: HostBudgets | None = None, on_retry: OnRetry | None = None
) -> Transport:
    """The transport of a daemon running ``config`` (not yet open): its timeouts (the
    environment over ``[http]``), retries, private-address guard and rate-limit waits, with
    ``budgets`` (opened and closed by the caller) as its per-host budgets."""
    http = config.http
    return Transport(
        timeouts=resolve_timeouts(None, config=Timeouts(http.timeout_read, http.timeout_connect)),
        on_retry=on_retry,
        block_private_addresses=http.block_private_addresses,
        budgets=budgets,
        max_rate_limit_wait=http.max_rate_limit_wait_seconds,
    )
