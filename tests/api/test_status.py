"""``GET /status``: this instance, its workers and running syncs, the queue, the instances."""

from __future__ import annotations

import asyncio

from syncd import __version__
from tests.api.conftest import TOKEN, StartDaemon


async def test_status_needs_the_token_and_reports_a_running_sync(
    start_daemon: StartDaemon,
) -> None:
    h = await start_daemon(token=TOKEN)
    assert (await h.api.get("/status", auth=False)).status == 401

    h.feed.records(20)
    h.feed.hang_at = 1
    connector = await h.api.create()
    assert (await h.api.post(f"/connectors/{connector['id']}/sync")).status == 202
    await asyncio.wait_for(h.feed.reached.wait(), 5)

    reply = await h.api.get("/status")
    assert reply.status == 200, reply.body
    status = reply.body
    d = h.daemon
    assert set(status) == {
        *("version", "instance_id", "owner", "started_at", "workers", "queue"),
        *("running_syncs", "instances", "loop_lag_seconds"),
    }
    assert (status["version"], status["instance_id"], status["owner"]) == (
        __version__,
        d.instance_id,
        d.owner,
    )
    assert status["running_syncs"] == 1
    assert status["workers"]["concurrency"] == d.config.workers.concurrency
    assert isinstance(status["queue"]["depth"], int)
    [me] = status["instances"]
    assert me["owner"] == d.owner
    assert (me["running_syncs"], me["version"]) == (1, __version__)
    assert set(me) == {
        *("instance_id", "owner", "version", "started_at", "heartbeat_at"),
        *("running_syncs", "workers", "loop_lag_seconds"),
    }
    assert status["loop_lag_seconds"] == me["loop_lag_seconds"] >= 0


async def test_status_is_described_in_openapi(start_daemon: StartDaemon) -> None:
    h = await start_daemon()
    doc = (await h.api.get("/openapi.json")).body
    op = doc["paths"]["/status"]["get"]
    assert op["tags"] == ["system"]
    schema = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/Status"}
    status = (await h.api.get("/status")).body
    properties = doc["components"]["schemas"]["Status"]["properties"]
    assert set(properties) == set(status)
