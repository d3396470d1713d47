"""Every route of the control API against a real daemon (DESIGN.md §3): codes, exact
messages and bodies."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from syncd.api.routes import ROUTES
from syncd.models import ConnectorStatus, Transition

from .conftest import CONNECTOR_KEYS, ZERO_DOCS, Api, Harness

UTC_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
MISSING = "0000000000000000000000000"


async def start_hanging_sync(h: Harness, connector_id: str) -> str:
    """Trigger a sync whose first page request hangs; return its run id once it hangs."""
    h.feed.hang_at = 0
    reply = await h.api.post(f"/connectors/{connector_id}/sync")
    assert reply.status == 202, reply.body
    await h.feed.reached.wait()
    run_id: str = reply.body["run_id"]
    return run_id


async def set_deleting(h: Harness, connector_id: str) -> None:
    """Leave a connector ``deleting`` with no cascade running (as after a crash mid-delete)."""
    await h.daemon.store.mutate_connector(
        connector_id, lambda c: Transition(replace(c, status=ConnectorStatus.DELETING))
    )


# --- POST /connectors, GET /connectors/{id} ----------------------------------------------


async def test_create_returns_the_connector(api: Api) -> None:
    reply = await api.post(
        "/connectors",
        {"name": "tickets", "source": {"type": "feed"}, "sync_schedule": "*/15 * * * *"},
    )
    assert reply.status == 201
    c = reply.body
    assert set(c) == CONNECTOR_KEYS
    assert c["name"] == "tickets"
    assert (c["status"], c["sync_status"], c["last_error"], c["run_id"]) == (
        "active",
        "idle",
        None,
        None,
    )
    assert c["source"] == {"type": "feed"}
    assert c["indexer"] == {"type": "store"}
    assert (c["page_retries"], c["page_retry_backoff"], c["throttle_seconds"]) == (3, 2.0, 0.0)
    assert c["retry_on_status"] == [502, 503, 504]
    assert c["progress"] == {"pages": 0, "documents": 0}
    assert c["waiting"] is None
    assert c["documents"] == ZERO_DOCS
    assert c["sync_schedule"] == "*/15 * * * *"
    for key in ("created_at", "updated_at", "next_run_at"):
        assert UTC_TIMESTAMP.match(c[key]), c[key]
    next_run = datetime.fromisoformat(c["next_run_at"])
    assert next_run.minute % 15 == 0 and next_run > datetime.fromisoformat(c["created_at"])
    assert (c["sync_started_at"], c["last_synced_at"], c["sync_owner"]) == (None, None, None)

    got = await api.get(f"/connectors/{c['id']}")
    assert got.status == 200
    assert got.body == c


async def test_duplicate_name_is_a_conflict(api: Api) -> None:
    await api.create("tickets")
    reply = await api.post("/connectors", {"name": "tickets", "source": {"type": "feed"}})
    assert (reply.status, reply.body) == (409, {"detail": "Connector name already exists"})


async def test_every_id_route_answers_404_for_an_unknown_connector(api: Api) -> None:
    calls = [
        ("GET", f"/connectors/{MISSING}", None),
        ("PATCH", f"/connectors/{MISSING}", {"status": "paused"}),
        ("DELETE", f"/connectors/{MISSING}", None),
        ("POST", f"/connectors/{MISSING}/sync", None),
        ("POST", f"/connectors/{MISSING}/sync/abort", None),
        ("GET", f"/connectors/{MISSING}/runs", None),
        ("GET", f"/connectors/{MISSING}/documents", None),
        ("GET", f"/connectors/{MISSING}/documents/x", None),
        ("POST", f"/connectors/{MISSING}/retry-failed", None),
        ("POST", f"/connectors/{MISSING}/deletions/apply", None),
        ("GET", f"/connectors/{MISSING}/state", None),
        ("PUT", f"/connectors/{MISSING}/state", {"mark": 1}),
        ("DELETE", f"/connectors/{MISSING}/state", None),
    ]
    for method, path, body in calls:
        reply = await api.call(method, path, json_body=body)
        assert (reply.status, reply.body) == (404, {"detail": "Connector not found"}), path
    # The table lists every {id} route: this test covers all of them.
    id_routes = {(r.method, r.path) for r in ROUTES if "{id}" in r.path}
    assert len(id_routes) == len(calls)


# --- POST /connectors/{id}/sync ---------------------------------------------------------


async def test_sync_starts_a_run(harness: Harness) -> None:
    h = harness
    h.feed.records(25)
    c = await h.api.create(indexer={"type": "store"})
    reply = await h.api.post(f"/connectors/{c['id']}/sync")
    assert reply.status == 202
    run_id = reply.body["run_id"]
    assert reply.body == {"connector_id": c["id"], "run_id": run_id, "sync_status": "running"}
    await h.daemon.wait_run(c["id"])
    after = (await h.api.get(f"/connectors/{c['id']}")).body
    assert after["sync_status"] == "idle"
    assert after["status"] == "active"
    assert after["progress"] == {"pages": 3, "documents": 25}
    assert UTC_TIMESTAMP.match(after["last_synced_at"])
    assert sum(after["documents"].values()) == 25

    runs = await h.api.get(f"/connectors/{c['id']}/runs")
    assert runs.status == 200
    assert runs.body["next_cursor"] is None
    [run] = runs.body["data"]
    assert run["id"] == run_id
    assert (run["trigger"], run["outcome"], run["error"]) == ("manual", "succeeded", None)
    assert (run["pages"], run["documents_seen"], run["documents_enqueued"]) == (3, 25, 25)
    assert UTC_TIMESTAMP.match(run["started_at"]) and UTC_TIMESTAMP.match(run["finished_at"])
    # A plugin source that does not say how its crawl ended: the generic end.
    assert (run["end_reason"], run["warnings"]) == ("the source returned no next cursor", [])


async def test_sync_while_running_is_a_conflict_naming_the_run(harness: Harness) -> None:
    c = await harness.api.create()
    run_id = await start_hanging_sync(harness, c["id"])
    reply = await harness.api.post(f"/connectors/{c['id']}/sync")
    assert (reply.status, reply.body) == (
        409,
        {"detail": "Sync already in progress", "run_id": run_id},
    )
    shown = (await harness.api.get(f"/connectors/{c['id']}")).body
    assert (shown["sync_status"], shown["run_id"]) == ("running", run_id)
    assert shown["sync_owner"] == harness.daemon.owner
    assert UTC_TIMESTAMP.match(shown["sync_started_at"])


async def test_sync_of_a_paused_connector_is_a_conflict(api: Api) -> None:
    c = await api.create()
    assert (await api.patch(f"/connectors/{c['id']}", {"status": "paused"})).status == 200
    reply = await api.post(f"/connectors/{c['id']}/sync")
    assert (reply.status, reply.body) == (409, {"detail": "Connector is paused"})


async def test_sync_of_a_deleting_connector_is_a_conflict(harness: Harness) -> None:
    c = await harness.api.create()
    await set_deleting(harness, c["id"])
    reply = await harness.api.post(f"/connectors/{c['id']}/sync")
    assert (reply.status, reply.body) == (409, {"detail": "Connector is being deleted"})


async def test_concurrent_triggers_start_exactly_one_run(harness: Harness) -> None:
    c = await harness.api.create()
    harness.feed.hang_at = 0
    replies = await asyncio.gather(
        *(harness.api.post(f"/connectors/{c['id']}/sync") for _ in range(50))
    )
    started = [r for r in replies if r.status == 202]
    assert len(started) == 1
    run_id = started[0].body["run_id"]
    refused = [r for r in replies if r.status != 202]
    assert {(r.status, r.body["detail"], r.body["run_id"]) for r in refused} == {
        (409, "Sync already in progress", run_id)
    }
    await harness.feed.reached.wait()


# --- POST /connectors/{id}/sync/abort ---------------------------------------------------


async def test_abort_without_a_run_is_a_conflict(api: Api) -> None:
    c = await api.create()
    reply = await api.post(f"/connectors/{c['id']}/sync/abort")
    assert (reply.status, reply.body) == (409, {"detail": "No sync in progress"})


async def test_abort_stops_the_run_at_once(harness: Harness) -> None:
    c = await harness.api.create()
    run_id = await start_hanging_sync(harness, c["id"])
    reply = await harness.api.post(f"/connectors/{c['id']}/sync/abort")
    assert reply.status == 202
    assert reply.body == {"connector_id": c["id"], "run_id": run_id, "status": "abort_requested"}
    shown = (await harness.api.get(f"/connectors/{c['id']}")).body
    assert (shown["sync_status"], shown["run_id"], shown["status"]) == ("idle", None, "active")
    await harness.daemon.wait_run(c["id"])
    [run] = (await harness.api.get(f"/connectors/{c['id']}/runs")).body["data"]
    assert (run["id"], run["outcome"]) == (run_id, "aborted")
    again = await harness.api.post(f"/connectors/{c['id']}/sync/abort")
    assert (again.status, again.body) == (409, {"detail": "No sync in progress"})


async def test_concurrent_aborts_succeed_exactly_once(harness: Harness) -> None:
    c = await harness.api.create()
    await start_hanging_sync(harness, c["id"])
    replies = await asyncio.gather(
        *(harness.api.post(f"/connectors/{c['id']}/sync/abort") for _ in range(20))
    )
    assert sorted(r.status for r in replies) == [202] + [409] * 19
    assert {r.body["detail"] for r in replies if r.status == 409} == {"No sync in progress"}


# --- DELETE /connectors/{id} ------------------------------------------------------------


async def test_delete_while_running_is_a_conflict(harness: Harness) -> None:
    c = await harness.api.create()
    await start_hanging_sync(harness, c["id"])
    reply = await harness.api.delete(f"/connectors/{c['id']}")
    assert (reply.status, reply.body) == (
        409,
        {"detail": "Cannot delete connector while sync is running"},
    )
    assert (await harness.api.get(f"/connectors/{c['id']}")).body["status"] == "active"


async def test_delete_removes_the_connector(harness: Harness) -> None:
    c = await harness.api.create()
    reply = await harness.api.delete(f"/connectors/{c['id']}")
    assert (reply.status, reply.body) == (202, {"connector_id": c["id"], "status": "deleting"})
    await harness.daemon.wait_deleted(c["id"])
    gone = await harness.api.get(f"/connectors/{c['id']}")
    assert (gone.status, gone.body) == (404, {"detail": "Connector not found"})
    # The name is free again.
    await harness.api.create(c["name"])


async def test_delete_of_a_deleting_connector_is_accepted(harness: Harness) -> None:
    c = await harness.api.create()
    await set_deleting(harness, c["id"])
    shown = (await harness.api.get(f"/connectors/{c['id']}")).body
    assert shown["status"] == "deleting"
    reply = await harness.api.delete(f"/connectors/{c['id']}")
    assert (reply.status, reply.body) == (202, {"connector_id": c["id"], "status": "deleting"})
    await harness.daemon.wait_deleted(c["id"])
    assert (await harness.api.get(f"/connectors/{c['id']}")).status == 404


# --- PATCH /connectors/{id} -------------------------------------------------------------


async def test_patch_returns_the_updated_connector(api: Api) -> None:
    c = await api.create()
    reply = await api.patch(
        f"/connectors/{c['id']}",
        {
            "status": "paused",
            "name": "renamed",
            "sync_schedule": "0 3 * * *",
            "sync_timezone": "Europe/Paris",
            "page_retries": 5,
            "retry_on_status": [429],
            "indexer": {"type": "store"},
        },
    )
    assert reply.status == 200
    p = reply.body
    assert set(p) == CONNECTOR_KEYS
    assert (p["id"], p["status"], p["name"]) == (c["id"], "paused", "renamed")
    assert (p["sync_schedule"], p["sync_timezone"]) == ("0 3 * * *", "Europe/Paris")
    assert (p["page_retries"], p["retry_on_status"], p["indexer"]) == (5, [429], {"type": "store"})
    assert p["next_run_at"] is not None
    assert datetime.fromisoformat(p["updated_at"]) >= datetime.fromisoformat(c["updated_at"])
    assert (await api.get(f"/connectors/{c['id']}")).body == p

    back = await api.patch(f"/connectors/{c['id']}", {"status": "active", "sync_schedule": None})
    assert (back.body["status"], back.body["sync_schedule"], back.body["next_run_at"]) == (
        "active",
        None,
        None,
    )


async def test_patch_of_a_deleting_connector_is_a_conflict(harness: Harness) -> None:
    c = await harness.api.create()
    await set_deleting(harness, c["id"])
    reply = await harness.api.patch(f"/connectors/{c['id']}", {"status": "active"})
    assert (reply.status, reply.body) == (409, {"detail": "Connector is being deleted"})


async def test_patch_to_a_taken_name_is_a_conflict(api: Api) -> None:
    await api.create("one")
    two = await api.create("two")
    reply = await api.patch(f"/connectors/{two['id']}", {"name": "one"})
    assert (reply.status, reply.body) == (409, {"detail": "Connector name already exists"})


# --- GET /connectors ----------------------------------------------------------------------


async def test_list_pages_through_every_connector(api: Api) -> None:
    created = [(await api.create(f"c{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        reply = await api.get("/connectors", params=params)
        assert reply.status == 200
        assert len(reply.body["data"]) <= 2
        assert all(set(c) == CONNECTOR_KEYS for c in reply.body["data"])
        seen += [c["id"] for c in reply.body["data"]]
        pages += 1
        cursor = reply.body["next_cursor"]
        if cursor is None:
            break
    # Ordered by id (time-ordered; ids made within one millisecond may tie-break randomly).
    assert seen == sorted(created)
    assert pages == 3


async def test_list_filters_by_status(api: Api) -> None:
    a = await api.create("a")
    b = await api.create("b")
    await api.patch(f"/connectors/{b['id']}", {"status": "paused"})
    paused = await api.get("/connectors", params={"status": "paused"})
    assert [c["id"] for c in paused.body["data"]] == [b["id"]]
    active = await api.get("/connectors", params={"status": "active"})
    assert [c["id"] for c in active.body["data"]] == [a["id"]]
    assert (await api.get("/connectors", params={"status": "error"})).body == {
        "data": [],
        "next_cursor": None,
    }


async def test_list_of_nothing(api: Api) -> None:
    reply = await api.get("/connectors")
    assert (reply.status, reply.body) == (200, {"data": [], "next_cursor": None})


# --- runs -------------------------------------------------------------------------------


async def test_runs_are_listed_newest_first_in_pages(harness: Harness) -> None:
    c = await harness.api.create()
    run_ids = []
    for _ in range(3):
        reply = await harness.api.post(f"/connectors/{c['id']}/sync")
        run_ids.append(reply.body["run_id"])
        await harness.daemon.wait_run(c["id"])
    newest_first = sorted(run_ids, reverse=True)
    first = await harness.api.get(f"/connectors/{c['id']}/runs", params={"limit": "2"})
    assert [r["id"] for r in first.body["data"]] == newest_first[:2]
    second = await harness.api.get(
        f"/connectors/{c['id']}/runs", params={"limit": "2", "cursor": first.body["next_cursor"]}
    )
    assert [r["id"] for r in second.body["data"]] == newest_first[2:]
    assert second.body["next_cursor"] is None
    assert {r["outcome"] for r in first.body["data"] + second.body["data"]} == {"succeeded"}


# --- documents ----------------------------------------------------------------------------


async def crawl_then_abort(h: Harness, count: int) -> dict[str, Any]:
    """A connector whose first page (``count`` documents) was committed, then aborted while
    the second page hangs: its documents are all ``failed`` with error ``Aborted``."""
    h.feed.records(count + 1, per_page=count)
    h.feed.hang_at = 1
    c = await h.api.create()
    assert (await h.api.post(f"/connectors/{c['id']}/sync")).status == 202
    await h.feed.reached.wait()  # page 0 is committed before page 1 is requested
    assert (await h.api.post(f"/connectors/{c['id']}/sync/abort")).status == 202
    await h.daemon.wait_run(c["id"])
    return c


async def test_documents_list_get_and_retry(harness: Harness) -> None:
    h = harness
    c = await crawl_then_abort(h, 5)
    base = f"/connectors/{c['id']}/documents"

    shown = (await h.api.get(f"/connectors/{c['id']}")).body
    assert shown["documents"] == {**ZERO_DOCS, "failed": 5}

    listing = await h.api.get(base, params={"status": "failed"})
    assert listing.status == 200
    docs = listing.body["data"]
    assert [d["external_id"] for d in docs] == [f"doc-{i:03d}" for i in range(5)]
    assert set(docs[0]) == {
        "external_id",
        "status",
        "error",
        "content_hash",
        "attempts",
        "created_at",
        "updated_at",
        "indexed_at",
        "missed_crawls",
    }
    assert {(d["status"], d["error"]) for d in docs} == {("failed", "Aborted")}
    assert (await h.api.get(base, params={"status": "indexed"})).body["data"] == []

    one = await h.api.get(f"{base}/doc-003")
    assert one.status == 200
    assert one.body["payload"] == {"id": "doc-003", "n": 3}
    assert {k: v for k, v in one.body.items() if k != "payload"} == docs[3]

    missing = await h.api.get(f"{base}/nope")
    assert (missing.status, missing.body) == (404, {"detail": "Document not found"})

    retried = await h.api.post(f"/connectors/{c['id']}/retry-failed")
    assert (retried.status, retried.body) == (202, {"requeued": 5})
    assert (await h.api.get(base, params={"status": "failed"})).body["data"] == []
    counts = (await h.api.get(f"/connectors/{c['id']}")).body["documents"]
    assert counts["failed"] == 0 and counts["pending"] + counts["running"] == 5
    again = await h.api.post(f"/connectors/{c['id']}/retry-failed")
    assert (again.status, again.body) == (202, {"requeued": 0})


async def test_documents_are_paged(harness: Harness) -> None:
    c = await crawl_then_abort(harness, 7)
    seen: list[str] = []
    params = {"limit": "3"}
    while True:
        reply = await harness.api.get(f"/connectors/{c['id']}/documents", params=params)
        seen += [d["external_id"] for d in reply.body["data"]]
        if reply.body["next_cursor"] is None:
            break
        params = {"limit": "3", "cursor": reply.body["next_cursor"]}
    assert seen == [f"doc-{i:03d}" for i in range(7)]


async def test_document_ids_with_slashes_and_spaces(harness: Harness) -> None:
    harness.feed.pages = [[{"id": "a/b c", "v": 1}], [{"id": "z", "v": 2}]]
    c = await harness.api.create()
    await harness.api.post(f"/connectors/{c['id']}/sync")
    # The run's end, not the source reaching page 1: with read-ahead, page 0 may still be
    # committing then, and a read sees only what is committed.
    await harness.daemon.wait_run(c["id"])
    for path in ("a/b c", "a%2Fb%20c"):
        reply = await harness.api.get(f"/connectors/{c['id']}/documents/{path}")
        assert reply.status == 200, path
        assert reply.body["external_id"] == "a/b c"
        assert reply.body["payload"] == {"id": "a/b c", "v": 1}


# --- operations -------------------------------------------------------------------------


async def test_healthz_and_readyz(api: Api) -> None:
    health = await api.get("/healthz")
    assert (health.status, health.body) == (200, {"status": "ok"})
    ready = await api.get("/readyz")
    assert (ready.status, ready.body) == (200, {"store": "ok", "queue": "ok"})


async def test_a_store_outage_is_503_and_shown_by_readyz(harness: Harness) -> None:
    c = await harness.api.create()
    await harness.daemon.store.close()
    ready = await harness.api.get("/readyz")
    assert ready.status == 503
    assert ready.body["queue"] == "ok"
    assert ready.body["store"] != "ok" and ready.body["store"]
    reply = await harness.api.get(f"/connectors/{c['id']}")
    assert (reply.status, reply.body) == (503, {"detail": "Store unavailable"})
    assert (await harness.api.get("/healthz")).status == 200


async def test_metrics_are_labelled_by_route_pattern(api: Api) -> None:
    c = await api.create()
    await api.get(f"/connectors/{c['id']}")
    await api.get(f"/connectors/{MISSING}")
    await api.get("/no/such/path")
    reply = await api.get("/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain")
    samples = [
        s
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
        if s.name == "syncd_api_request_seconds_count"
    ]
    counts = {(s.labels["route"], s.labels["method"], s.labels["code"]): s.value for s in samples}
    assert counts[("/connectors/{id}", "GET", "200")] == 1
    assert counts[("/connectors/{id}", "GET", "404")] == 1
    assert counts[("/connectors", "POST", "201")] == 1
    assert counts[("unmatched", "GET", "404")] == 1
    assert not any(c["id"] in route or "no/such" in route for route, _, _ in counts)


async def test_openapi_describes_every_route(api: Api) -> None:
    reply = await api.get("/openapi.json")
    assert reply.status == 200
    doc = reply.body
    assert doc["openapi"] == "3.1.0"
    described = {(method.upper(), path) for path, item in doc["paths"].items() for method in item}
    assert described == {
        ("POST", "/connectors"),
        ("POST", "/connectors/preview"),
        ("GET", "/events"),
        ("GET", "/connectors"),
        ("GET", "/connectors/{id}"),
        ("PATCH", "/connectors/{id}"),
        ("DELETE", "/connectors/{id}"),
        ("POST", "/connectors/{id}/sync"),
        ("POST", "/connectors/{id}/sync/abort"),
        ("GET", "/connectors/{id}/runs"),
        ("GET", "/connectors/{id}/documents"),
        ("GET", "/connectors/{id}/documents/{external_id}"),
        ("POST", "/connectors/{id}/retry-failed"),
        ("POST", "/connectors/{id}/deletions/apply"),
        ("GET", "/connectors/{id}/state"),
        ("PUT", "/connectors/{id}/state"),
        ("DELETE", "/connectors/{id}/state"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/status"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
    }
    schemas = doc["components"]["schemas"]
    for item in doc["paths"].values():
        for op in item.values():
            for response in op["responses"].values():
                for media in response.get("content", {}).values():
                    ref = media["schema"].get("$ref")
                    if ref:
                        assert ref.removeprefix("#/components/schemas/") in schemas
    assert set(schemas["Connector"]["properties"]) == CONNECTOR_KEYS
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    get_doc = doc["paths"]["/connectors/{id}/documents/{external_id}"]["get"]
    assert [p["name"] for p in get_doc["parameters"]] == ["id", "external_id"]


async def test_the_registered_routes_are_the_described_ones(harness: Harness) -> None:
    reply = await harness.api.get("/openapi.json")
    described = {(m.upper(), p) for p, item in reply.body["paths"].items() for m in item}
    runner = harness.daemon.api_runner
    # The dashboard's static assets (syncd.ui) are pages, not API operations; the catch-all
    # routes only answer 405 for methods a path does not take.
    registered = {
        (route.method, route.resource.canonical)
        for route in runner.app.router.routes()
        if route.resource is not None
        and not route.resource.canonical.startswith("/ui")
        and route.method != "*"
    }
    assert registered == described
