"""The client commands that drive a running daemon over its control API (``list``, ``show``,
``sync``, ``edit`` …): one handler per command in :data:`COMMANDS`."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from syncd.cli import edit as cliedit
from syncd.cli.client import ApiError, Client
from syncd.cli.files import load_connector_file
from syncd.cli.follow import follow, outcome_line
from syncd.cli.format import (
    crawl_text,
    describe_connector,
    describe_document,
    describe_preview,
    describe_state,
    describe_status,
    next_run,
    short,
    ts,
)
from syncd.cli.io import EXIT_API, EXIT_OK, EXIT_USAGE, Failure, Streams, print_json, print_page
from syncd.cli.parser import PREVIEW_TIMEOUT
from syncd.errors import ConfigError

Handler = Callable[[Client, argparse.Namespace, Streams], Awaitable[int]]


async def _list(api: Client, args: argparse.Namespace, io: Streams) -> int:
    page = await api.list_connectors(status=args.status, limit=args.limit, cursor=args.cursor)
    if args.json:
        return print_json(io, page)
    rows = [
        [
            c.get("id"),
            c.get("name"),
            c.get("status"),
            c.get("sync_status"),
            ts(c.get("last_synced_at")),
            ts(next_run(c)),
            short(c.get("last_error"), 60),
        ]
        for c in page.get("data") or ()
    ]
    headers = ["ID", "NAME", "STATUS", "SYNC", "LAST SYNCED", "NEXT RUN", "LAST ERROR"]
    print_page(io, headers, rows, page, "connectors")
    return EXIT_OK


async def _show(api: Client, args: argparse.Namespace, io: Streams) -> int:
    connector = await api.resolve(args.connector)
    if connector.get("id") != args.connector:  # found by name: the list omits some fields
        connector = await api.get_connector(str(connector["id"]))
    if args.json:
        return print_json(io, connector)
    io.stdout.write(describe_connector(connector))
    return EXIT_OK


async def _create(api: Client, args: argparse.Namespace, io: Streams) -> int:
    body = await asyncio.to_thread(load_connector_file, args.file, io.stdin)
    connector = await api.create_connector(body)
    if args.json:
        return print_json(io, connector)
    io.stdout.write(f"created connector {connector.get('name')} ({connector.get('id')})\n")
    return EXIT_OK


async def _update(api: Client, args: argparse.Namespace, io: Streams) -> int:
    body = await asyncio.to_thread(load_connector_file, args.file, io.stdin)
    connector = await api.update_connector(await _resolve_id(api, args.connector), body)
    if args.json:
        return print_json(io, connector)
    io.stdout.write(f"updated connector {connector.get('name')} ({connector.get('id')})\n")
    return EXIT_OK


async def _preview(api: Client, args: argparse.Namespace, io: Streams) -> int:
    if args.target == "-" or await asyncio.to_thread(os.path.isfile, args.target):
        body = await asyncio.to_thread(load_connector_file, args.target, io.stdin)
        request: dict[str, Any] = {"connector": body}
    else:
        request = {"connector_id": await _resolve_id(api, args.target)}
    request["pages"] = args.pages
    if args.timeout is not None:
        request["timeout_seconds"] = args.timeout
    answer = await api.preview(request, timeout=args.timeout or PREVIEW_TIMEOUT)
    if args.json:
        print_json(io, answer)
    else:
        io.stdout.write(describe_preview(answer))
    if answer.get("error") is not None:
        if not args.json:
            io.stderr.write(f"error: {answer['error']}\n")
        return EXIT_API
    return EXIT_OK


async def _newest_run(api: Client, cid: str) -> dict[str, Any] | None:
    """The connector's newest run, if any."""
    runs = (await api.list_runs(cid, limit=1)).get("data") or []
    return runs[0] if runs else None


async def _wait_queued(api: Client, cid: str, interval: float) -> str | None:
    """Wait until a queued trigger leaves ``queued``: the id of the run it started (maybe
    ended already), or ``None`` when it was dropped (aborted, paused, deleted)."""
    last = await _newest_run(api, cid)
    known = last.get("id") if last else None
    while True:
        connector = await api.get_connector(cid)
        if connector.get("sync_status") != "queued":
            run = await _newest_run(api, cid)
            if run_id := connector.get("run_id"):
                return str(run_id)
            if run is not None and run.get("id") != known and run.get("trigger") == "manual":
                return str(run["id"])
            return None
        await asyncio.sleep(interval)


