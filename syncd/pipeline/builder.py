"""Building a connector's source and its paginator the way a run does, for a run and for a
preview.

The source gets the shared transport, the state it starts from (a fresh crawl, the resumed
one, or a full crawl), its secret state (a rotated refresh token) and, for a stored
connector, a way to save it; the connector's secrets are registered for masking first, and a
plugin's blocking ``fetch_page`` is moved to a worker thread. The paginator
(:func:`paginator_for`) pages through it with the connector's four paginator keys.
"""

from __future__ import annotations

from collections.abc import Callable

from syncd import rules
from syncd.http.paginator import AsyncCursorPaginator, CancelToken, FetchPage, OnRetry, OnWait
from syncd.http.transport import Transport
from syncd.models import Connector, CrawlWindow, WaitReason
from syncd.plugins import Registry
from syncd.sources.base import Source, SourceContext
from syncd.sources.threaded import as_async
from syncd.store.base import Store


class SourceBuilder:
    """Builds the sources of this instance's connectors."""

    def __init__(self, *, store: Store, transport: Transport, registry: Registry) -> None:
        self._store = store
        self._transport = transport
        self._registry = registry

    def build(
        self,
        connector: Connector,
        *,
        resuming: bool,
        full: bool = False,
        window: CrawlWindow | None = None,
        persist: bool = True,
        on_wait: Callable[[WaitReason, float], None] | None = None,
    ) -> Source:
        """The connector's source, built as a run builds it. ``full``: a fresh crawl starts
        without the completed mark (a full crawl, a backfill); ``window``: a backfill's.
        ``persist``: what the source must keep across restarts (a rotated refresh token) is
        saved in the store — false for a connector that is not stored (the preview of a body).
        ``on_wait`` is told of each wait of the source (a rate limit, a retry)."""
        kind = self._registry.source(connector.source)
        cid = connector.id
        context = SourceContext(
            connector_id=cid,
            transport=self._transport,
            state=rules.start_state(connector, resuming=resuming, full=full),
            resuming=resuming,
            window=window,
            on_wait=on_wait,
            secret_state=connector.secret_state,
            save_secret_state=(
                (lambda key, value: self._store.save_secret_state(cid, key, value))
                if persist
                else None
            ),
        )
        # Plugin sources do not register their secrets themselves.
        self._registry.register_secrets(connector.source, connector.indexer)
        # A plugin's plain ``def fetch_page`` (a blocking SDK) runs in a worker thread.
        return as_async(kind.factory(connector.source, context))


def paginator_for(
    connector: Connector,
    fetch_page: FetchPage,
    *,
    cancel_token: CancelToken,
    start_cursor: str | None = None,
    on_wait: OnWait | None = None,
    on_retry: OnRetry | None = None,
) -> AsyncCursorPaginator:
    """The paginator over ``fetch_page`` (the connector's source's, or a run's guard of it)
    with the connector's paginator keys: page retries and their backoff, the statuses
    retried, the throttle. ``cancel_token`` ends it, whether it fetches or sleeps;
    ``on_wait`` and ``on_retry`` are told of each wait and each retried page."""
    return AsyncCursorPaginator(
        fetch_page,
        max_retries=connector.page_retries,
        backoff_factor=connector.page_retry_backoff,
        retry_on_status=tuple(connector.retry_on_status),
        throttle_seconds=connector.throttle_seconds,
        cancel_token=cancel_token,
        start_cursor=start_cursor,
        on_wait=on_wait,
        on_retry=on_retry,
    )
