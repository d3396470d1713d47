"""The config model of the ``webhook`` indexer (DESIGN.md §7): where to POST, with which
headers, how many documents per POST."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from syncd.schema.base import KindConfig
from syncd.schema.fields import Headers, HttpUrl, int_between

__all__ = ["WEBHOOK_BATCH_MAX", "WebhookIndexerConfig"]

#: Most documents one webhook POST carries.
WEBHOOK_BATCH_MAX = 1000

WebhookBatchSize = Annotated[
    int,
    Field(strict=True, ge=1, le=WEBHOOK_BATCH_MAX),
    BeforeValidator(int_between(1, WEBHOOK_BATCH_MAX)),
]


class WebhookIndexerConfig(KindConfig):
    """POSTs each document (``{"op", "connector_id", "external_id", "content_hash",
    "payload"}``) to ``url``, or with ``batch_size`` > 1 up to that many in one POST
    (``{"op", "documents": [...]}``); a 2xx answer means indexed."""

    type: Literal["webhook"]
    url: HttpUrl = Field(
        description="Where to POST: http or https, with a host; port 1-65535.",
        examples=["https://search.example.com/hooks/tickets"],
    )
    headers: Headers | None = Field(
        None,
        description="Request headers; values are secrets and may hold `${env:NAME}` / "
        "`${file:/path}`, resolved per request.",
        examples=[{"X-Hook-Key": "${file:/run/secrets/hook_key}"}],
    )
    batch_size: WebhookBatchSize = Field(
        1,
        description="Documents per POST. 1: one document per POST, its object as the body. "
        'More: `{"op", "documents": [...]}` with up to this many (at most the workers\' '
        "`batch_size`); the answer may give per-document results.",
        examples=[100],
    )
