"""The ``syncd`` command: run the daemon, or drive a running one over its control API.

Exit codes: 0 success; 1 the API refused the request (or a followed sync did not succeed, or
a preview's source failed); 2 bad usage or configuration, or an invalid connector file
(``validate``, ``edit``); 3 the daemon could not be reached; 130 interrupted (Ctrl-C).
With ``--json`` an error is also written to stdout as ``{"error": {...}}`` (same exit code).

The configuration (where the daemon listens, its token) is found the same way by ``run`` and
every client command: ``--config``, else ``$SYNCD_CONFIG``, else ``./config.toml`` when it
exists, else the built-in defaults.

Connector files (``create``, ``update``, ``validate``, ``preview``) are YAML or JSON: by the
extension (``.yaml``/``.yml``/``.json``), else (``-`` for stdin, any other name) by content:
JSON when it starts with ``{``, YAML otherwise. YAML is read with ``yaml.safe_load``; it must
hold only what JSON can (string keys, no dates: quote them, finite numbers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from syncd import cliedit
from syncd.client import ApiError, Client, DaemonUnreachable, url_from_listen
from syncd.clifollow import follow, outcome_line
from syncd.cliformat import (
    describe_connector,
    describe_document,
    describe_preview,
    describe_status,
    next_run,
    render_table,
    short,
    ts,
)
from syncd.cliparser import PREVIEW_TIMEOUT, build_parser
from syncd.config import Config
from syncd.connfiles import ConnectorFileError, load_connector_file
from syncd.errors import ConfigError

__all__ = ["EXIT_API", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_API = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130


DEFAULT_CONFIG = "config.toml"  # looked for in the working directory, by every command


class UsageError(Exception):
    """A command-line input that cannot be used (unreadable or invalid file): exit 2."""


@dataclass(frozen=True)
class Streams:
    """Where a command reads and writes; the process's own streams unless a test says."""

    stdin: TextIO
    stdout: TextIO
    stderr: TextIO


# --- entry points ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """The console entry point: parse ``argv`` and run the command; the exit code."""
    args = build_parser().parse_args(argv)
    streams = Streams(sys.stdin, sys.stdout, sys.stderr)
    if args.command == "run":
        return _run_daemon(args, streams.stderr, os.environ)
    if args.command == "validate":
        return validate(args, streams, os.environ)
    if args.command == "schema":
        return print_schema(streams)
    if args.command == "init":
        return init(args, streams, os.environ)
    if args.command == "completion":
        return completion(args, streams)
    try:
        return asyncio.run(execute(args, streams=streams, environ=os.environ))
    except KeyboardInterrupt:
        # `sync --follow` has said that its run goes on: "interrupted" (a run outcome's
        # name) would say the opposite.
        if not (args.command == "sync" and args.follow):
            streams.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED


