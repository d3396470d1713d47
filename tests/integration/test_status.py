"""``Daemon.status()`` (``GET /status``): this instance, the queue, and the instances that
sent a heartbeat lately, on both backend pairs (two daemons on one backend are two
instances)."""

from __future__ import annotations

from datetime import timedelta

from syncd import __version__
from syncd.daemon.instances import INSTANCES_SEEN_BEATS
from syncd.models import utcnow
from tests.integration.conftest import DaemonFactory


async def test_status_lists_every_instance_heard_from_lately(
    make_any_daemon: DaemonFactory,
) -> None:
    one = make_any_daemon(daemon={"instance_id": "one"}, workers={"concurrency": 3})
    two = make_any_daemon(daemon={"instance_id": "two"})
    await one.start()
    await two.start()
    await one.heartbeat()
    await two.heartbeat()

    status = await one.status()
    assert (status["version"], status["instance_id"], status["owner"]) == (
        __version__,
        "one",
        one.owner,
    )
    assert status["workers"] == {"concurrency": 3, "busy": 0}
    assert (status["queue"], status["running_syncs"]) == ({"depth": 0}, 0)
    assert status["started_at"].endswith("Z")
    by_id = {i["instance_id"]: i for i in status["instances"]}
    assert set(by_id) == {"one", "two"}
    assert by_id["two"]["owner"] == two.owner
    assert by_id["two"]["version"] == __version__
    assert by_id["two"]["workers"] == {"concurrency": two.config.workers.concurrency, "busy": 0}
    assert by_id["two"]["heartbeat_at"].endswith("Z")
    assert by_id["one"]["started_at"] == status["started_at"]

    # A clean stop removes the instance at once; it does not wait to go stale.
    await two.stop()
    assert [i["instance_id"] for i in (await one.status())["instances"]] == ["one"]


async def test_an_instance_silent_for_three_heartbeats_is_not_listed(
    make_any_daemon: DaemonFactory,
) -> None:
    d = make_any_daemon()
    await d.start()
    window = timedelta(seconds=INSTANCES_SEEN_BEATS * d.instance_heartbeat_seconds)
    now = utcnow()
    await d.store.heartbeat_instance("gone/1", {"instance_id": "gone"}, now - 2 * window)
    await d.store.heartbeat_instance("late/1", {"instance_id": "late"}, now - window / 2)
    ids = [i["instance_id"] for i in (await d.status())["instances"]]
    assert "gone" not in ids
    assert {"late", d.instance_id} <= set(ids)


async def test_this_instance_is_listed_before_its_first_heartbeat(
    make_any_daemon: DaemonFactory,
) -> None:
    d = make_any_daemon()
    d.instance_heartbeat_seconds = 3600.0  # no beat but the first one
    await d.start()
    [me] = [i for i in (await d.status())["instances"] if i["owner"] == d.owner]
    assert me["instance_id"] == d.instance_id
