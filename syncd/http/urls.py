"""URLs in the fetch layer: what a message or a log may show of one (never its credentials,
nor a query value, which may be a resolved secret), where a redirect leads, and the Basic
credentials a URL carries to the later hops on its origin.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from yarl import URL

from syncd.errors import SourceError
from syncd.observability.logs import MASK, mask_url_passwords

__all__ = ["describe_url", "redirect_target", "safe_url", "with_url_auth"]


def safe_url(url: str | URL) -> str:
    """``url`` without credentials, query or fragment: fit for messages and logs."""
    try:
        parsed = URL(url)
        return str(parsed.with_user(None).with_query(None).with_fragment(None))
    except (TypeError, ValueError):
        return _unparsed(url)


def describe_url(url: str | URL) -> str:
    """``url`` without credentials or fragment, and with every query value masked
    (``?api_key=***&page=***``): the parameter names still tell two URLs apart in a message,
    the values (a resolved ``${env:…}`` secret among them) never reach it."""
    try:
        parsed = URL(url)
        masked = [(name, MASK) for name in parsed.query]
        base = parsed.with_user(None).with_query(None).with_fragment(None)
        # Built by hand: yarl would percent-encode the mask.
        query = "&".join(f"{name}={value}" for name, value in masked)
        return f"{base}?{query}" if query else str(base)
    except (TypeError, ValueError):
        return _unparsed(url)


def _unparsed(url: str | URL) -> str:
    # A URL yarl cannot parse may still carry a password: mask it as the logs do.
    return mask_url_passwords(str(url).split("?", 1)[0].split("#", 1)[0])


def redirect_target(here: URL, location: str, method: str, url: str) -> URL:
    """The absolute URL a ``Location`` header points to (relative to ``here``)."""
    try:
        target = URL(location)
        if not target.scheme or not target.is_absolute():
            target = here.join(target)
        valid = target.scheme in ("http", "https") and bool(target.raw_host)
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise SourceError(
            f"{method} {safe_url(url)} redirected to an unusable location "
            f"{safe_url(location)!r}: only http(s) URLs are followed"
        )
    return target.with_fragment(None)


def with_url_auth(headers: Mapping[str, str] | None, url: str) -> Mapping[str, str] | None:
    """``headers`` plus the Basic credentials of ``url``, if it has any: aiohttp turns them
    into an Authorization header for the first hop; later hops on the same origin carry it
    explicitly, since a Location seldom repeats them."""
    try:
        auth = aiohttp.BasicAuth.from_url(URL(url))
    except (TypeError, ValueError):
        auth = None
    if auth is None:
        return headers
    return {**(headers or {}), "Authorization": auth.encode()}
