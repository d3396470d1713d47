"""The ``syncd`` command: run the daemon, or drive a running one over its control API.

Exit codes: 0 success; 1 the API refused the request (or a followed sync did not succeed);
2 bad usage or configuration; 3 the daemon could not be reached; 130 interrupted.
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
from itertools import cycle
from pathlib import Path
from typing import Any, TextIO

from syncd.client import ApiError, Client, DaemonUnreachable, url_from_listen
from syncd.config import Config
from syncd.errors import ConfigError
from syncd.models import ConnectorStatus, DocStatus

__all__ = ["EXIT_API", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_API = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130

FOLLOW_INTERVAL = 0.2  # seconds between progress polls of `sync --follow`
OUTCOME_WAIT = 10.0  # seconds `--follow` waits for the run row to record its outcome


_ID_HELP = "connector id or name"


class UsageError(Exception):
    """A command-line input that cannot be used (unreadable or invalid file): exit 2."""


@dataclass(frozen=True)
class Streams:
    """Where a command reads and writes; the process's own streams unless a test says."""

    stdin: TextIO
    stdout: TextIO
    stderr: TextIO


# --- parser ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``syncd`` argument parser."""
    from syncd import __version__

    parser = argparse.ArgumentParser(
        prog="syncd",
        description="Keep cursor-paginated sources in sync with an indexer.",
        epilog="Exit codes: 0 ok, 1 request refused or sync not successful, "
        "2 usage or configuration error, 3 daemon unreachable.",
    )
    parser.add_argument("--version", action="version", version=f"syncd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    config_opt = argparse.ArgumentParser(add_help=False)
    config_opt.add_argument(
        "--config",
        metavar="PATH",
        help="configuration file (default: $SYNCD_CONFIG, else built-in defaults)",
    )
    client = argparse.ArgumentParser(add_help=False, parents=[config_opt])
    group = client.add_argument_group("connection")
    group.add_argument(
        "--url",
        help="daemon URL: http://host:port or unix:/path "
        "(default: $SYNCD_URL, else the configuration's api.listen)",
    )
    group.add_argument(
        "--token", help="API bearer token (default: $SYNCD_API_TOKEN, else the configuration's)"
    )
    client.add_argument("--json", action="store_true", help="print the API's JSON answer")
    paged = argparse.ArgumentParser(add_help=False)
    paged.add_argument("--limit", type=_positive_int, help="at most this many items")
    paged.add_argument("--cursor", help="continue from a previous page's next cursor")

    def command(
        name: str, help_: str, *parents: argparse.ArgumentParser
    ) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, parents=list(parents))

    command("run", "run the daemon until SIGTERM/SIGINT", config_opt)
    p = command("list", "list connectors", client, paged)
    p.add_argument("--status", choices=[s.value for s in ConnectorStatus])
    command("show", "show one connector", client).add_argument(
        "connector", metavar="ID", help=_ID_HELP
    )
    p = command("create", "create a connector from a JSON file", client)
    p.add_argument("file", metavar="FILE.json", help="connector definition ('-' for stdin)")
    p = command("sync", "start a sync run", client)
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p.add_argument("--follow", "-f", action="store_true", help="show progress until it ends")
    p.add_argument(
        "--interval",
        type=_positive_float,
        default=FOLLOW_INTERVAL,
        metavar="SECONDS",
        help=f"with --follow: seconds between progress polls (default {FOLLOW_INTERVAL})",
    )
    for name, help_ in (
        ("abort", "abort the running sync"),
        ("pause", "pause a connector (no scheduled or manual syncs)"),
        ("resume", "resume a paused connector"),
        ("delete", "delete a connector, its documents and its runs"),
        ("retry-failed", "re-queue a connector's failed documents"),
    ):
        command(name, help_, client).add_argument("connector", metavar="ID", help=_ID_HELP)
    p = command("runs", "list a connector's sync runs, newest first", client, paged)
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p = command("documents", "list a connector's documents", client, paged)
    p.add_argument("connector", metavar="ID", help=_ID_HELP)
    p.add_argument("--status", choices=[s.value for s in DocStatus])
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


# --- entry points ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """The console entry point: parse ``argv`` and run the command; the exit code."""
    args = build_parser().parse_args(argv)
    streams = Streams(sys.stdin, sys.stdout, sys.stderr)
    if args.command == "run":
        return _run_daemon(args, streams.stderr, os.environ)
    try:
        return asyncio.run(execute(args, streams=streams, environ=os.environ))
    except KeyboardInterrupt:
        streams.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED


