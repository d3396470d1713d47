"""Previews (``POST /connectors/preview``): the first pages of a connector body or of an
existing connector, fetched the way a run would, writing nothing.

:class:`Previewer` builds the connector's source as a run does
(:class:`~syncd.pipeline.builder.SourceBuilder`: the shared transport, its secrets registered
for masking, the state of the last completed crawl), pages through it with the paginator a
run uses (:func:`~syncd.pipeline.builder.paginator_for`: the connector's paginator keys), and
turns each page's records into documents as a run would
(:func:`syncd.rules.records.document_inputs`); for an existing connector it also compares
them with the stored documents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog

from syncd.errors import Aborted, NotFound, ValidationError
from syncd.http.paginator import CancelToken
from syncd.models import (
    Connector,
    DocumentFields,
    DocumentInput,
    PaginatorSettings,
    Rejection,
    new_id,
    utcnow,
)
from syncd.observability.logs import describe_error
from syncd.pipeline.builder import SourceBuilder, paginator_for
from syncd.plugins import Registry
from syncd.rules.records import document_inputs
from syncd.rules.shape import is_costly, shaper
from syncd.schema import spec
from syncd.store.base import Store

log = structlog.get_logger("syncd.service.preview")

PREVIEW_PAGES_MAX = 10
PREVIEW_TIMEOUT_MAX = 60
PREVIEW_FIELDS = ("connector", "connector_id", "pages", "timeout_seconds")


@dataclass(frozen=True)
class PreviewPage:
    """One fetched page: its record count, the external ids of its records, the records
    rejected (index in the page and reason), the cursor of the page after it, why the crawl
    continues or ends there and, on the first page, the configured paths its response lacks
    (for a source that says: the ``http`` source's ``last_page``), and the shape of each
    document, in ``ids`` order, when the connector maps one (``None`` without). For an
    existing connector its ids are also split by how they compare with the stored documents
    (``None`` for a connector body, which has none)."""

    records: int
    ids: tuple[str, ...]
    rejected: tuple[Rejection, ...]
    next_cursor: str | None
    reason: str | None = None
    warnings: tuple[str, ...] = ()
    new: tuple[str, ...] | None = None
    changed: tuple[str, ...] | None = None
    unchanged: tuple[str, ...] | None = None
    documents: tuple[DocumentFields, ...] | None = None


@dataclass(frozen=True)
class Preview:
    """What a preview found: the first request (``method``, ``url``, ``headers``, secrets
    masked; ``None`` for a source that cannot describe it), the pages fetched, and why it
    stopped early, if it did (the source failed, or the time limit), keeping the pages
    fetched before."""

    request: Mapping[str, Any] | None
    pages: tuple[PreviewPage, ...]
    error: str | None = None


class Previewer:
    """The previews of one instance."""

    def __init__(
        self,
        *,
        store: Store,
        sources: SourceBuilder,
        registry: Registry,
        defaults: PaginatorSettings,
    ) -> None:
        self._store = store
        self._sources = sources
        self._registry = registry
        self._defaults = defaults

    async def preview(self, body: Mapping[str, Any]) -> Preview:
        """Fetch the first pages of a connector body (``{"connector": {...}}``) or of an
        existing connector (``{"connector_id": "..."}``) the way a run would (its source, its
        paginator keys, from the start of a fresh crawl), writing nothing.

        ``pages`` (1 to 10, default 1) and ``timeout_seconds`` (1 to 60, default 10) bound it.
        ``ValidationError`` for a bad body, ``NotFound`` for an unknown connector. A source
        that fails, or the time limit, is the preview's result (``Preview.error``), not an
        exception. Cancelling the caller cancels the request in flight.
        """
        pages_max, timeout = _preview_options(body)
        existing = "connector_id" in body
        connector = await self._preview_connector(body)
        id_field = str(connector.source.get("id_field", "id"))
        token = CancelToken()
        # The token, not a cancellation, ends a preview that runs out of time: the paginator
        # turns it into Aborted whether it was fetching or sleeping between retries.
        deadline = asyncio.get_running_loop().call_later(timeout, token.cancel)
        request: Mapping[str, Any] | None = None
        pages: list[PreviewPage] = []
        try:
            # Built as a run builds its source: the shared transport, its secrets
            # registered for masking, the state of the last completed crawl.
            source = self._sources.build(connector, resuming=False, persist=existing)
            describe = getattr(source, "describe_request", None)
            request = describe(None) if callable(describe) else None
            async for page in paginator_for(connector, source.fetch_page, cancel_token=token):
                docs, rejected = document_inputs(page.records, id_field, connector.hash_fields)
                report = getattr(source, "last_page", None)
                found = PreviewPage(
                    len(page.records),
                    tuple(d.external_id for d in docs),
                    tuple(rejected),
                    page.next_cursor,
                    reason=getattr(report, "reason", None),
                    warnings=tuple(getattr(report, "warnings", ())),
                    documents=await _shapes(connector.document, docs),
                )
                if existing:
                    found = await self._compare(connector.id, docs, found)
                pages.append(found)
                if len(pages) >= pages_max:
                    break
        except Aborted:
            return Preview(request, tuple(pages), f"Preview stopped: time limit of {timeout:g} s")
        except Exception as exc:  # any source failure is what the preview found
            log.info("service.preview_failed", connector_id=connector.id, error=str(exc))
            return Preview(request, tuple(pages), describe_error(exc))
        finally:
            deadline.cancel()
        return Preview(request, tuple(pages))

    async def _preview_connector(self, body: Mapping[str, Any]) -> Connector:
        """The connector a preview names, or the one its ``connector`` body would create."""
        if "connector_id" in body:
            connector_id = body["connector_id"]
            if spec.text_problem(connector_id):  # no store holds such an id
                raise NotFound()
            connector = await self._store.get_connector(connector_id)
            if connector is None:
                raise NotFound()
            return connector
        try:
            fields = spec.parse_create(
                body["connector"], defaults=self._defaults, kinds=self._registry
            )
        except ValidationError as exc:
            raise ValidationError(
                {"connector" if k == "body" else f"connector.{k}": v for k, v in exc.errors.items()}
            ) from None
        now = utcnow()
        return Connector(id=f"preview-{new_id()}", created_at=now, updated_at=now, **fields)

    async def _compare(
        self, connector_id: str, docs: list[DocumentInput], page: PreviewPage
    ) -> PreviewPage:
        """``page`` with its ids split into new, changed and unchanged against the store (one
        lookup per id: a preview reads at most ten pages)."""
        new: list[str] = []
        changed: list[str] = []
        unchanged: list[str] = []
        for doc in docs:
            stored = await self._store.get_document(connector_id, doc.external_id)
            if stored is None:
                new.append(doc.external_id)
            elif stored.content_hash == doc.content_hash:
                unchanged.append(doc.external_id)
            else:
                changed.append(doc.external_id)
        return replace(page, new=tuple(new), changed=tuple(changed), unchanged=tuple(unchanged))


async def _shapes(
    mapping: Mapping[str, Any] | None, docs: list[DocumentInput]
) -> tuple[DocumentFields, ...] | None:
    if mapping is None:
        return None
    shape = shaper(mapping)
    if is_costly(mapping):  # HTML to text: off the loop the API shares
        return tuple(await asyncio.to_thread(lambda: [shape(d.payload) for d in docs]))
    return tuple(shape(d.payload) for d in docs)


def _preview_options(body: Mapping[str, Any]) -> tuple[int, float]:
    """``(pages, timeout_seconds)`` of a preview body, after checking its shape."""
    errors: dict[str, str] = {}
    spec.check_unknown(body, PREVIEW_FIELDS, "", errors)
    if ("connector" in body) == ("connector_id" in body):
        errors["body"] = "Give exactly one of 'connector' or 'connector_id'"
    elif "connector_id" in body and not isinstance(body["connector_id"], str):
        errors["connector_id"] = "Must be a string"
    pages, timeout = body.get("pages", 1), body.get("timeout_seconds", 10)
    if isinstance(pages, bool) or not isinstance(pages, int) or not 1 <= pages <= PREVIEW_PAGES_MAX:
        errors["pages"] = f"Must be an integer between 1 and {PREVIEW_PAGES_MAX}"
    number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
    if not number or not 1 <= timeout <= PREVIEW_TIMEOUT_MAX:
        errors["timeout_seconds"] = f"Must be a number between 1 and {PREVIEW_TIMEOUT_MAX}"
    if errors:
        raise ValidationError(errors)
    return pages, float(timeout)
