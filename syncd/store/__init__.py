"""State stores: the protocol and a URL-based factory.

Backends are imported lazily so that a SQLite user never needs asyncpg importable.
"""

from __future__ import annotations

from typing import Any

from syncd.errors import ConfigError
from syncd.store.base import Change, Store

__all__ = ["Change", "Store", "open_store"]


def open_store(url: str, **options: Any) -> Store:
    """Build (not yet open) the store for ``url``: ``sqlite:///relative.db``,
    ``sqlite:////absolute.db`` or ``postgresql://…``. ``options`` go to the backend."""
    if url.startswith("sqlite://"):
        from syncd.store.sqlite import SQLiteStore

        return SQLiteStore.from_url(url, **options)
    if url.startswith(("postgresql://", "postgres://")):
        from syncd.store.postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ConfigError(
        "store.url",
        f"unsupported scheme in {url.split('://')[0]!r}: expected sqlite:// or postgresql://",
    )