async def _sync(api: Client, args: argparse.Namespace, io: Streams) -> int:
    connector = await api.resolve(args.connector)
    cid = str(connector["id"])
    body: dict[str, Any] | None = None
    if args.full:
        body = {"mode": "full"}
    elif args.backfill is not None:
        since, until = args.backfill
        body = {"mode": "backfill", "since": since}
        if until is not None:
            body["until"] = until
    answer = await api.trigger_sync(cid, body)
    run_id = answer.get("run_id")
    mode = f" ({crawl_text(body)})" if body is not None else ""
    started = f"sync started: run {run_id}{mode}\n"
    if run_id is None:  # no free run slot: the trigger waits for one
        started = f"sync queued: it starts when a run slot frees{mode}\n"
    if not args.follow:
        if args.json:
            return print_json(io, answer)
        io.stdout.write(started)
        return EXIT_OK
    if not args.json:
        io.stdout.write(started)
    if run_id is None:
        run_id = await _wait_queued(api, cid, args.interval)
        if run_id is None:
            io.stderr.write("the queued sync was dropped before it started\n")
            return EXIT_API
        if not args.json:
            io.stdout.write(f"sync started: run {run_id}\n")
    run = await follow(
        api, cid, str(run_id), io.stdout, io.stderr, interval=args.interval, quiet=args.json
    )
    if args.json:
        print_json(io, run)
    else:
        io.stdout.write(outcome_line(run, indexed=_indexed_on_commit(connector)) + "\n")
    return EXIT_OK if run.get("outcome") == "succeeded" else EXIT_API


async def _state(api: Client, args: argparse.Namespace, io: Streams) -> int:
    cid = await _resolve_id(api, args.connector)
    if args.reset:
        state = await api.reset_state(cid)
    elif args.set is not None:
        state = await api.set_state(cid, args.set)
    else:
        state = await api.get_state(cid)
    if args.json:
        return print_json(io, state)
    io.stdout.write(describe_state(state))
    return EXIT_OK


async def _abort(api: Client, args: argparse.Namespace, io: Streams) -> int:
    answer = await api.abort_sync(await _resolve_id(api, args.connector))
    if args.json:
        return print_json(io, answer)
    io.stdout.write(f"abort requested: run {answer.get('run_id')}\n")
    return EXIT_OK


async def _set_status(api: Client, args: argparse.Namespace, io: Streams) -> int:
    status = "paused" if args.command == "pause" else "active"
    connector = await api.update_connector(
        await _resolve_id(api, args.connector), {"status": status}
    )
    if args.json:
        return print_json(io, connector)
    io.stdout.write(f"{connector.get('name')}: {connector.get('status')}\n")
    return EXIT_OK


async def _delete(api: Client, args: argparse.Namespace, io: Streams) -> int:
    cid = await _resolve_id(api, args.connector)
    answer = await api.delete_connector(cid)
    if args.json:
        return print_json(io, answer)
    io.stdout.write(f"deleting connector {cid}\n")
    return EXIT_OK


async def _retry_failed(api: Client, args: argparse.Namespace, io: Streams) -> int:
    answer = await api.retry_failed(await _resolve_id(api, args.connector))
    if args.json:
        return print_json(io, answer)
    io.stdout.write(f"re-queued {answer.get('requeued', 0)} failed documents\n")
    return EXIT_OK


async def _deletions(api: Client, args: argparse.Namespace, io: Streams) -> int:
    # One action so far: ``apply``.
    answer = await api.apply_deletions(await _resolve_id(api, args.connector))
    if args.json:
        return print_json(io, answer)
    io.stdout.write(f"deleting {answer.get('deleting', 0)} documents\n")
    return EXIT_OK


async def _runs(api: Client, args: argparse.Namespace, io: Streams) -> int:
    connector = await api.resolve(args.connector)
    cid = str(connector["id"])
    page = await api.list_runs(cid, limit=args.limit, cursor=args.cursor)
    if args.json:
        return print_json(io, page)
    rows = [
        [
            r.get("id"),
            _trigger(r),
            r.get("outcome"),
            ts(r.get("started_at")),
            ts(r.get("finished_at")),
            r.get("pages"),
            r.get("documents_seen"),
            r.get("documents_enqueued"),
            r.get("deleted"),
            short(r.get("end_reason"), 40),
            short(r.get("error"), 60),
        ]
        for r in page.get("data") or ()
    ]
    # An indexer that is done when the page is stored (`store`) enqueues nothing: the
    # count is then of the documents the crawl wrote, indexed there and then.
    written = "INDEXED" if _indexed_on_commit(connector) else "ENQUEUED"
    headers = [
        *("ID", "TRIGGER", "OUTCOME", "STARTED", "FINISHED", "PAGES", "SEEN", written),
        *("DELETED", "ENDED"),
    ]
    print_page(io, [*headers, "ERROR"], rows, page, "runs")
    # A warning about how a crawl ended (a misspelt path) is too long for a column.
    for r in page.get("data") or ():
        for warning in r.get("warnings") or ():
            io.stdout.write(f"warning: run {r.get('id')}: {warning}\n")
    return EXIT_OK


