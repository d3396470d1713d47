"""syncd: keeps cursor-paginated sources in sync with an indexer.

The public API: the paginator layer (``AsyncCursorPaginator``, ``CancelToken``, ``Page`` and
the errors), and for embedding, ``Daemon`` and ``Config`` (imported lazily so that using the
paginator alone does not load the daemon).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from syncd.errors import (
    Aborted,
    ClientConnectionError,
    ClientError,
    ClientTimeoutError,
    Conflict,
    HTTPStatusError,
    NotFound,
    PaginationLoopError,
    ServerError,
    SyncdError,
    ValidationError,
)
from syncd.models import Document, Page

if TYPE_CHECKING:
    from syncd.config.loader import Config
    from syncd.daemon.core import Daemon
    from syncd.http.paginator import AsyncCursorPaginator, CancelToken

from syncd.version import VERSION

__all__ = [
    "Aborted",
    "AsyncCursorPaginator",
    "CancelToken",
    "ClientConnectionError",
    "ClientError",
    "ClientTimeoutError",
    "Config",
    "Conflict",
    "Daemon",
    "Document",
    "HTTPStatusError",
    "NotFound",
    "Page",
    "PaginationLoopError",
    "ServerError",
    "SyncdError",
    "ValidationError",
]

__version__ = VERSION  # written in syncd/version.py


def __getattr__(name: str) -> Any:
    if name in ("AsyncCursorPaginator", "CancelToken"):
        from syncd.http import paginator

        return getattr(paginator, name)
    if name == "Daemon":
        from syncd.daemon.core import Daemon

        return Daemon
    if name == "Config":
        from syncd.config.loader import Config

        return Config
    raise AttributeError(f"module 'syncd' has no attribute {name!r}")