def _run_daemon(args: argparse.Namespace, stderr: TextIO, environ: Mapping[str, str]) -> int:
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
    err = streams.stderr
    try:
        url, token = _connection(args, environ)
        handler = _COMMANDS[args.command]
        async with Client(url, token=token) as api:
            return await handler(api, args, streams)
    except ConfigError as exc:
        err.write(f"error: {_config_message(exc, args.config, environ)}\n")
        return EXIT_USAGE
    except UsageError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    except ApiError as exc:
        err.write(f"error: {exc}\n")
        if exc.status == 401:
            err.write("hint: pass --token or set SYNCD_API_TOKEN\n")
        return EXIT_API
    except DaemonUnreachable as exc:
        err.write(f"error: {exc}\nhint: is the daemon running? (syncd run)\n")
        return EXIT_UNREACHABLE


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
            _ts(c.get("last_synced_at")),
            _ts(c.get("next_run_at")),
            _short(c.get("last_error"), 60),
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
    io.stdout.write(_describe(connector))
    return EXIT_OK


async def _create(api: Client, args: argparse.Namespace, io: Streams) -> int:
    name = "stdin" if args.file == "-" else args.file
    try:
        text = await asyncio.to_thread(_read_input, args.file, io.stdin)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{name} is not valid JSON: {exc}") from None
    connector = await api.create_connector(body)
    if args.json:
        return _print_json(io, connector)
    io.stdout.write(f"created connector {connector.get('name')} ({connector.get('id')})\n")
    return EXIT_OK


def _read_input(file: str, stdin: TextIO) -> str:
    return stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")


async def _sync(api: Client, args: argparse.Namespace, io: Streams) -> int:
    cid = await _resolve_id(api, args.connector)
    answer = await api.trigger_sync(cid)
    run_id = answer.get("run_id")
    if not args.follow:
        if args.json:
            return _print_json(io, answer)
        io.stdout.write(f"sync started: run {run_id}\n")
        return EXIT_OK
    if not args.json:
        io.stdout.write(f"sync started: run {run_id}\n")
    run = await _follow(api, cid, str(run_id), io, interval=args.interval, quiet=args.json)
    if args.json:
        _print_json(io, run)
    else:
        io.stdout.write(_outcome(run) + "\n")
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


async def _runs(api: Client, args: argparse.Namespace, io: Streams) -> int:
    cid = await _resolve_id(api, args.connector)
    page = await api.list_runs(cid, limit=args.limit, cursor=args.cursor)
    if args.json:
        return _print_json(io, page)
    rows = [
        [
            r.get("id"),
            r.get("trigger"),
            r.get("outcome"),
            _ts(r.get("started_at")),
            _ts(r.get("finished_at")),
            r.get("pages"),
            r.get("documents_seen"),
            r.get("documents_enqueued"),
            _short(r.get("error"), 60),
        ]
        for r in page.get("data") or ()
    ]
    headers = ["ID", "TRIGGER", "OUTCOME", "STARTED", "FINISHED", "PAGES", "SEEN", "ENQUEUED"]
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
            _ts(d.get("updated_at")),
            _ts(d.get("indexed_at")),
            _short(d.get("error"), 60),
        ]
        for d in page.get("data") or ()
    ]
    headers = ["EXTERNAL ID", "STATUS", "ATTEMPTS", "UPDATED", "INDEXED", "ERROR"]
    _print_page(io, headers, rows, page, "documents")
    return EXIT_OK


_COMMANDS: dict[str, Handler] = {
    "list": _list,
    "show": _show,
    "create": _create,
    "sync": _sync,
    "abort": _abort,
    "pause": _set_status,
    "resume": _set_status,
    "delete": _delete,
    "retry-failed": _retry_failed,
    "runs": _runs,
    "documents": _documents,
}


async def _resolve_id(api: Client, ref: str) -> str:
    return str((await api.resolve(ref))["id"])


# --- sync --follow --------------------------------------------------------------------


async def _follow(
    api: Client, cid: str, run_id: str, io: Streams, *, interval: float, quiet: bool
) -> dict[str, Any]:
    """Show progress until run ``run_id`` is over; return its run row."""
    out = io.stdout
    tty = out.isatty() and not quiet
    spinner = cycle("|/-\\")
    last: str | None = None
    try:
        while True:
            connector = await api.get_connector(cid)
            if connector.get("run_id") != run_id or connector.get("sync_status") != "running":
                break
            line = _progress_line(connector, datetime.now(UTC), countdown=tty)
            if tty:
                # One line redrawn in place; \x1b[K clears what a longer line left behind.
                out.write(f"\r{next(spinner)} {line}\x1b[K")
                out.flush()
            elif not quiet and line != last:
                out.write(line + "\n")
                out.flush()
            last = line
            await asyncio.sleep(interval)
    except asyncio.CancelledError:
        io.stderr.write(f"\nstopped following; run {run_id} goes on in the daemon\n")
        raise
    if tty and last is not None:
        out.write("\r\x1b[K")
    return await _finished_run(api, cid, run_id, interval)


