"""A local Slack Web API serving ``conversations.history`` for one channel.

Written from Slack's public documentation, not from what syncd does:

- https://docs.slack.dev/reference/methods/conversations.history — ``GET`` (or ``POST``)
  ``https://slack.com/api/conversations.history`` with ``channel``, ``cursor``, ``limit``
  ("Maximum of 999", default 100), ``oldest``/``latest`` (Unix timestamps, exclusive unless
  ``inclusive``); the answer ``{"ok": true, "messages": [...], "has_more": ...,
  "pin_count": ..., "response_metadata": {"next_cursor": ...}}``, messages newest first; the
  errors ``channel_not_found``, ``invalid_cursor``, ``invalid_ts_oldest``,
  ``invalid_ts_latest``, ``invalid_arguments``, ``not_authed``, ``invalid_auth``; Tier 3
  rate limits; the token "passed as an HTTP Authorization header or alternatively, as a POST
  parameter".
- https://docs.slack.dev/apis/web-api/pagination — "An empty, null, or non-existent
  next_cursor in the response indicates no further results"; ``limit`` may return fewer
  items than asked "even when there are additional results".
- https://docs.slack.dev/apis/web-api/rate-limits — past the limit, "HTTP 429 Too Many
  Requests" with a ``Retry-After`` header in seconds.

Usage::

    async with SlackServer(records=237) as api:
        # GET f"{api.url}/api/conversations.history?channel={api.channel}&limit=200"
        # with {"Authorization": f"Bearer {api.token}"}
        ...
        api.add(5)  # five new messages: oldest=<newest ts seen> returns exactly them

Behaviour:

- Every answer but a rate limit is HTTP 200: failures are ``{"ok": false, "error": ...}``.
- ``limit`` above ``max_limit`` (999; 15 for the non-Marketplace apps Slack restricted in
  2025) is clamped to it, below 1 raised to 1.
- The cursor is Slack's shape (base64 of ``next_ts:<ts digits>``) and pages backwards in
  time; the last page has ``has_more: false`` and ``next_cursor: ""``.
- ``oldest`` gives incremental reads of new messages. An edited message keeps its ``ts``, so
  ``oldest`` does not bring it back (as on Slack): :meth:`edit` is there to show that.
- With ``rate_limit`` set, the calls past it within ``rate_window`` seconds answer ``429``
  ``{"ok": false, "error": "ratelimited"}`` with ``Retry-After``.
- Arguments are read from the query string, a form body or a JSON body; the token from
  ``Authorization: Bearer`` or a ``token`` form field (not from the query string, which Slack
  no longer accepts for new apps).

Not modelled: threads (``conversations.replies``), ``include_all_metadata``, other methods
(``users.list`` and the rest).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from aiohttp import web

from tests.integration.loopback import LoopbackServer

__all__ = ["HISTORY_PATH", "RecordedRequest", "SlackServer", "make_messages"]

HISTORY_PATH = "/api/conversations.history"
MAX_LIMIT = 999
DEFAULT_LIMIT = 100
_BASE_TS = 1704067200  # 2024-01-01T00:00:00Z
_USERS = ("U012AB3CDE", "U061F7AUR", "W012A3CDE")


def _ts(seconds: int, micros: int) -> str:
    return f"{seconds}.{micros:06d}"


def make_messages(count: int, *, start: int = 0) -> list[dict[str, Any]]:
    """``count`` messages one minute apart, oldest first; ``ts`` is unique per channel."""
    return [
        {
            "type": "message",
            "user": _USERS[i % len(_USERS)],
            "text": f"Message {i + 1}",
            "ts": _ts(_BASE_TS + 60 * i, 100 + i % 900),
        }
        for i in range(start, start + count)
    ]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (``body``: the form fields or parsed JSON of a POST,
    or ``None``)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


def _cursor_for(ts: str) -> str:
    return base64.b64encode(f"next_ts:{ts.replace('.', '')}".encode()).decode()


def _cursor_ts(cursor: str) -> Decimal | None:
    try:
        text = base64.b64decode(cursor, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    match = re.fullmatch(r"next_ts:(\d{7,})", text)
    if match is None:
        return None
    digits = match.group(1)
    return Decimal(f"{digits[:-6]}.{digits[-6:]}")


def _timestamp(raw: str | None) -> Decimal | None:
    if raw is None or raw == "":
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise ValueError(raw) from None
    if not value.is_finite():
        raise ValueError(raw)
    return value


class SlackServer(LoopbackServer):
    """Slack's ``conversations.history`` for one channel (see module doc)."""

    def __init__(
        self,
        records: int | Sequence[Mapping[str, Any]] = 0,
        *,
        channel: str = "C0123456789",
        token: str = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy",
        max_limit: int = MAX_LIMIT,
        rate_limit: int | None = None,
        rate_window: float = 60.0,
    ) -> None:
        self.channel = channel
        self.token = token
        self.max_limit = max_limit
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self.requests: list[RecordedRequest] = []
        self._records: list[dict[str, Any]] = []
        self.set_records(records)
        self._window_start = 0.0
        self._window_calls = 0

    # --- lifecycle ---------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get(HISTORY_PATH, self._history)
        app.router.add_post(HISTORY_PATH, self._history)

    #: Base URL, e.g. ``http://127.0.0.1:41234`` (stands for ``https://slack.com``).
    url: str

    @property
    def history_url(self) -> str:
        """The ``conversations.history`` method URL."""
        return self.url + HISTORY_PATH

    # --- records -----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every message in the channel, oldest first (copies)."""
        return [dict(r) for r in sorted(self._records, key=lambda r: Decimal(r["ts"]))]

    def set_records(self, records: int | Sequence[Mapping[str, Any]]) -> None:
        """Serve ``records`` from now on (an int generates that many with
        :func:`make_messages`)."""
        generated = make_messages(records) if isinstance(records, int) else records
        self._records = [dict(r) for r in generated]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Post ``count`` messages, each a minute after the newest one."""
        newest = max((Decimal(r["ts"]) for r in self._records), default=Decimal(_BASE_TS))
        added = make_messages(count, start=len(self._records))
        for offset, message in enumerate(added, start=1):
            message["ts"] = _ts(int(newest) + 60 * offset, 200 + offset % 800)
        self._records.extend(added)
        return [dict(m) for m in added]

    def edit(self, ts: str, text: str) -> dict[str, Any]:
        """Edit the message ``ts``: its text changes and it gets an ``edited`` stamp; its
        ``ts`` (and so its place in history) does not."""
        message = next(r for r in self._records if r["ts"] == ts)
        newest = max(Decimal(r["ts"]) for r in self._records)
        message["text"] = text
        message["edited"] = {"user": message["user"], "ts": _ts(int(newest) + 1, 0)}
        return dict(message)

    # --- handler -----------------------------------------------------------------------

    def _rate_limited(self) -> int | None:
        """Seconds to wait when this call is past the limit, else ``None``."""
        if self.rate_limit is None:
            return None
        now = time.monotonic()
        if now - self._window_start >= self.rate_window:
            self._window_start, self._window_calls = now, 0
        self._window_calls += 1
        if self._window_calls <= self.rate_limit:
            return None
        return max(1, math.ceil(self._window_start + self.rate_window - now))

    async def _history(self, request: web.Request) -> web.StreamResponse:
        body: Any = None
        args: dict[str, str] = dict(request.query)
        if request.method == "POST":
            if request.content_type == "application/json":
                try:
                    body = await request.json()
                except ValueError:
                    return web.json_response({"ok": False, "error": "invalid_json"})
                if isinstance(body, dict):
                    args.update(
                        {k: v if isinstance(v, str) else json.dumps(v) for k, v in body.items()}
                    )
            else:
                form = await request.post()
                body = {k: str(v) for k, v in form.items()}
                args.update(body)
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.query), dict(request.headers), body
            )
        )

        def fail(error: str) -> web.Response:
            return web.json_response({"ok": False, "error": error})

        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        token = credential.strip() if scheme.lower() == "bearer" else None
        if token is None and isinstance(body, dict) and request.content_type != "application/json":
            token = body.get("token")
        if not token:
            return fail("not_authed")
        if token != self.token:
            return fail("invalid_auth")
        if (wait := self._rate_limited()) is not None:
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(wait)},
            )
        if args.get("channel") != self.channel:
            return fail("channel_not_found")

        raw_limit = args.get("limit", "")
        if raw_limit and not re.fullmatch(r"-?\d+", raw_limit.strip()):
            return fail("invalid_arguments")
        limit = int(raw_limit) if raw_limit else min(DEFAULT_LIMIT, self.max_limit)
        limit = max(1, min(limit, self.max_limit))
        try:
            oldest = _timestamp(args.get("oldest"))
        except ValueError:
            return fail("invalid_ts_oldest")
        try:
            latest = _timestamp(args.get("latest"))
        except ValueError:
            return fail("invalid_ts_latest")
        inclusive = args.get("inclusive", "").lower() in ("1", "true")
        before: Decimal | None = None
        if args.get("cursor"):
            before = _cursor_ts(args["cursor"])
            if before is None:
                return fail("invalid_cursor")

        def wanted(ts: Decimal) -> bool:
            if oldest is not None and (ts < oldest or (ts == oldest and not inclusive)):
                return False
            if latest is not None and (ts > latest or (ts == latest and not inclusive)):
                return False
            return before is None or ts < before

        newest_first = sorted(
            (m for m in self._records if wanted(Decimal(m["ts"]))),
            key=lambda m: Decimal(m["ts"]),
            reverse=True,
        )
        page = newest_first[:limit]
        has_more = len(newest_first) > limit
        return web.json_response(
            {
                "ok": True,
                "messages": [dict(m) for m in page],
                "has_more": has_more,
                "pin_count": 0,
                "channel_actions_ts": None,
                "channel_actions_count": 0,
                "response_metadata": {
                    "next_cursor": _cursor_for(page[-1]["ts"]) if has_more else ""
                },
            }
        )
