"""A synchronous source plugin: ``fetch_page`` is a plain ``def`` over a blocking SDK.

syncd runs such a ``fetch_page`` in a worker thread (DESIGN.md §8), so a plugin can wrap a
vendor SDK's blocking paginator as it is. :class:`Catalogue` stands in for that SDK: its
``list_items`` blocks (``time.sleep``, and a :class:`threading.Event` a test may hold
closed), as a slow HTTP call would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from syncd.models import Page
from syncd.sources.base import SourceContext, SourceFactory


class Catalogue:
    """A fake vendor SDK client with a blocking, token-paginated ``list_items``.

    ``items`` may be changed between runs. ``hold_page`` is the page (from 0) whose call
    blocks until ``release`` is set; ``entered`` is set when that call starts blocking and
    ``returned`` when it has returned anyway.
    """

    def __init__(self, items: list[dict[str, Any]], *, page_size: int = 2, delay: float = 0.0):
        self.items = items
        self.page_size = page_size
        self.delay = delay
        self.hold_page: int | None = None
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()
        self.threads: set[str] = set()

    def list_items(self, page_token: str | None = None) -> dict[str, Any]:
        """One page: ``{"items": [...], "next_page_token": str | None}`` (blocking)."""
        self.threads.add(threading.current_thread().name)
        page = int(page_token or 0)
        time.sleep(self.delay)  # the SDK's network round trip
        if page == self.hold_page:
            self.entered.set()
            self.release.wait()
            self.returned.set()
        start = page * self.page_size
        chunk = [dict(item) for item in self.items[start : start + self.page_size]]
        more = start + self.page_size < len(self.items)
        return {"items": chunk, "next_page_token": str(page + 1) if more else None}


class CatalogueSource:
    """The source plugin: a plain ``def fetch_page``, as a wrapper of a blocking SDK is."""

    def __init__(self, config: Mapping[str, Any], context: SourceContext, client: Catalogue):
        self.client = client

    def fetch_page(self, cursor: str | None) -> Page:
        """One page of the catalogue (run by syncd in a worker thread)."""
        response = self.client.list_items(page_token=cursor)
        return Page(response["items"], response["next_page_token"])


def catalogue_source(client: Catalogue) -> SourceFactory:
    """A factory for ``Daemon.register_source`` whose sources all read ``client``."""

    def factory(config: Mapping[str, Any], context: SourceContext) -> CatalogueSource:
        return CatalogueSource(config, context, client)

    return factory