async def _finished_run(api: Client, cid: str, run_id: str, interval: float) -> dict[str, Any]:
    """The run row of ``run_id`` once it records an outcome (or after ``OUTCOME_WAIT``)."""
    waited = 0.0
    while True:
        run = await _find_run(api, cid, run_id)
        if run.get("outcome") != "running" or waited >= OUTCOME_WAIT:
            return run
        await asyncio.sleep(interval)
        waited += interval


async def _find_run(api: Client, cid: str, run_id: str) -> dict[str, Any]:
    page = await api.list_runs(cid, limit=1)
    latest = page.get("data") or []
    if latest and latest[0].get("id") == run_id:
        return dict(latest[0])
    # A newer run (e.g. a scheduled one) started meanwhile: look further back.
    cursor: str | None = None
    while True:
        page = await api.list_runs(cid, cursor=cursor)
        for run in page.get("data") or ():
            if run.get("id") == run_id:
                return dict(run)
        cursor = page.get("next_cursor")
        if not cursor:
            raise ApiError(404, f"Run {run_id} not found")


def _progress_line(connector: Mapping[str, Any], now: datetime, *, countdown: bool) -> str:
    progress = connector.get("progress") or {}
    line = f"pages {progress.get('pages', 0)}  documents {progress.get('documents', 0)}"
    waiting = connector.get("waiting")
    if isinstance(waiting, Mapping):
        line += f"  waiting: {waiting.get('reason')}"
        until = _parse_ts(waiting.get("until"))
        if until is not None:
            line += f" until {until:%H:%M:%S}Z"
            if countdown:
                line += f" ({max(0.0, (until - now).total_seconds()):.0f}s)"
    return line


def _outcome(run: Mapping[str, Any]) -> str:
    outcome = str(run.get("outcome"))
    summary = (
        f"run {run.get('id')}: {run.get('pages', 0)} pages, "
        f"{run.get('documents_seen', 0)} documents seen, "
        f"{run.get('documents_enqueued', 0)} enqueued\n"
    )
    if outcome == "failed":
        return f"{summary}failed: {run.get('error')}"
    return summary + outcome


# --- formatting -----------------------------------------------------------------------


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


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under headers in aligned columns (``None`` shown as ``-``)."""
    cells = [list(headers), *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = (
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
    return "\n".join(lines) + "\n"


def _describe(connector: Mapping[str, Any]) -> str:
    """A connector as ``key: value`` lines, the way ``show`` prints it."""
    progress = connector.get("progress") or {}
    waiting = connector.get("waiting")
    documents = connector.get("documents") or {}
    fields: list[tuple[str, Any]] = [
        ("id", connector.get("id")),
        ("name", connector.get("name")),
        ("status", connector.get("status")),
        ("sync status", connector.get("sync_status")),
        ("last error", connector.get("last_error")),
        ("run id", connector.get("run_id")),
        ("sync started", _ts(connector.get("sync_started_at"))),
        ("sync owner", connector.get("sync_owner")),
        ("heartbeat", _ts(connector.get("sync_heartbeat_at"))),
        ("progress", f"{progress.get('pages', 0)} pages, {progress.get('documents', 0)} documents"),
        (
            "waiting",
            f"{waiting.get('reason')} until {_ts(waiting.get('until'))}"
            if isinstance(waiting, Mapping)
            else None,
        ),
        ("last synced", _ts(connector.get("last_synced_at"))),
        ("schedule", _schedule(connector)),
        ("next run", _ts(connector.get("next_run_at"))),
        ("documents", ", ".join(f"{k} {v}" for k, v in documents.items()) or None),
        ("source", connector.get("source")),
        ("indexer", connector.get("indexer")),
        ("page retries", connector.get("page_retries")),
        ("retry backoff", connector.get("page_retry_backoff")),
        ("throttle", connector.get("throttle_seconds")),
        ("retry on status", connector.get("retry_on_status")),
        ("created", _ts(connector.get("created_at"))),
        ("updated", _ts(connector.get("updated_at"))),
    ]
    width = max(len(k) for k, _ in fields) + 1
    return "".join(f"{(k + ':').ljust(width)}  {_cell(v)}\n" for k, v in fields)


def _schedule(connector: Mapping[str, Any]) -> str | None:
    cron, zone = connector.get("sync_schedule"), connector.get("sync_timezone")
    return f"{cron} ({zone})" if cron and zone else cron


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value.replace("\n", " ")
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _short(value: Any, width: int) -> str | None:
    if value is None:
        return None
    text = str(value).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def _ts(value: Any) -> str | None:
    """An API timestamp, compact and in UTC (``2024-05-01 12:00:03Z``); as is if unparsable."""
    if value is None:
        return None
    parsed = _parse_ts(value)
    return str(value) if parsed is None else f"{parsed:%Y-%m-%d %H:%M:%S}Z"
