"""Crawled documents: which ones a page writes and enqueues (DESIGN.md §4, §7)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime, timedelta

from syncd.models import ABORTED_ERROR, DocOp, DocStatus, DocumentInput

# --- crawled documents: which ones a page writes and enqueues (DESIGN.md §4, §7) ---------
#
# The one statement of this rule. The SQLite store applies plan_page; the PostgreSQL store's
# page upsert (store/postgres/sql.py UPSERT_DOCUMENTS) evaluates must_write in SQL, with
# REQUEUE_STATUS and REQUEUE_ERROR passed as parameters.

REQUEUE_STATUS = DocStatus.FAILED
REQUEUE_ERROR = ABORTED_ERROR
"""A stored document in ``REQUEUE_STATUS`` with ``REQUEUE_ERROR`` was failed by an abort, not
by its indexer: a crawl writes and enqueues it again even when its content is unchanged."""


@dataclass(frozen=True)
class ExistingDocument:
    """What the rule needs to know about a stored document."""

    content_hash: str
    status: DocStatus
    error: str | None
    op: DocOp = DocOp.INDEX


def must_write(existing: ExistingDocument | None, content_hash: str) -> bool:
    """Whether a crawled document with ``content_hash`` is written (``pending`` with ``op =
    index``, attempts and error reset) and enqueued: when it is new, when its content hash
    changed, when it was failed by an abort, or when it is deleted or being deleted (it
    reappeared at the source). Any other stored document is left as it is: an unchanged
    indexed, pending, running or failed document is not enqueued again."""
    return (
        existing is None
        or existing.content_hash != content_hash
        or (existing.status is REQUEUE_STATUS and existing.error == REQUEUE_ERROR)
        or existing.status is DocStatus.DELETED
        or existing.op is DocOp.DELETE
    )


def plan_page(
    documents: Sequence[DocumentInput], existing: Mapping[str, ExistingDocument]
) -> list[DocumentInput]:
    """The documents of a page that :func:`must_write`, in page order.

    Duplicate external ids within the page: the last one wins (at the first occurrence's
    position). ``existing`` maps the page's external ids that are already stored.
    """
    latest: dict[str, DocumentInput] = {}
    for doc in documents:
        latest[doc.external_id] = doc
    return [
        doc
        for external_id, doc in latest.items()
        if must_write(existing.get(external_id), doc.content_hash)
    ]


# --- indexing failures retried (DESIGN.md §7) ----------------------------------------------

RETRY_WAIT_MAX = timedelta(minutes=10)
"""Longest wait before a document's next attempt."""


@dataclass(frozen=True)
class Retry:
    """A document whose transient failure is tried again: back to ``pending`` with its
    error, not claimed before ``not_before``."""

    external_id: str
    error: str
    not_before: datetime


def split_retries(
    results: Sequence[tuple[str, DocStatus, str | None]],
    transient: Set[str],
    attempts: Mapping[str, int],
    *,
    max_attempts: int,
    backoff: float,
    now: datetime,
) -> tuple[list[tuple[str, DocStatus, str | None]], list[Retry]]:
    """The results to record as they are, and the failures to try again.

    A failure is tried again when it was transient (a timeout, a lost connection, a 408, 429
    or 5xx: :func:`syncd.errors.is_transient`) and the document has been tried fewer than
    ``max_attempts`` times (``attempts`` counts the claims, this one included); the wait
    before attempt n + 1 is ``backoff * 2**(n - 1)`` seconds, at most
    :data:`RETRY_WAIT_MAX`. Any other failure, and the last attempt's, stays ``failed``: the
    dead letters, re-queued by ``retry-failed``."""
    final: list[tuple[str, DocStatus, str | None]] = []
    retries: list[Retry] = []
    for result in results:
        external_id, status, error = result
        tried = attempts.get(external_id, max_attempts)
        if status is DocStatus.FAILED and external_id in transient and tried < max_attempts:
            wait = min(RETRY_WAIT_MAX, timedelta(seconds=backoff * 2.0 ** min(tried - 1, 32)))
            reason = (error or "Indexing failed")[:440]
            message = f"{reason} (attempt {tried} of {max_attempts}; retrying)"
            retries.append(Retry(external_id, message, now + wait))
        else:
            final.append(result)
    return final, retries
