"""A local server following Stripe's documented list contract, for ``GET /v1/customers``.

Usage::

    async with StripeServer(records=237) as api:
        url = f"{api.url}/v1/customers"  # Authorization: Bearer <api.api_key>

Written from Stripe's reference pages:

- https://docs.stripe.com/api/pagination — ``limit`` (1 to 100, default 10),
  ``starting_after`` / ``ending_before`` (object ids, mutually exclusive), the list object
  ``{"object": "list", "url", "has_more", "data"}``, reverse chronological order.
- https://docs.stripe.com/pagination — newest object first; ``has_more`` says whether more
  objects lie beyond this page in the direction of travel.
- https://docs.stripe.com/api/customers/list — ``created`` filter (an exact Unix time or
  ``created[gt|gte|lt|lte]``) and the case-sensitive ``email`` filter.
- https://docs.stripe.com/api/authentication — the secret key (``sk_test_...``) as HTTP
  Basic user name (no password) or as ``Authorization: Bearer``; unauthenticated calls fail.
- https://docs.stripe.com/api/errors — ``{"error": {"type", "code", "message", "param"}}``;
  400 for an unacceptable request, 401 for no valid API key.

Behaviour the reference leaves open, chosen here: a ``limit`` outside 1..100 is refused
with 400 (``param: "limit"``), not clamped, since the reference gives a range rather than a
cap (none of the pages read says how Stripe answers it); an unknown ``starting_after`` /
``ending_before`` id is a 400 with Stripe's ``resource_missing`` code ("No such customer")
naming that parameter; unknown parameters are refused (``Received unknown parameter``), as
Stripe does.

Tests can make requests fail (:meth:`StripeServer.fail_next`, a stand-in for an outage):
answered with Stripe's ``api_error`` shape.

Left out: other list endpoints, ``expand`` (accepted, ignored), ``test_clock`` (accepted,
ignored), search endpoints (``next_page``), rate limiting, idempotency, ``Stripe-Version``.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.integration.loopback import LoopbackServer
from tests.integration.realapis.faults import Faults

__all__ = ["RecordedRequest", "StripeServer", "customer_id"]

BASE_CREATED = 1_704_067_200  # 2024-01-01T00:00:00Z
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_CREATED_OPS = ("gt", "gte", "lt", "lte")
_KNOWN = {"limit", "starting_after", "ending_before", "created", "email", "test_clock"}


def customer_id(index: int) -> str:
    """The id of customer ``index``: ``cus_`` and 14 base-62 characters, as Stripe's look."""
    digest = int.from_bytes(hashlib.sha256(f"customer-{index}".encode()).digest()[:12], "big")
    chars = []
    for _ in range(14):
        digest, rest = divmod(digest, 62)
        chars.append(_ALPHABET[rest])
    return "cus_" + "".join(chars)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


