"""The ``webhook`` indexer's ``batch_size`` through the API: 1-1000, an integer; anything else
is a 422 naming ``indexer.batch_size``, on create and on patch."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Api

HOOK = {"type": "webhook", "url": "http://127.0.0.1:9/hook"}
BETWEEN = "Must be an integer between 1 and 1000"


def details(reply: Any) -> dict[tuple[Any, ...], str]:
    assert reply.status == 422, reply.body
    return {tuple(d["loc"]): d["msg"] for d in reply.body["detail"]}


@pytest.mark.parametrize("size", [0, -1, 1001, 10**30, 2.5, "10", True, None])
async def test_batch_size_out_of_range_is_named(api: Api, size: Any) -> None:
    c = await api.create()
    indexer = {**HOOK, "batch_size": size}
    body = {"name": "n", "source": {"type": "feed"}, "indexer": indexer}
    expected = {("body", "indexer", "batch_size"): BETWEEN}
    assert details(await api.post("/connectors", body)) == expected
    assert details(await api.patch(f"/connectors/{c['id']}", {"indexer": indexer})) == expected


@pytest.mark.parametrize("size", [1, 100, 1000, 50.0])
async def test_batch_size_in_range_is_kept(api: Api, size: Any) -> None:
    indexer = {**HOOK, "batch_size": size}
    created = await api.post(
        "/connectors", {"name": "n", "source": {"type": "feed"}, "indexer": indexer}
    )
    assert created.status == 201, created.body
    assert created.body["indexer"]["batch_size"] == int(size)
