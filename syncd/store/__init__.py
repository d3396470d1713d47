"""State stores: the protocol and a URL-based factory.

Backends are imported lazily so that a SQLite user never needs asyncpg importable: it comes
with the ``syncd[postgres]`` extra, and its absence is a configuration error naming it.
"""

from __future__ import annotations

from typing import Any

from syncd.errors import ConfigError
from syncd.store.base import Store

__all__ = ["Store", "open_store"]


def open_store(url: str, **options: Any) -> Store:
    """Build (not yet open) the store for ``url``: ``sqlite:///relative.db``,
    ``sqlite:////absolute.db`` or ``postgresql://…``. ``options`` go to the backend."""
    if url.startswith("sqlite://"):
        from syncd.store.sqlite import SQLiteStore

        return SQLiteStore.from_url(url, **options)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from syncd.store.postgres import PostgresStore
        except ImportError as exc:
            if exc.name is None or exc.name.partition(".")[0] != "asyncpg":
                raise
            raise ConfigError(
                "store.url", "PostgreSQL needs the asyncpg driver: pip install 'syncd[postgres]'"
            ) from None
        return PostgresStore(url, **options)
    raise ConfigError(
        "store.url",
        f"unsupported scheme in {url.split('://')[0]!r}: expected sqlite:// or postgresql://",
    )
