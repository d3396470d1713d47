"""The fetch layer: HTTP transport, Retry-After parsing and the cursor paginator."""

from syncd.http.paginator import AsyncCursorPaginator, CancelToken, FetchPage
from syncd.http.retry_after import MAX_RETRY_AFTER, clamp_retry_after, parse_retry_after
from syncd.http.timeouts import Timeouts, resolve_timeouts
from syncd.http.transport import Response, Transport, safe_url

__all__ = [
    "MAX_RETRY_AFTER",
    "AsyncCursorPaginator",
    "CancelToken",
    "FetchPage",
    "Response",
    "Timeouts",
    "Transport",
    "clamp_retry_after",
    "parse_retry_after",
    "resolve_timeouts",
    "safe_url",
]
