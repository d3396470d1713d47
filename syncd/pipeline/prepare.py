"""Turning crawled pages into documents without holding the event loop for a whole page.

A page of 500 records of ~1 KB is ~10 ms of CPU (canonical JSON, type checks, SHA-256):
twenty runs preparing pages at once would hold every API request behind ~200 ms of loop
time. :class:`Preparer` cuts a page into chunks sized to take about ``slice_seconds`` each
and lets one run prepare one chunk at a time (a FIFO lock), giving the loop back between two
chunks: whatever else is ready (a request, a commit's completion) runs after at most one
chunk, while the runs together still prepare as much per second as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from syncd.models import DocumentInput, Rejection
from syncd.rules.records import document_inputs
from syncd.runtime.pacing import Pacer

__all__ = ["SLICE_SECONDS", "Preparer"]

#: CPU time one chunk aims at.
SLICE_SECONDS = 0.002
_MIN_CHUNK, _MAX_CHUNK, _FIRST_CHUNK = 8, 4096, 64


class Preparer:
    """:func:`~syncd.rules.records.document_inputs` in slices of loop time, shared by the runs of
    one engine (one event loop)."""

    def __init__(self, slice_seconds: float = SLICE_SECONDS, pacer: Pacer | None = None) -> None:
        self._slice = slice_seconds
        # Requests in flight go first (each chunk waits its turn).
        self._pacer = pacer or Pacer()
        self._turn = asyncio.Lock()
        # Records per chunk, adapted to the records' cost as measured.
        self._chunk = _FIRST_CHUNK

    async def document_inputs(
        self, records: Sequence[Any], id_field: str, hash_fields: Sequence[str] | None
    ) -> tuple[list[DocumentInput], list[Rejection]]:
        """The documents and rejections of ``records``, as
        :func:`~syncd.rules.records.document_inputs` returns them."""
        docs: list[DocumentInput] = []
        rejected: list[Rejection] = []
        start, total = 0, len(records)
        while True:
            async with self._turn:
                await self._pacer.turn()
                size = self._chunk
                began = time.perf_counter()
                part, refused = document_inputs(
                    records[start : start + size], id_field, hash_fields
                )
                self._adapt(size, time.perf_counter() - began)
            docs.extend(part)
            # Indexes within the page, not the chunk.
            rejected.extend(
                replace(r, record=r.record + start) if isinstance(r.record, int) else r
                for r in refused
            )
            start += size
            if start >= total:
                return docs, rejected
            # The loop's turn: another run waiting for its chunk goes first.
            await asyncio.sleep(0)

    def _adapt(self, size: int, seconds: float) -> None:
        if size < self._chunk and seconds < self._slice:
            return  # a page's short last chunk says little
        fitting = size * self._slice / max(seconds, 1e-6)
        # Halfway to the estimate: one slow chunk (a GC pause) does not collapse the size.
        self._chunk = int(min(_MAX_CHUNK, max(_MIN_CHUNK, (self._chunk + fitting) / 2)))