class _Refused(Exception):
    def __init__(self, status: int, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.status = status
        self.error = error


def _invalid(message: str, param: str | None = None, code: str | None = None) -> _Refused:
    error: dict[str, Any] = {"type": "invalid_request_error", "message": message}
    if param is not None:
        error["param"] = param
    if code is not None:
        error["code"] = code
        error["doc_url"] = f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"
    return _Refused(400, error)


class StripeServer(LoopbackServer):
    """``GET /v1/customers`` as Stripe documents it (see the module doc).

    ``records`` customers are generated (customer ``i`` was created ``i`` minutes after
    2024-01-01), or given as dicts. :attr:`records` is the list as Stripe orders it, newest
    first; :meth:`add`, :meth:`update` and :meth:`delete` change it between requests.
    """

    def __init__(
        self, records: int | list[Mapping[str, Any]] = 0, *, api_key: str = "sk_test_fixture"
    ) -> None:
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self._customers: list[dict[str, Any]] = []  # oldest first
        self._next_index = 0
        self._request_ids = itertools.count(1)
        self._faults = Faults()
        if isinstance(records, int):
            self.add(records)
        else:
            self._customers = sorted((dict(r) for r in records), key=lambda c: int(c["created"]))
            self._next_index = len(self._customers)

    # --- lifecycle --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/customers", self._list)

    #: Base URL, e.g. ``http://127.0.0.1:41234`` (the list is at ``/v1/customers``).
    url: str

    # --- content ----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every customer, in the API's order (newest first); copies."""
        return [dict(c) for c in reversed(self._customers)]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Create ``count`` customers, each a minute newer than the newest so far."""
        newest = max((int(c["created"]) for c in self._customers), default=BASE_CREATED - 60)
        made = []
        for n in range(count):
            index = self._next_index
            self._next_index += 1
            made.append(
                {
                    "id": customer_id(index),
                    "object": "customer",
                    "created": newest + 60 * (n + 1),
                    "email": f"customer{index}@example.com",
                    "name": f"Customer {index}",
                    "livemode": False,
                    "metadata": {},
                }
            )
        self._customers.extend(made)
        return [dict(c) for c in made]

    def update(self, customer: str, **fields: Any) -> dict[str, Any]:
        """Change fields of a customer (its ``created`` and place in the list stay)."""
        found = self._find(customer)
        found.update(fields)
        return dict(found)

    def delete(self, customer: str) -> None:
        """Delete a customer: it is no longer listed."""
        self._customers.remove(self._find(customer))

    def fail_next(self, status: int = 500, times: int = 1, *, after: int = 0) -> None:
        """A test hook, no part of the API: answer ``times`` requests with ``status`` and
        Stripe's ``api_error``, after serving the next ``after`` (see :mod:`.faults`)."""
        self._faults.arm(status, times, after=after)

    def _find(self, customer: str) -> dict[str, Any]:
        for c in self._customers:
            if c["id"] == customer:
                return c
        raise KeyError(customer)

    # --- handler ----------------------------------------------------------------------

    async def _list(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.query), dict(request.headers)
            )
        )
        headers = {"Request-Id": f"req_fixture{next(self._request_ids):06d}"}
        if (status := self._faults.take()) is not None:
            error = {"type": "api_error", "message": "An unknown error occurred (scripted)."}
            return web.json_response({"error": error}, status=status, headers=headers)
        try:
            self._authenticate(request.headers.get("Authorization", ""))
            body = self._page(request)
        except _Refused as refused:
            return web.json_response(
                {"error": refused.error}, status=refused.status, headers=headers
            )
        return web.json_response(body, headers=headers)

    def _authenticate(self, header: str) -> None:
        scheme, _, credentials = header.partition(" ")
        key = ""
        if scheme.lower() == "bearer":
            key = credentials.strip()
        elif scheme.lower() == "basic":
            try:
                key = base64.b64decode(credentials.strip()).decode().partition(":")[0]
            except (ValueError, UnicodeDecodeError):
                key = ""
        if not key:
            raise _Refused(
                401,
                {
                    "type": "invalid_request_error",
                    "message": (
                        "You did not provide an API key. You need to provide your API key in"
                        " the Authorization header, using Bearer auth (e.g. 'Authorization:"
                        " Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#"
                        "authentication for details, or we can help at"
                        " https://support.stripe.com/."
                    ),
                },
            )
        if key != self.api_key:
            raise _Refused(
                401,
                {
                    "type": "invalid_request_error",
                    "message": f"Invalid API Key provided: {key[:8]}{'*' * 12}{key[-4:]}",
                },
            )

    def _page(self, request: web.Request) -> dict[str, Any]:
        query = request.query
        for name in query:
            base = name.split("[", 1)[0]
            if base not in _KNOWN and base != "expand":
                raise _invalid(f"Received unknown parameter: {name}", name)
        limit = _integer(query.get("limit", "10"), "limit")
        if not 1 <= limit <= 100:
            bound = "greater than or equal to 1" if limit < 1 else "less than or equal to 100"
            raise _invalid(f"This value must be {bound}.", "limit")
        after, before = query.get("starting_after"), query.get("ending_before")
        if after is not None and before is not None:
            raise _invalid(
                "You may only specify one of these parameters: ending_before, starting_after.",
                "ending_before",
            )
        listed = [c for c in reversed(self._customers) if self._matches(c, query)]
        if before is not None:
            end = self._position(listed, before, "ending_before")
            data = listed[max(0, end - limit) : end]
            has_more = end - limit > 0
        else:
            start = 0 if after is None else self._position(listed, after, "starting_after") + 1
            data = listed[start : start + limit]
            has_more = start + limit < len(listed)
        return {
            "object": "list",
            "url": "/v1/customers",
            "has_more": has_more,
            "data": [dict(c) for c in data],
        }

    def _position(self, listed: list[dict[str, Any]], cursor: str, param: str) -> int:
        for index, customer in enumerate(listed):
            if customer["id"] == cursor:
                return index
        if any(c["id"] == cursor for c in self._customers):
            # A real object the filters leave out: Stripe pages by the object's place in
            # the full list, so continue from where it would be.
            created = int(self._find(cursor)["created"])
            return sum(1 for c in listed if int(c["created"]) > created) - (
                1 if param == "starting_after" else 0
            )
        raise _invalid(f"No such customer: '{cursor}'", param, "resource_missing")

    @staticmethod
    def _matches(customer: Mapping[str, Any], query: Mapping[str, str]) -> bool:
        created = int(customer["created"])
        if "created" in query and created != _integer(query["created"], "created"):
            return False
        for op in _CREATED_OPS:
            raw = query.get(f"created[{op}]")
            if raw is None:
                continue
            bound = _integer(raw, f"created[{op}]")
            ok = {
                "gt": created > bound,
                "gte": created >= bound,
                "lt": created < bound,
                "lte": created <= bound,
            }[op]
            if not ok:
                return False
        email = query.get("email")
        return email is None or customer.get("email") == email


def _integer(raw: str, param: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise _invalid(f"Invalid integer: {raw}", param) from None
