"""Running a connector's indexer over one claimed batch of documents (DESIGN.md §7, §11).

Documents to index go to ``index_batch`` in calls of up to the indexer's ``batch_size`` when
it has that method and a ``batch_size`` above 1 (:class:`syncd.indexers.base.BatchIndexer`),
else to ``index`` one by one; documents to delete likewise to ``delete_batch`` or ``delete``,
or, when the kind does not delete, are marked ``deleted`` without a call. Each call — one
document or a batch — is bounded by the index timeout; a call that runs out of it fails its
documents with ``Index timeout``, one that raises fails them with the (redacted) error.

Each document's result is added to a :class:`Tally` as its call ends; the worker records them.
The index latency metric is observed once per document: its own call's duration, or its share
of a batch call's (the duration divided by the documents of the call), so that the metric's
sum stays the time spent indexing and its count the documents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from syncd.errors import is_transient
from syncd.indexers.base import BatchFailures, DeletingIndexer, Indexer, Transient
from syncd.models import DocOp, DocStatus, Document
from syncd.observability.logs import describe_error, redact
from syncd.observability.metrics import Metrics, observer

Result = tuple[str, DocStatus, str | None]
"""A document's outcome: external id, ``indexed``/``deleted``/``failed``, error."""

TIMEOUT_ERROR = "Index timeout"
MAX_ERROR = 500

_One = Callable[[Document], Awaitable[None]]
_Many = Callable[[Sequence[Document]], Awaitable[BatchFailures]]


@dataclass(eq=False)
class Tally:
    """The results of a batch as its calls end, not yet recorded; what failed, for the log."""

    results: list[Result] = field(default_factory=list)
    produced: int = 0
    failed: int = 0
    # The first failure (document, error): logged once per batch.
    first_failure: tuple[str, str | None] | None = None
    # The failed documents whose failure was transient (syncd.errors.is_transient): the
    # worker retries them later, within `[workers] max_attempts`.
    transient: set[str] = field(default_factory=set)


