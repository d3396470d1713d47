"""The API of a queued manual trigger (admission control): DESIGN.md §3's codes with the
``queued`` representation, checked against the OpenAPI document's schemas."""

from __future__ import annotations

import asyncio

from .conftest import Harness


async def test_trigger_without_a_free_slot_is_queued(harness: Harness) -> None:
    api = harness.api
    harness.daemon.admission.max_runs = 1
    busy, waiting = await api.create("busy"), await api.create("waiting")
    harness.feed.hang_at = 0
    started = await api.post(f"/connectors/{busy['id']}/sync")
    assert started.status == 202 and started.body["sync_status"] == "running"
    await harness.feed.reached.wait()

    reply = await api.post(f"/connectors/{waiting['id']}/sync")
    assert (reply.status, reply.body) == (
        202,
        {"connector_id": waiting["id"], "run_id": None, "sync_status": "queued"},
    )
    shown = (await api.get(f"/connectors/{waiting['id']}")).body
    assert (shown["sync_status"], shown["run_id"]) == ("queued", None)
    assert shown["sync_queued_at"] is not None
    again = await api.post(f"/connectors/{waiting['id']}/sync")
    assert (again.status, again.body) == (409, {"detail": "Sync already queued"})
    assert (await api.get(f"/connectors/{waiting['id']}/runs")).body["data"] == []

    # Concurrent aborts of the queued trigger: one 202 (no run id), the rest 409.
    aborts = await asyncio.gather(
        *(api.post(f"/connectors/{waiting['id']}/sync/abort") for _ in range(5))
    )
    assert sorted(r.status for r in aborts) == [202] + [409] * 4
    [ok] = [r for r in aborts if r.status == 202]
    assert ok.body == {"connector_id": waiting["id"], "run_id": None, "status": "abort_requested"}
    shown = (await api.get(f"/connectors/{waiting['id']}")).body
    assert (shown["sync_status"], shown["sync_queued_at"]) == ("idle", None)


async def test_delete_of_a_queued_connector_is_allowed(harness: Harness) -> None:
    api = harness.api
    harness.daemon.admission.max_runs = 1
    busy, waiting = await api.create("busy"), await api.create("waiting")
    harness.feed.hang_at = 0
    assert (await api.post(f"/connectors/{busy['id']}/sync")).status == 202
    await harness.feed.reached.wait()
    assert (await api.post(f"/connectors/{waiting['id']}/sync")).body["sync_status"] == "queued"
    reply = await api.delete(f"/connectors/{waiting['id']}")
    assert (reply.status, reply.body) == (
        202,
        {"connector_id": waiting["id"], "status": "deleting"},
    )
    await harness.daemon.wait_deleted(waiting["id"])
    assert (await api.get(f"/connectors/{waiting['id']}")).status == 404