def config_path(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The ``--config`` every command passes to ``Config.load``: the option, else (unless
    ``$SYNCD_CONFIG`` names a file, which ``Config.load`` reads itself) ``./config.toml``
    when it exists — what ``syncd init`` writes — else none (built-in defaults)."""
    path: str | None = getattr(args, "config", None) or None
    if path is None and not environ.get("SYNCD_CONFIG") and os.path.isfile(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    return path


def completion(args: argparse.Namespace, io: Streams) -> int:
    """``syncd completion bash|zsh``: the completion script, generated from the parser."""
    import shtab

    script = shtab.complete(build_parser(), shell=args.shell)
    io.stdout.write(script if script.endswith("\n") else script + "\n")
    return EXIT_OK


def init(args: argparse.Namespace, io: Streams, environ: Mapping[str, str]) -> int:
    """``syncd init``: write the shipped example configuration (and units) to start from;
    refuses (exit 2) to overwrite anything without ``--force``."""
    from syncd import data

    config = Path(args.config or environ.get("SYNCD_CONFIG") or data.CONFIG)
    systemd_dir = None if args.systemd is None else Path(args.systemd)
    try:
        written = data.write_examples(data.plan(config, systemd_dir), force=args.force)
    except OSError as exc:
        io.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    io.stdout.write("".join(f"wrote {path}\n" for path in written))
    return EXIT_OK


def _run_daemon(args: argparse.Namespace, stderr: TextIO, environ: Mapping[str, str]) -> int:
    args.config = config_path(args, environ)
    try:
        config = Config.load(args.config, environ=environ)
    except ConfigError as exc:
        stderr.write(f"error: {_config_message(exc, args.config, environ)}\n")
        return EXIT_USAGE
    # Imported here: the client commands need none of the daemon's machinery.
    from syncd.runner import run_service

    try:
        return asyncio.run(run_service(config))
    except ConfigError as exc:  # e.g. the API refusing its listen address
        stderr.write(f"error: {_config_message(exc, args.config, environ)}\n")
        return EXIT_USAGE


def _config_message(exc: ConfigError, path: str | None, environ: Mapping[str, str]) -> str:
    """``exc`` prefixed with the file it is about, when that is not already said."""
    path = path or environ.get("SYNCD_CONFIG") or None
    if path is None or exc.key.startswith("SYNCD_") or exc.key == str(Path(path)):
        return str(exc)
    return f"{path}: {exc}"


async def execute(
    args: argparse.Namespace,
    *,
    streams: Streams,
    environ: Mapping[str, str] = os.environ,
) -> int:
    """Run a client command (everything but ``run``) against the daemon; the exit code."""
    failed = _Failure(streams, json_mode=bool(getattr(args, "json", False)))
    args.config = config_path(args, environ)
    try:
        url, token = _connection(args, environ)
        async with Client(url, token=token) as api:
            if args.command == "edit":
                return await _edit(api, args, streams, environ)
            return await _COMMANDS[args.command](api, args, streams)
    except ConfigError as exc:
        return failed("config", EXIT_USAGE, _config_message(exc, args.config, environ))
    except (UsageError, ConnectorFileError) as exc:
        return failed("usage", EXIT_USAGE, str(exc))
    except cliedit.EditError as exc:
        code = failed("invalid", EXIT_USAGE, str(exc))
        if exc.kept is not None:
            cliedit.kept_hint(exc.kept, streams.stderr)
        return code
    except ApiError as exc:
        hint = "pass --token or set SYNCD_API_TOKEN" if exc.status == 401 else None
        return failed("api", EXIT_API, str(exc), hint=hint, api=exc)
    except DaemonUnreachable as exc:
        hint = "is the daemon running? (syncd run)"
        return failed("unreachable", EXIT_UNREACHABLE, str(exc), hint=hint)


@dataclass(frozen=True)
class _Failure:
    """How a client command reports an error: ``error:`` lines on stderr (a validation
    error's fields one per line), and with ``--json`` also one JSON object on stdout:
    ``{"error": {"kind", "message", "exit_code"[, "status", "detail", "problems", "body"]}}``
    (an API error's ``status``, ``detail`` and the API's own JSON ``body``)."""

    io: Streams
    json_mode: bool

    def __call__(
        self,
        kind: str,
        code: int,
        message: str,
        *,
        hint: str | None = None,
        api: ApiError | None = None,
    ) -> int:
        err = self.io.stderr
        if api is not None and api.problems:  # a validation error: one line per field
            err.write("".join(f"error: {api.status} {line}\n" for line in api.problems))
        else:
            err.write("".join(f"error: {line}\n" for line in message.splitlines()))
        if hint is not None:
            err.write(f"hint: {hint}\n")
        if self.json_mode:
            error: dict[str, Any] = {"kind": kind, "message": message, "exit_code": code}
            if api is not None:
                error.update(status=api.status, detail=api.detail)
                if api.problems:
                    error["problems"] = list(api.problems)
                if api.body is not None:
                    error["body"] = api.body
            _print_json(self.io, {"error": error})
        return code


def _connection(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """The daemon URL and token: options, then environment, then the configuration."""
    url: str | None = args.url or environ.get("SYNCD_URL") or None
    token: str | None = args.token or environ.get("SYNCD_API_TOKEN") or None
    has_file = bool(args.config or environ.get("SYNCD_CONFIG"))
    if url is None or (token is None and has_file):
        env = dict(environ)
        if token is not None:
            # A token given here overrides the file's, so an unreadable token_file is moot.
            env["SYNCD_API_TOKEN"] = token
            env.pop("SYNCD_API_TOKEN_FILE", None)
        config = Config.load(args.config, environ=env)
        url = url or url_from_listen(config.api.listen)
        token = token or config.api.token
    try:
        Client(url)  # validates the URL's shape before anything is sent
    except ValueError as exc:
        raise UsageError(f"--url: {exc}") from None
    return url, token


# --- connector files ------------------------------------------------------------------


def print_schema(io: Streams) -> int:
    """``syncd schema``: the JSON Schema of a connector file, with the kinds installed here
    (built-in and entry-point plugins)."""
    from syncd.plugins import Registry
    from syncd.schema import connector_file_schema

    kinds = Registry.builtin()
    kinds.load_entry_points()
    io.stdout.write(json.dumps(connector_file_schema(kinds), indent=2) + "\n")
    return EXIT_OK


def validate(args: argparse.Namespace, io: Streams, environ: Mapping[str, str]) -> int:
    """``syncd validate FILE``: the API's checks of a create body, offline. Prints ``valid``
    (exit 0) or one ``path: message`` line per error (exit 2)."""
    # Imported here: only this command needs the kinds (and the http source they pull in).
    from syncd.errors import ValidationError
    from syncd.plugins import Registry
    from syncd.spec import parse_create

    args.config = config_path(args, environ)
    try:
        # The daemon's paginator defaults, which a create without those keys gets.
        defaults = Config.load(args.config, environ=environ).sync.paginator
        body = load_connector_file(args.file, io.stdin)
    except ConfigError as exc:
        io.stderr.write(f"error: {_config_message(exc, args.config, environ)}\n")
        return EXIT_USAGE
    except (UsageError, ConnectorFileError) as exc:
        io.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    kinds = Registry.builtin()
    kinds.load_entry_points()
    try:
        parse_create(body, defaults=defaults, kinds=kinds)
    except ValidationError as exc:
        io.stdout.write("".join(f"{path}: {msg}\n" for path, msg in exc.errors.items()))
        return EXIT_USAGE
    io.stdout.write("valid\n")
    return EXIT_OK


# --- commands -------------------------------------------------------------------------

Handler = Callable[[Client, argparse.Namespace, Streams], Awaitable[int]]


async def _list(api: Client, args: argparse.Namespace, io: Streams) -> int:
    page = await api.list_connectors(status=args.status, limit=args.limit, cursor=args.cursor)
    if args.json:
        return _print_json(io, page)
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
    _print_page(io, headers, rows, page, "connectors")
    return EXIT_OK


async def _show(api: Client, args: argparse.Namespace, io: Streams) -> int:
    connector = await api.resolve(args.connector)
    if connector.get("id") != args.connector:  # found by name: the list omits some fields
        connector = await api.get_connector(str(connector["id"]))
    if args.json:
        return _print_json(io, connector)
    io.stdout.write(describe_connector(connector))
    return EXIT_OK


async def _create(api: Client, args: argparse.Namespace, io: Streams) -> int:
    body = await asyncio.to_thread(load_connector_file, args.file, io.stdin)
    connector = await api.create_connector(body)
    if args.json:
        return _print_json(io, connector)
    io.stdout.write(f"created connector {connector.get('name')} ({connector.get('id')})\n")
    return EXIT_OK


async def _update(api: Client, args: argparse.Namespace, io: Streams) -> int:
    body = await asyncio.to_thread(load_connector_file, args.file, io.stdin)
    connector = await api.update_connector(await _resolve_id(api, args.connector), body)
    if args.json:
        return _print_json(io, connector)
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
        _print_json(io, answer)
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
    answer = await api.trigger_sync(cid)
    run_id = answer.get("run_id")
    started = f"sync started: run {run_id}\n"
    if run_id is None:  # no free run slot: the trigger waits for one
        started = "sync queued: it starts when a run slot frees\n"
    if not args.follow:
        if args.json:
            return _print_json(io, answer)
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
        _print_json(io, run)
    else:
        io.stdout.write(outcome_line(run, indexed=_indexed_on_commit(connector)) + "\n")
    return EXIT_OK if run.get("outcome") == "succeeded" else EXIT_API


async def _abort(api: Client, args: argparse.Namespace, io: Streams) -> int:
    answer = await api.abort_sync(await _resolve_id(api, args.connector))
    if args.json:
        return _print_json(io, answer)
    io.stdout.write(f"abort requested: run {answer.get('run_id')}\n")
    return EXIT_OK


async def _set_status(api: Client, args: argparse.Namespace, io: Streams) -> int:
    status = "paused" if args.command == "pause" else "active"
    connector = await api.update_connector(
        await _resolve_id(api, args.connector), {"status": status}
    )
    if args.json:
        return _print_json(io, connector)
    io.stdout.write(f"{connector.get('name')}: {connector.get('status')}\n")
    return EXIT_OK


async def _delete(api: Client, args: argparse.Namespace, io: Streams) -> int:
    cid = await _resolve_id(api, args.connector)
    answer = await api.delete_connector(cid)
    if args.json:
        return _print_json(io, answer)
    io.stdout.write(f"deleting connector {cid}\n")
    return EXIT_OK


async def _retry_failed(api: Client, args: argparse.Namespace, io: Streams) -> int:
    answer = await api.retry_failed(await _resolve_id(api, args.connector))
    if args.json:
        return _print_json(io, answer)
    io.stdout.write(f"re-queued {answer.get('requeued', 0)} failed documents\n")
    return EXIT_OK


async def _deletions(api: Client, args: argparse.Namespace, io: Streams) -> int:
    # One action so far: ``apply``.
    answer = await api.apply_deletions(await _resolve_id(api, args.connector))
    if args.json:
        return _print_json(io, answer)
    io.stdout.write(f"deleting {answer.get('deleting', 0)} documents\n")
    return EXIT_OK


async def _runs(api: Client, args: argparse.Namespace, io: Streams) -> int:
    connector = await api.resolve(args.connector)
    cid = str(connector["id"])
    page = await api.list_runs(cid, limit=args.limit, cursor=args.cursor)
    if args.json:
        return _print_json(io, page)
    rows = [
        [
            r.get("id"),
            r.get("trigger"),
            r.get("outcome"),
            ts(r.get("started_at")),
            ts(r.get("finished_at")),
            r.get("pages"),
            r.get("documents_seen"),
            r.get("documents_enqueued"),
            r.get("deleted"),
            short(r.get("error"), 60),
        ]
        for r in page.get("data") or ()
    ]
    # An indexer that is done when the page is stored (`store`) enqueues nothing: the
    # count is then of the documents the crawl wrote, indexed there and then.
    written = "INDEXED" if _indexed_on_commit(connector) else "ENQUEUED"
    headers = [
        *("ID", "TRIGGER", "OUTCOME", "STARTED", "FINISHED", "PAGES", "SEEN", written),
        "DELETED",
    ]
    _print_page(io, [*headers, "ERROR"], rows, page, "runs")
    return EXIT_OK


async def _documents(api: Client, args: argparse.Namespace, io: Streams) -> int:
    cid = await _resolve_id(api, args.connector)
    page = await api.list_documents(cid, status=args.status, limit=args.limit, cursor=args.cursor)
    if args.json:
        return _print_json(io, page)
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
    _print_page(io, headers, rows, page, "documents")
    return EXIT_OK


async def _document(api: Client, args: argparse.Namespace, io: Streams) -> int:
    document = await api.get_document(await _resolve_id(api, args.connector), args.external_id)
    if args.json:
        return _print_json(io, document)
    io.stdout.write(describe_document(document))
    return EXIT_OK


async def _status(api: Client, args: argparse.Namespace, io: Streams) -> int:
    status = await api.status()
    if args.json:
        return _print_json(io, status)
    io.stdout.write(describe_status(status, datetime.now(UTC)))
    return EXIT_OK


async def _edit(
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
        code = _Failure(io, json_mode=args.json)("invalid", EXIT_USAGE, str(exc), api=exc)
        cliedit.kept_hint(path, io.stderr)
        return code
    path.unlink(missing_ok=True)
    if args.json:
        return _print_json(io, updated)
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


_COMMANDS: dict[str, Handler] = {
    "list": _list,
    "show": _show,
    "create": _create,
    "update": _update,
    "preview": _preview,
    "sync": _sync,
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


# --- output -------------------------------------------------------------------------


def _print_json(io: Streams, value: Any) -> int:
    io.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    return EXIT_OK


def _print_page(
    io: Streams, headers: list[str], rows: list[list[Any]], page: Mapping[str, Any], noun: str
) -> None:
    if rows:
        io.stdout.write(render_table(headers, rows))
    else:
        io.stderr.write(f"no {noun}\n")
    if page.get("next_cursor"):
        io.stderr.write(f"more {noun}: add --cursor {page['next_cursor']}\n")
