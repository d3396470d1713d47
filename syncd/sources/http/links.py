"""Next-page links: RFC 8288 ``Link`` headers (the ``link_header`` style) and the rule that
a next page's URL (``next_url``, ``link_header``) is followed on the request's origin only."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from syncd.errors import SourceError
from syncd.http.transport import safe_url

__all__ = ["parse_link_header", "same_origin_url"]


def same_origin_url(link: str, base: str, requested: str) -> str:
    """``link`` (absolute, or relative to ``base``, the response's URL) as an absolute URL,
    refused (``SourceError``) when it is on another origin than ``requested``: the source's
    headers hold credentials, never handed to another origin."""
    absolute = urljoin(base, link)
    there = _origin(absolute)
    if there is None or there != _origin(requested):
        raise SourceError(
            f"next page URL {safe_url(absolute)} is on another origin than "
            f"{safe_url(requested)}; refusing to follow it"
        )
    return absolute


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of ``url``, default ports filled in; credentials ignored."""
    try:
        parts = urlsplit(url)
        scheme, port = parts.scheme.lower(), parts.port
    except ValueError:
        return None
    port = port if port is not None else {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").rstrip("."), port


def parse_link_header(value: str) -> dict[str, str]:
    """``{rel: target}`` from an RFC 8288 ``Link`` header value (first target per rel wins).

    Parameters may be quoted strings holding commas or semicolons; a ``rel`` may list several
    space-separated relation types.
    """
    links: dict[str, str] = {}
    i, n = 0, len(value)
    while i < n:
        start = value.find("<", i)
        if start < 0:
            break
        end = value.find(">", start + 1)
        if end < 0:
            break
        target = value[start + 1 : end].strip()
        i = end + 1
        rels: list[str] = []
        # Parameters: ;name[=token|"quoted"] until the next comma outside quotes.
        while i < n:
            while i < n and value[i] in " \t":
                i += 1
            if i >= n or value[i] != ";":
                break
            i += 1
            eq = i
            while eq < n and value[eq] not in "=;,":
                eq += 1
            name = value[i:eq].strip().lower()
            i = eq
            param = ""
            if i < n and value[i] == "=":
                i += 1
                while i < n and value[i] in " \t":
                    i += 1
                if i < n and value[i] == '"':
                    i += 1
                    chars: list[str] = []
                    while i < n and value[i] != '"':
                        if value[i] == "\\" and i + 1 < n:
                            i += 1
                        chars.append(value[i])
                        i += 1
                    i += 1  # closing quote
                    param = "".join(chars)
                else:
                    stop = i
                    while stop < n and value[stop] not in ";,":
                        stop += 1
                    param = value[i:stop].strip()
                    i = stop
            if name == "rel":
                rels.extend(param.lower().split())
        # Skip to the comma separating this link from the next.
        while i < n and value[i] != ",":
            i += 1
        i += 1
        for rel in rels:
            links.setdefault(rel, target)
    return links