class Deadline:
    """Bounds each of the successive calls of the current task to ``timeout`` seconds with
    one timer for them all, instead of one per call as :func:`asyncio.timeout` would (a timer
    scheduled and cancelled per document is most of the worker's own cost per document).

    The timer fires at the end of the first call's time; it then cancels the task when the
    call in progress has run out of time, or else waits for the end of that call's time.
    Cancellation is told apart from any other (an abort) as :func:`asyncio.timeout` does.
    Use ``start()`` right before the call and ``stop()`` right after it, with nothing
    awaited in between but the call; ``close()`` when done.
    """

    __slots__ = ("_base", "_expired", "_handle", "_loop", "_started", "_task", "_timeout")

    def __init__(self, timeout: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._loop = asyncio.get_running_loop()
        self._timeout = timeout
        self._base = task.cancelling()
        self._started: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expired = False

    def now(self) -> float:
        """The loop's clock."""
        return self._loop.time()

    def start(self) -> float:
        """A call starts: its start time."""
        now = self._loop.time()
        self._started = now
        if self._handle is None:
            self._handle = self._loop.call_at(now + self._timeout, self._check)
        return now

    def stop(self) -> bool:
        """The call ended: whether it ran out of time (and nothing else cancelled the task).
        Its cancellation is taken back; a second call returns ``False``."""
        self._started = None
        if not self._expired:
            return False
        self._expired = False
        return self._task.uncancel() <= self._base

    def close(self) -> None:
        """No more calls."""
        self._started = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        started = self._started
        if started is None:
            return  # between calls: the next one sets the timer again
        due = started + self._timeout
        if self._loop.time() >= due:
            self._expired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(due, self._check)


def error_text(error: object) -> str:
    """An error as recorded on a document: redacted, at most :data:`MAX_ERROR` characters."""
    if isinstance(error, BaseException):
        # Any exception by its message alone: a document's error says what its indexer said.
        return describe_error(error, plain=(BaseException,))[:MAX_ERROR]
    return redact(str(error) or "Indexing failed")[:MAX_ERROR]


async def run_indexer(
    indexer: Indexer,
    documents: list[Document],
    tally: Tally,
    *,
    deletes: bool,
    timeout: float,
    metrics: Metrics,
    kind: str = "plugin",
) -> None:
    """Index (or delete) ``documents`` through ``indexer``, adding each result to ``tally``.
    ``deletes``: the kind deletes (the indexer has ``delete``); otherwise a document to delete
    is only marked ``deleted``. Run it in a task of its own: cancelling it cancels the call in
    flight. ``kind`` labels the latency metric."""
    run = _BatchCalls(tally, Deadline(timeout), metrics, kind)
    upserts = [d for d in documents if d.op is not DocOp.DELETE]
    removals = (
        [d for d in documents if d.op is DocOp.DELETE] if len(upserts) < len(documents) else []
    )
    # An indexer's own limit per call; without one, a call takes the whole batch. At 1 its
    # batch methods are left aside (the webhook's one-document bodies).
    limit = getattr(indexer, "batch_size", None)
    batches = limit is None or limit > 1
    size = max(1, limit or len(documents))
    many: Any
    try:
        if upserts:
            many = getattr(indexer, "index_batch", None) if batches else None
            if many is not None:
                await run.in_batches(many, upserts, size, DocStatus.INDEXED)
            else:
                await run.one_by_one(indexer.index, upserts, DocStatus.INDEXED)
        if removals and not deletes:
            run.deleted_without_call(removals)
        elif removals:
            many = getattr(indexer, "delete_batch", None) if batches else None
            if many is not None:
                await run.in_batches(many, removals, size, DocStatus.DELETED)
            else:
                # The kind declares it (``supports_delete``): the method is there.
                delete = cast(DeletingIndexer, indexer).delete
                await run.one_by_one(delete, removals, DocStatus.DELETED)
    finally:
        run.deadline.close()


class _BatchCalls:
    """The calls of one batch and their bookkeeping."""

    def __init__(self, tally: Tally, deadline: Deadline, metrics: Metrics, kind: str) -> None:
        self.tally = tally
        self.deadline = deadline
        self._deleted = metrics.documents_deleted
        latency = metrics.index_latency
        self._observe_ok = latency.labels(kind=kind, outcome="indexed").observe
        self._observe_failed = latency.labels(kind=kind, outcome="failed").observe
        # A batch call's documents share one duration: observed once for all of them.
        self._observe_ok_many = observer(latency.labels(kind=kind, outcome="indexed"))
        self._observe_failed_many = observer(latency.labels(kind=kind, outcome="failed"))

    async def one_by_one(self, call: _One, documents: list[Document], done: DocStatus) -> None:
        """One call per document, each bounded by the deadline."""
        tally, deadline = self.tally, self.deadline
        results = tally.results
        observe_ok, observe_failed = self._observe_ok, self._observe_failed
        for doc in documents:
            error: str | None = None
            transient = True  # a timeout, unless the call raised something else
            started = deadline.start()
            try:
                await call(doc)
            except asyncio.CancelledError:
                if not deadline.stop():
                    raise  # an abort, not the deadline
                error = TIMEOUT_ERROR
            except TimeoutError:
                error = TIMEOUT_ERROR
            except Exception as exc:
                error = error_text(exc)
                transient = is_transient(exc)
            deadline.stop()
            elapsed = deadline.now() - started
            if error is None:
                results.append((doc.external_id, done, None))
                observe_ok(elapsed)
                if done is DocStatus.DELETED:
                    self._deleted.inc()
            else:
                results.append((doc.external_id, DocStatus.FAILED, error))
                if transient:
                    tally.transient.add(doc.external_id)
                observe_failed(elapsed)
                tally.failed += 1
                if tally.first_failure is None:
                    tally.first_failure = (doc.external_id, error)
            tally.produced += 1

    async def in_batches(
        self, call: _Many, documents: list[Document], size: int, done: DocStatus
    ) -> None:
        """Calls of up to ``size`` documents, each bounded by the deadline."""
        deadline = self.deadline
        for start in range(0, len(documents), size):
            chunk = documents[start : start + size]
            error: str | None = None
            transient = True  # a timeout, unless the call raised something else
            failures: BatchFailures = None
            started = deadline.start()
            try:
                failures = await call(chunk)
            except asyncio.CancelledError:
                if not deadline.stop():
                    raise  # an abort, not the deadline
                error = TIMEOUT_ERROR
            except TimeoutError:
                error = TIMEOUT_ERROR
            except Exception as exc:
                error = error_text(exc)
                transient = is_transient(exc)
            deadline.stop()
            if failures is not None and not isinstance(failures, Mapping):
                error = f"index_batch returned {type(failures).__name__}, not a mapping"
                transient = False
            self._add(chunk, done, error, failures, deadline.now() - started, transient)

    def _add(
        self,
        chunk: list[Document],
        done: DocStatus,
        error: str | None,
        failures: BatchFailures,
        elapsed: float,
        transient: bool,
    ) -> None:
        """The results of one batch call: ``error`` for all (``transient`` or not), else
        ``failures`` for some (transient when given as :class:`Transient`)."""
        tally = self.tally
        results = tally.results
        share = elapsed / len(chunk)
        ok = 0
        for doc in chunk:
            failure: str | None = error
            again = transient
            if failure is None and failures:
                reason = failures.get(doc.external_id)
                failure = None if reason is None else error_text(reason)
                again = isinstance(reason, Transient)
            if failure is None:
                results.append((doc.external_id, done, None))
                ok += 1
            else:
                results.append((doc.external_id, DocStatus.FAILED, failure))
                if again:
                    tally.transient.add(doc.external_id)
                tally.failed += 1
                if tally.first_failure is None:
                    tally.first_failure = (doc.external_id, failure)
        self._observe_ok_many(share, ok)
        self._observe_failed_many(share, len(chunk) - ok)
        if done is DocStatus.DELETED and ok:
            self._deleted.inc(ok)
        tally.produced += len(chunk)

    def deleted_without_call(self, documents: list[Document]) -> None:
        """Documents to delete whose indexer does not delete: marked ``deleted``."""
        for doc in documents:
            self.tally.results.append((doc.external_id, DocStatus.DELETED, None))
            self._observe_ok(0.0)
        self._deleted.inc(len(documents))
        self.tally.produced += len(documents)
