"""Pages become documents in slices of loop time, with the same result as in one go."""

from __future__ import annotations

import asyncio
from typing import Any

from syncd.pipeline.prepare import Preparer
from syncd.rules.records import document_inputs


def page(n: int) -> list[Any]:
    records: list[Any] = [{"id": f"r{i}", "n": i, "body": "x" * 200} for i in range(n)]
    # Rejections spread over several chunks: their indexes are the page's.
    for i in (0, 9, 70, n - 1):
        records[i] = {"id": None} if i % 2 else "not an object"
    records[33] = {"id": "nan", "x": float("nan")}
    return records


async def test_same_documents_and_rejections_as_in_one_go() -> None:
    records = page(1000)
    preparer = Preparer(slice_seconds=1e-6)  # the smallest chunks
    docs, rejected = await preparer.document_inputs(records, "id", None)
    assert (docs, rejected) == document_inputs(records, "id", None)
    assert [r.record for r in rejected] == [0, 9, 33, 70, 999]
    hashed = await preparer.document_inputs(records, "id", ["n"])
    assert hashed == document_inputs(records, "id", ["n"])


async def test_other_tasks_run_between_two_chunks() -> None:
    preparer = Preparer(slice_seconds=1e-6)
    ran = asyncio.Event()

    async def other() -> None:
        ran.set()

    records = page(2000)
    task = asyncio.create_task(other())
    preparing = asyncio.create_task(preparer.document_inputs(records, "id", None))
    await ran.wait()
    assert not preparing.done()  # the other task ran before the page was prepared
    await preparing
    await task


async def test_runs_take_turns() -> None:
    preparer = Preparer(slice_seconds=1e-6)
    order: list[str] = []
    real = preparer._adapt

    def note(size: int, seconds: float) -> None:
        order.append(asyncio.current_task().get_name())  # type: ignore[union-attr]
        real(size, seconds)

    preparer._adapt = note  # type: ignore[method-assign]
    records = page(200)
    await asyncio.gather(
        asyncio.create_task(preparer.document_inputs(records, "id", None), name="a"),
        asyncio.create_task(preparer.document_inputs(records, "id", None), name="b"),
    )
    # Alternating chunks, not one page then the other.
    assert order[:4] == ["a", "b", "a", "b"]


async def test_an_empty_page() -> None:
    assert await Preparer().document_inputs([], "id", None) == ([], [])