def _trigger(run: Mapping[str, Any]) -> str:
    """``retry #3`` for the third run in a row after failures, else the trigger alone."""
    attempt = run.get("attempt")
    trigger = str(run.get("trigger"))
    return f"{trigger} #{attempt}" if isinstance(attempt, int) and attempt > 1 else trigger


async def _documents(api: Client, args: argparse.Namespace, io: Streams) -> int:
    cid = await _resolve_id(api, args.connector)
    page = await api.list_documents(cid, status=args.status, limit=args.limit, cursor=args.cursor)
    if args.json:
        return print_json(io, page)
    rows = [
        [
            d.get("external_id"),
            d.get("status"),
            d.get("attempts"),
            ts(d.get("updated_at")),
            ts(d.get("indexed_at")),
            short(d.get("error"), 60),
        ]
        for d in page.get("data") or ()
    ]
    headers = ["EXTERNAL ID", "STATUS", "ATTEMPTS", "UPDATED", "INDEXED", "ERROR"]
    print_page(io, headers, rows, page, "documents")
    return EXIT_OK


async def _document(api: Client, args: argparse.Namespace, io: Streams) -> int:
    document = await api.get_document(await _resolve_id(api, args.connector), args.external_id)
    if args.json:
        return print_json(io, document)
    io.stdout.write(describe_document(document))
    return EXIT_OK


async def _status(api: Client, args: argparse.Namespace, io: Streams) -> int:
    status = await api.status()
    if args.json:
        return print_json(io, status)
    io.stdout.write(describe_status(status, datetime.now(UTC)))
    return EXIT_OK


async def edit(
    api: Client, args: argparse.Namespace, io: Streams, environ: Mapping[str, str]
) -> int:
    connector = await api.resolve(args.connector)
    cid = str(connector["id"])
    if cid != args.connector:  # found by name: the list omits some fields
        connector = await api.get_connector(cid)
    edited, path = await cliedit.edit_text(connector, environ)
    if edited is None:
        path.unlink(missing_ok=True)
        io.stderr.write("edit cancelled: the file is empty; nothing saved\n")
        return EXIT_OK
    patch = cliedit.changes(connector, edited, path)
    if not patch:
        path.unlink(missing_ok=True)
        io.stderr.write("no changes; nothing saved\n")
        return EXIT_OK
    try:
        updated = await api.update_connector(cid, patch)
    except ApiError as exc:
        if exc.status != 422:
            cliedit.kept_hint(path, io.stderr)
            raise
        # Invalid content, like `validate`: exit 2, each problem on its own line.
        code = Failure(io, json_mode=args.json)("invalid", EXIT_USAGE, str(exc), api=exc)
        cliedit.kept_hint(path, io.stderr)
        return code
    path.unlink(missing_ok=True)
    if args.json:
        return print_json(io, updated)
    io.stdout.write(
        f"updated connector {updated.get('name')} ({updated.get('id')}): {', '.join(patch)}\n"
    )
    return EXIT_OK


def _indexed_on_commit(connector: Mapping[str, Any]) -> bool:
    """Whether the connector's indexer kind is done once the page is stored (``store``):
    its runs' ``documents_enqueued`` are documents indexed at once, none enqueued. Kinds
    unknown here (a plugin only the daemon has) count as queued."""
    from syncd.plugins import Registry

    indexer = connector.get("indexer")
    if not isinstance(indexer, Mapping):
        return False
    kinds = Registry.builtin()
    kinds.load_entry_points()
    try:
        return kinds.indexer(indexer).indexed_on_commit
    except ConfigError:  # an unknown kind
        return False


COMMANDS: dict[str, Handler] = {
    "list": _list,
    "show": _show,
    "create": _create,
    "update": _update,
    "preview": _preview,
    "sync": _sync,
    "state": _state,
    "abort": _abort,
    "pause": _set_status,
    "resume": _set_status,
    "delete": _delete,
    "retry-failed": _retry_failed,
    "deletions": _deletions,
    "runs": _runs,
    "documents": _documents,
    "document": _document,
    "status": _status,
}


async def _resolve_id(api: Client, ref: str) -> str:
    return str((await api.resolve(ref))["id"])
