"""``syncd validate --connect``: after the offline checks, reach the connector's indexer
target the way the daemon would, without writing to it.

The indexer kind's :data:`~syncd.indexers.base.IndexerCheck` runs with the transport a daemon on
this configuration builds (:func:`~syncd.daemon.transport.daemon_transport`: the same
timeouts, retries, private-address guard and rate-limit waits; per-host budgets are left
out, one request has nothing to share), so it refuses nothing the daemon would allow.
``${env:}``/``${file:}`` references are resolved as the daemon resolves them, from this
process's environment and files. Every line printed is redacted: the kind's secrets are
registered before the check runs, and what the check resolves is registered as it goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from syncd.config.loader import Config
from syncd.indexers.base import IndexerContext
from syncd.observability.logs import configure_logging, describe_error, redact
from syncd.plugins import Registry

__all__ = ["reach_indexer"]


async def reach_indexer(
    config: Config, kinds: Registry, indexer: Mapping[str, Any], *, stderr: TextIO
) -> tuple[list[str], list[str]]:
    """Run the indexer kind's check: ``(problems, notes)``, each a line to print (already
    redacted). No problem and a note: the target was reached, or there is nothing to reach."""
    from syncd.daemon.transport import daemon_transport
    from syncd.models import new_id

    kind = kinds.indexer(indexer)
    if kind.check is None:
        return [], [f"indexer: the {kind.name} indexer has no connection check: nothing reached"]
    # The driver's and the transport's log lines (retries) go to stderr, errors only: stdout
    # carries the answer.
    configure_logging("error", stream=stderr)
    kinds.register_secrets({}, indexer)

    def retrying(exc: BaseException, attempt: int) -> None:
        # The daemon's retry budget is kept (a target it would reach after a retry is not
        # refused here); saying so explains the wait.
        stderr.write(redact(f"retry {attempt} of {transport.retries}: {describe_error(exc)}\n"))
        stderr.flush()

    transport = daemon_transport(config, on_retry=retrying)
    async with transport:
        # A file is not a stored connector yet: the check gets a fresh id, as a create would.
        try:
            problems = await kind.check(indexer, IndexerContext(new_id(), transport))
        except Exception as exc:  # a plugin's check that raised instead of reporting
            problems = [f"the {kind.name} check failed: {describe_error(exc)}"]
    if problems:
        return [redact(f"indexer: {problem}") for problem in problems], []
    return [], [f"indexer: {kind.name} target reached, no problem found"]
