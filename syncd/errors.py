"""syncd's exception hierarchy.

Every error syncd raises on purpose derives from :class:`SyncdError`. Driver errors
(aiohttp, asyncpg, redis, sqlite3) are translated into these at the backend boundary so
that layers above never import a driver to catch its exceptions.
"""

from __future__ import annotations

from datetime import datetime


class SyncdError(Exception):
    """Base class of every syncd error."""


# --- fetch layer (DESIGN.md §6) -------------------------------------------------------


class HTTPStatusError(SyncdError):
    """A source answered with an HTTP error status.

    ``status`` is the HTTP status code; ``retry_after`` is the server's ``Retry-After``
    in seconds (already parsed, not clamped) or ``None``.
    """

    def __init__(
        self, status: int, message: str | None = None, *, retry_after: float | None = None
    ) -> None:
        self.status = status
        self.retry_after = retry_after
        self.message = message if message is not None else f"HTTP {status}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.status!r}, {self.message!r}, "
            f"retry_after={self.retry_after!r})"
        )


class ServerError(HTTPStatusError):
    """A 5xx answer, or a dropped connection / truncated body (reported as 503)."""


class ClientError(HTTPStatusError):
    """A 4xx answer other than those the caller chose to retry (429 carries ``retry_after``)."""


class RateLimitError(ClientError):
    """A rate-limit refusal (429, or 403 with no quota left) the transport did not, or no
    longer, wait out: its reset lies beyond ``http.max_rate_limit_wait_seconds``, the request
    may not be sent again (not idempotent), or it was still refused after the rate-limit
    waits a request is allowed. ``until`` is the announced end of the limit (UTC), or
    ``None``. The message names it."""

    def __init__(
        self,
        status: int,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        until: datetime | None = None,
    ) -> None:
        super().__init__(status, message, retry_after=retry_after)
        self.until = until


class ClientTimeoutError(SyncdError):
    """A connect or read timeout."""


class ClientConnectionError(SyncdError):
    """The source could not be reached (connection refused, name not resolved)."""


class Aborted(SyncdError):
    """The run's cancel token was set; raised before the next page request."""

    def __init__(self, message: str = "Aborted") -> None:
        super().__init__(message)


class PaginationLoopError(SyncdError):
    """A source returned a cursor it had already returned: the crawl would never end."""


class SourceError(SyncdError):
    """A source's answer or configuration cannot be used (bad JSON, missing records path,
    unresolvable secret reference, ...)."""


# --- configuration --------------------------------------------------------------------


class ConfigError(SyncdError):
    """Invalid configuration. ``key`` names the offending key (e.g. ``store.url``)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


# --- backends -------------------------------------------------------------------------


class BackendError(SyncdError):
    """A store or queue backend failed (lost connection, timeout, driver error)."""


class StoreError(BackendError):
    """The state store failed."""


class QueueError(BackendError):
    """The work queue failed."""


class StoreUnavailable(StoreError):
    """The store cannot be reached now: the connection was refused or lost, the server is
    starting or shutting down, or (SQLite) the file stayed locked beyond ``busy_timeout`` or is
    read-only. The same call may succeed later; syncd waits such outages out (bounded by
    ``[sync] outage_seconds``) instead of failing the work."""


class QueueUnavailable(QueueError):
    """The queue cannot be reached now (connection refused, lost or timed out, a server still
    loading its data). The same call may succeed later (see :class:`StoreUnavailable`)."""


class OutageTooLong(BackendError):
    """A store or queue stayed unavailable longer than ``[sync] outage_seconds``; the message
    names the backend, the budget and the last error."""


class NameConflict(SyncdError):
    """A connector with this name already exists."""


# --- domain operations ----------------------------------------------------------------


class NotFound(SyncdError):
    """The connector (or document) does not exist."""

    def __init__(self, message: str = "Connector not found") -> None:
        super().__init__(message)


class Conflict(SyncdError):
    """An operation is refused by the connector's current state (HTTP 409).

    ``message`` is the exact user-facing text of DESIGN.md §3; ``extra`` carries fields
    the API adds to the body (e.g. the running ``run_id``).
    """

    def __init__(self, message: str, **extra: object) -> None:
        self.message = message
        self.extra = extra
        super().__init__(message)


class Fenced(SyncdError):
    """A run tried to write after it stopped being the connector's current run."""


class ValidationError(SyncdError):
    """Input failed validation. ``errors`` maps a field path to its message (HTTP 422)."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


TRANSIENT_STATUSES = frozenset({408, 429})
"""HTTP statuses below 500 worth trying again later (timeout, rate limit)."""


def is_transient(exc: BaseException) -> bool:
    """Whether trying again later may succeed (DESIGN.md §7, the documents' retries): a
    timeout, a lost or refused connection, an HTTP 408, 429 or 5xx answer, or an error that
    says so itself (``transient = True``, as a plugin indexer may set). A 4xx other than 408
    and 429, a refusal of the data, or any other error is not."""
    flag = getattr(exc, "transient", None)
    if isinstance(flag, bool):
        return flag
    if isinstance(exc, TimeoutError | ClientTimeoutError | ClientConnectionError | OSError):
        return True
    status = getattr(exc, "status", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status in TRANSIENT_STATUSES or 500 <= status <= 599
    return False
