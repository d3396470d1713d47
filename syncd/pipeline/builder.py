"""Building a connector's source the way a run does, for a run and for a preview.

The source gets the shared transport, the state it starts from (a fresh crawl, the resumed
one, or a full crawl), its secret state (a rotated refresh token) and, for a stored
connector, a way to save it; the connector's secrets are registered for masking first, and a
plugin's blocking ``fetch_page`` is moved to a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable

from syncd import rules
from syncd.http.transport import Transport
from syncd.models import Connector, WaitReason
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
        persist: bool = True,
        on_wait: Callable[[WaitReason, float], None] | None = None,
    ) -> Source:
        """The connector's source, built as a run builds it. ``persist``: what the source
        must keep across restarts (a rotated refresh token) is saved in the store — false for
        a connector that is not stored (the preview of a body). ``on_wait`` is told of each
        wait of the source (a rate limit, a retry)."""
        kind = self._registry.source(connector.source)
        cid = connector.id
        context = SourceContext(
            connector_id=cid,
            transport=self._transport,
            state=rules.start_state(connector, resuming=resuming, full=full),
            resuming=resuming,
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
