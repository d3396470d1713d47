"""Decoded rows by their values (:class:`DecodedRows`), shared by the store backends'
connector reads; re-exported by :mod:`syncd.store.codec`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson

__all__ = ["DecodedRows"]

_T = TypeVar("_T")


class DecodedRows(Generic[_T]):
    """Decoded rows by their values: an unchanged row is not decoded again.

    The API and the event stream read the same connectors over and over (a dashboard, a
    ``--follow``, a poller), and between two reads most of them have not changed. Decoding a
    connector row costs tens of µs; looking its values up costs a few. What is returned for
    equal rows is the same object, so a renderer may cache by identity
    (:func:`syncd.api.views.connector_text` does): the objects are shared and must be treated
    as read-only. One instance per statement (the key is the values, not the column names).
    """

    __slots__ = ("_decode", "_found", "_json_at", "_size")

    def __init__(self, decode: Callable[[Any], _T], size: int = 1024) -> None:
        self._decode = decode
        self._size = size
        self._found: dict[tuple[Any, ...], _T] = {}
        # Where the statement's rows held native JSON values so far (asyncpg's jsonb codec).
        self._json_at: tuple[int, ...] = ()

    def __call__(self, row: Any) -> _T:
        """``decode(row)``, or what it returned for a row of equal values."""
        key = self._key(row)
        found = self._found.get(key)
        if found is None:
            found = self._decode(row)
            if len(self._found) >= self._size:
                self._found.clear()  # a rebuild is cheap; an LRU would cost every hit
            self._found[key] = found
        return found

    def _key(self, row: Any) -> tuple[Any, ...]:
        # sqlite3.Row and asyncpg's Record iterate over their values; a dict over its keys.
        values = list(row.values() if isinstance(row, dict) else row)
        for i in self._json_at:
            values[i] = _json_key(values[i])
        key = tuple(values)
        try:
            hash(key)
        except TypeError:
            # A native JSON value where none was before: note where, key it by its text.
            self._json_at = tuple(
                i for i, v in enumerate(values) if i in self._json_at or isinstance(v, dict | list)
            )
            key = tuple(_json_key(v) for v in values)
        return key


def _json_key(value: Any) -> Any:
    # A native JSON value is keyed by its text, in its own key order (the order is answered).
    return orjson.dumps(value) if isinstance(value, dict | list) else value
